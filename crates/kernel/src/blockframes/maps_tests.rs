//! Bitmaps on the blocks: `BlockFrames::with_maps_on_blocks`.

use core::ptr::NonNull;
use std::vec;
use std::vec::Vec;

use super::*;

const FIRST: u64 = 0x4_0000;
const FRAMES: u64 = 512;

fn at(memory: &mut [u64]) -> NonNull<u64> {
    NonNull::new(memory.as_mut_ptr()).unwrap()
}

#[test]
fn the_heap_holds_a_pointer_per_block_not_two_bits_per_frame() {
    let blocks = 32768; // 64 GiB of 2 MiB blocks
    let on_heap = BlockFrames::new(Pfn(FIRST), blocks, FRAMES).unwrap();
    let on_blocks = BlockFrames::with_maps_on_blocks(Pfn(FIRST), blocks, FRAMES).unwrap();
    assert!(on_heap.heap_bytes() > 4 << 20, "{}", on_heap.heap_bytes());
    // A pointer a block and four bits a block (handed over, with a free
    // frame, isolated, kernel): the counts are on the blocks too.
    let pointers = blocks as u64 * 8;
    let bits = 4 * (blocks as u64 / 64) * 8;
    assert_eq!(on_blocks.heap_bytes(), pointers + bits);
}

#[test]
fn a_blocks_counts_live_after_its_bitmaps_in_its_memory() {
    let words = BlockFrames::map_words(FRAMES);
    let bitmap = (FRAMES / 64) as usize;
    let mut memory = vec![u64::MAX; words];
    let frames = BlockFrames::with_maps_on_blocks(Pfn(FIRST), 4, FRAMES).unwrap();
    // SAFETY: `memory` outlives the block's time in the allocator.
    assert!(unsafe { frames.add_blocks_with_maps(1, 1, Online::Movable, 3, at(&mut memory)) });
    let counts = &memory[2 * bitmap..2 * bitmap + 3];
    assert_eq!(counts, [FRAMES - 3, 0, 3], "free, unmovable, reserved");
    assert!(
        memory[2 * bitmap + 3..].iter().all(|&word| word == 0),
        "owner words cleared: no frame has an owner"
    );
    let frame = frames.alloc().unwrap();
    assert_eq!(memory[2 * bitmap], FRAMES - 4, "a frame taken");
    assert_eq!(frames.block_use(1).map(|use_| use_.used), Some(1));
    // Written behind the allocator's back, the count is what it reads.
    memory[2 * bitmap] = FRAMES - 5;
    assert_eq!(frames.block_use(1).map(|use_| use_.used), Some(2));
    memory[2 * bitmap] = FRAMES - 4;
    assert!(frames.free(frame) && frames.take_block(1));
    assert_eq!(
        &memory[2 * bitmap..2 * bitmap + 3],
        [0, 0, 0],
        "cleared when taken back"
    );
}

#[test]
fn blocks_come_with_their_bitmaps_or_are_refused() {
    let mut memory = vec![0u64; BlockFrames::map_words(FRAMES) * 2];
    let on_blocks = BlockFrames::with_maps_on_blocks(Pfn(FIRST), 4, FRAMES).unwrap();
    assert!(!on_blocks.add_blocks(0, 1));
    assert!(!on_blocks.add_blocks_reserving(0, 1, Online::Movable, 2));
    let on_heap = BlockFrames::new(Pfn(FIRST), 4, FRAMES).unwrap();
    // SAFETY: refused before any use of the memory.
    let refused =
        unsafe { on_heap.add_blocks_with_maps(0, 1, Online::Movable, 0, at(&mut memory)) };
    assert!(!refused, "an allocator with heap bitmaps takes no memory");
    assert_eq!(on_blocks.counts(), (0, 0));
    assert_eq!(on_heap.counts(), (0, 0));
}

#[test]
fn a_block_taken_back_never_reads_or_writes_its_memory_again() {
    let words = BlockFrames::map_words(FRAMES);
    let mut memory = vec![0u64; words * 2];
    let frames = BlockFrames::with_maps_on_blocks(Pfn(FIRST), 4, FRAMES).unwrap();
    // Stale bits in the memory must not leak into the block's bitmaps.
    memory.fill(u64::MAX);
    // SAFETY: `memory` outlives the blocks' time in the allocator.
    assert!(unsafe { frames.add_blocks_with_maps(1, 2, Online::Movable, 1, at(&mut memory)) });
    assert_eq!(frames.counts(), (2 * (FRAMES - 1), 2 * (FRAMES - 1)));
    let unmovable = frames.alloc_as(Mobility::Unmovable);
    assert_eq!(unmovable, None, "a movable block takes no unmovable frame");
    let first = frames.alloc().unwrap();
    assert_eq!(
        first,
        Pfn(FIRST + FRAMES + 1),
        "block 1, past its reserved frame"
    );
    assert!(frames.is_used(first) && !frames.is_unmovable(first));
    assert!(frames.free(first) && !frames.free(first));
    // Block 2 goes; its memory is then someone else's.
    assert!(frames.take_block(2));
    let before: Vec<u64> = memory.clone();
    memory[words..].fill(0x5555_5555_5555_5555);
    let last = Pfn(FIRST + 3 * FRAMES - 1);
    assert!(!frames.is_used(last) && !frames.is_unmovable(last) && !frames.free(last));
    let mut visited = 0;
    frames.each_used(2, |_| visited += 1);
    assert_eq!(visited, 0);
    assert_eq!(frames.block_use(2), None);
    // Every frame handed out now is block 1's.
    let taken: Vec<Pfn> = core::iter::from_fn(|| frames.alloc()).collect();
    assert_eq!(taken.len() as u64, FRAMES - 1);
    assert!(taken.iter().all(|frame| frames.block_of(*frame) == Some(1)));
    assert!(memory[words..]
        .iter()
        .all(|&word| word == 0x5555_5555_5555_5555));
    assert_ne!(
        memory[..words],
        before[words..],
        "block 1's bitmap was written"
    );
    // Block 2 comes back with new memory.
    let mut again = vec![u64::MAX; words];
    // SAFETY: as above.
    assert!(unsafe { frames.add_blocks_with_maps(2, 1, Online::Movable, 0, at(&mut again)) });
    assert_eq!(frames.alloc(), Some(Pfn(FIRST + 2 * FRAMES)));
    for frame in taken {
        assert!(frames.free(frame));
    }
}
