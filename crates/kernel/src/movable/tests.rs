//! The reverse map on the blocks' own memory, and the slots' chunks.

use core::ptr::NonNull;
use std::vec;
use std::vec::Vec;

use super::*;
use crate::blockframes::Online;
use crate::migrate::{shrink_block, NoHooks};

const FIRST: u64 = 0x8_0000;
const FRAMES: u64 = 64;
/// Words of a block's memory before its owner words: two bitmaps of one
/// word, then three counts.
const OWNERS_AT: usize = 2 + 3;

/// Two blocks of [`FRAMES`] whose bitmaps and reverse map are in
/// `memory`, a block's [`BlockFrames::map_words`] after the other.
fn on_blocks() -> (MovableFrames, Vec<u64>) {
    let blocks = BlockFrames::with_maps_on_blocks(Pfn(FIRST), 2, FRAMES).unwrap();
    let frames = MovableFrames::over(blocks).unwrap();
    let memory = vec![0u64; 2 * BlockFrames::map_words(FRAMES)];
    (frames, memory)
}

fn hand_over(frames: &MovableFrames, memory: &mut [u64], block: usize) -> bool {
    let at = block * BlockFrames::map_words(FRAMES);
    let maps = NonNull::new(memory[at..].as_mut_ptr()).unwrap();
    // SAFETY: `memory` outlives the allocator's use of the block in every
    // test, and nothing else writes it while the block is handed over.
    unsafe {
        frames
            .blocks()
            .add_blocks_with_maps(block, 1, Online::Movable, 0, maps)
    }
}

/// The owner word of frame `index` of `block`, read from the block's
/// memory: 0 for none, else the slot plus one.
fn owner_word(memory: &[u64], block: usize, index: u64) -> u32 {
    let word = memory[block * BlockFrames::map_words(FRAMES) + OWNERS_AT + index as usize / 2];
    (word >> (32 * (index % 2))) as u32
}

#[test]
fn the_reverse_map_is_in_the_blocks_memory_and_cleared_each_hand_over() {
    let (frames, mut memory) = on_blocks();
    assert_eq!(frames.blocks().owner_heap_bytes(), 0);
    assert!(hand_over(&frames, &mut memory, 0));
    let slots: Vec<Slot> = (0..10).map(|_| frames.alloc_in(0).unwrap()).collect();
    for &slot in &slots {
        let frame = frames.frame_of(slot).unwrap();
        assert_eq!(owner_word(&memory, 0, frame.0 - FIRST), slot.index() + 1);
        assert_eq!(frames.owner_of(frame), Some(slot));
    }
    let freed = slots[3];
    let frame = frames.frame_of(freed).unwrap();
    assert!(frames.free(freed));
    assert_eq!(
        owner_word(&memory, 0, frame.0 - FIRST),
        0,
        "freed, no owner"
    );
    for &slot in slots.iter().filter(|&&slot| slot != freed) {
        assert!(frames.free(slot));
    }
    assert!(frames.blocks().take_block(0));
    assert_eq!(frames.owner_of(Pfn(FIRST)), None, "a block not handed over");
    // Whatever the memory held meanwhile, the block comes back with no
    // owners.
    memory.fill(u64::MAX);
    assert!(hand_over(&frames, &mut memory, 0));
    assert!((0..FRAMES).all(|index| frames.owner_of(Pfn(FIRST + index)).is_none()));
    let slot = frames.alloc_in(0).unwrap();
    assert_eq!(frames.frame_of(slot), Some(Pfn(FIRST)));
    assert_eq!(owner_word(&memory, 0, 0), slot.index() + 1);
    assert_eq!(owner_word(&memory, 0, 1), 0);
}

#[test]
fn a_migration_moves_the_owner_word_to_the_target_blocks_memory() {
    let (frames, mut memory) = on_blocks();
    let arena = Arena::new(Pfn(FIRST), 2 * FRAMES as usize, 2);
    assert!(hand_over(&frames, &mut memory, 0) && hand_over(&frames, &mut memory, 1));
    let slots: Vec<Slot> = (0..5u64)
        .map(|owner| {
            let slot = frames.alloc_in(0).unwrap();
            assert!(frames.write(slot, &arena, &[owner, owner]));
            slot
        })
        .collect();
    assert_eq!(
        shrink_block(&frames, &arena, 0, &NoHooks).unwrap().migrated,
        5
    );
    for (owner, &slot) in slots.iter().enumerate() {
        let frame = frames.frame_of(slot).unwrap();
        assert_eq!(frames.blocks().block_of(frame), Some(1));
        assert_eq!(
            owner_word(&memory, 1, frame.0 - FIRST - FRAMES),
            slot.index() + 1
        );
        assert_eq!(frames.owner_of(frame), Some(slot));
        let mut words = [0; 2];
        assert!(frames.read(slot, &arena, &mut words));
        assert_eq!(words, [owner as u64; 2]);
    }
    assert!(
        (0..FRAMES).all(|index| owner_word(&memory, 0, index) == 0),
        "the old block's words left with no owner"
    );
}

#[test]
fn slots_are_made_a_chunk_at_a_time_and_freed_ones_are_reused_first() {
    // Three chunks' worth of frames, in blocks of a chunk.
    let frames = MovableFrames::new(Pfn(FIRST), 3, 4096).unwrap();
    let reverse_map = 3 * 4096 * 4;
    let directory = 3 * 8;
    assert_eq!(frames.owner_table_bytes(), directory + reverse_map);
    assert!(frames.blocks().add_blocks(0, 3));
    let chunk = 4096 * 16;
    let slots: Vec<Slot> = (0..4096).map(|_| frames.alloc().unwrap()).collect();
    assert_eq!(frames.owner_table_bytes(), directory + reverse_map + chunk);
    assert!(frames.free(slots[17]));
    let again = frames.alloc().unwrap();
    assert_eq!(again, slots[17], "a freed slot before a new chunk");
    assert_eq!(frames.owner_table_bytes(), directory + reverse_map + chunk);
    let next = frames.alloc().unwrap();
    assert_eq!(next.index(), 4096);
    assert_eq!(
        frames.owner_table_bytes(),
        directory + reverse_map + 2 * chunk
    );
    // A slot index in no chunk made holds nothing.
    assert_eq!(frames.frame_of(Slot::from_index(3 * 4096 - 1)), None);
    assert_eq!(frames.frame_of(Slot::from_index(u32::MAX)), None);
}
