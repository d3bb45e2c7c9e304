//! Taking memory away while it is used: migrate types and isolation in
//! the block allocator, the shrink's refusals, failure injection (a target
//! allocation failing at the k-th frame, a copy failing mid-migration, a
//! grow between isolation and take) and owners reading and writing their
//! frames on std threads while shrinks migrate them. The random sequences
//! are in `tests/migrate_model.rs`, the loom models in
//! `tests/migrate_loom.rs`.
#![cfg(not(loom))]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::vec::Vec;

use hotkern_kernel::blockframes::{BlockFrames, IsolateError, Mobility, Online};
use hotkern_kernel::migrate::{shrink, shrink_block, NoHooks, ShrinkError, ShrinkHooks};
use hotkern_kernel::movable::{Arena, CopyFault, FrameMemory, MovableFrames, Slot};
use hotkern_physmem::Pfn;

const FIRST: u64 = 0x1000;
const WORDS: usize = 4;

/// Word `word` of an owner's frame at generation `generation`: word 0
/// names both, the others are mixed from it, so a torn frame or one of
/// another owner or generation fails [`check`].
fn pattern(owner: u64, generation: u64, word: usize) -> u64 {
    let head = owner << 32 | generation;
    if word == 0 {
        head
    } else {
        (head ^ word as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)
    }
}

fn frame_of(owner: u64, generation: u64) -> [u64; WORDS] {
    core::array::from_fn(|word| pattern(owner, generation, word))
}

/// The (owner, generation) a frame's words were written with, if they
/// are whole.
fn check(words: &[u64; WORDS]) -> Option<(u64, u64)> {
    let (owner, generation) = (words[0] >> 32, words[0] & 0xffff_ffff);
    (*words == frame_of(owner, generation)).then_some((owner, generation))
}

fn setup(blocks: usize, block_frames: u64) -> (MovableFrames, Arena) {
    let frames = MovableFrames::new(Pfn(FIRST), blocks, block_frames).unwrap();
    let memory = Arena::new(Pfn(FIRST), blocks * block_frames as usize, WORDS);
    (frames, memory)
}

/// Allocates `count` owners, owner `i` writing generation 1.
fn owners(frames: &MovableFrames, memory: &Arena, count: u64) -> Vec<(u64, Slot)> {
    (0..count)
        .map(|owner| {
            let slot = frames.alloc().expect("room for the owners");
            assert!(frames.write(slot, memory, &frame_of(owner, 1)));
            (owner, slot)
        })
        .collect()
}

/// Every owner re-reads its frame intact, no two share a frame, and the
/// reverse map points back at each.
fn all_intact(frames: &MovableFrames, memory: &Arena, slots: &[(u64, Slot)], generation: u64) {
    let mut seen = std::collections::BTreeSet::new();
    for &(owner, slot) in slots {
        let mut words = [0; WORDS];
        assert!(frames.read(slot, memory, &mut words));
        assert_eq!(check(&words), Some((owner, generation)), "owner {owner}");
        let frame = frames.frame_of(slot).unwrap();
        assert!(seen.insert(frame), "frame {frame:?} owned twice");
        assert_eq!(frames.owner_of(frame), Some(slot));
        assert!(
            frames.blocks().holds(frame),
            "owner {owner} in a block taken back"
        );
    }
}

#[test]
fn unmovable_frames_land_only_in_blocks_handed_over_for_the_kernel() {
    let frames = BlockFrames::new(Pfn(0), 3, 8).unwrap();
    assert!(frames.add_blocks(0, 1));
    assert!(frames.add_blocks_as(1, 1, Online::Kernel));
    assert!(frames.add_blocks(2, 1));
    let mut got = Vec::new();
    while let Some(frame) = frames.alloc_as(Mobility::Unmovable) {
        assert!(frames.is_unmovable(frame));
        got.push(frame.0);
    }
    assert_eq!(got, (8..16).collect::<Vec<_>>(), "block 1 only");
    assert_eq!(frames.block_use(1).unwrap().unmovable, 8);
    assert!(frames.free(Pfn(9)));
    assert!(!frames.is_unmovable(Pfn(9)));
    assert_eq!(frames.block_use(1).unwrap().unmovable, 7);
    assert_eq!(frames.isolate(1), Err(IsolateError::Unmovable(Pfn(8))));
}

#[test]
fn an_isolated_block_hands_out_nothing_until_its_isolation_ends() {
    let frames = BlockFrames::new(Pfn(0), 2, 4).unwrap();
    assert!(frames.add_blocks(0, 2));
    let first = frames.alloc().unwrap();
    assert_eq!(frames.isolate(0), Ok(1));
    assert_eq!(frames.isolate(0), Err(IsolateError::Isolated));
    assert_eq!(frames.isolate(5), Err(IsolateError::NotPlugged));
    let from_isolated = |frame: Pfn| frames.block_of(frame) == Some(0);
    assert!(frames.free(first), "freeing into an isolated block is fine");
    let mut got = Vec::new();
    while let Some(frame) = frames.alloc() {
        got.push(frame);
    }
    assert_eq!(got.len(), 4, "block 1's frames only");
    assert!(!got.iter().any(|&frame| from_isolated(frame)));
    assert!(frames.unisolate(0) && !frames.unisolate(0));
    assert_eq!(frames.alloc(), Some(Pfn(0)), "block 0 hands out again");
}

#[test]
fn bad_requests_end_with_a_typed_error_and_change_nothing() {
    let (frames, memory) = setup(4, 8);
    assert!(frames.blocks().add_blocks(0, 3));
    assert!(frames.blocks().add_blocks_as(3, 1, Online::Kernel));
    let slots = owners(&frames, &memory, 5);
    // Unmovable allocations go only to block 3.
    let kernel = frames.blocks().alloc_as(Mobility::Unmovable).unwrap();
    assert_eq!(frames.blocks().block_of(kernel), Some(3));
    let before = frames.blocks().counts();
    assert_eq!(
        shrink(&frames, &memory, 12, &NoHooks),
        Err(ShrinkError::NotBlockMultiple {
            frames: 12,
            block_frames: 8
        })
    );
    assert_eq!(
        shrink(&frames, &memory, 32, &NoHooks),
        Err(ShrinkError::BelowUnmovable {
            requested: 4,
            movable: 3
        })
    );
    assert_eq!(
        shrink_block(&frames, &memory, 3, &NoHooks).map_err(|(error, _)| error),
        Err(ShrinkError::Unmovable {
            block: 3,
            pfn: kernel
        })
    );
    assert_eq!(
        shrink_block(&frames, &memory, 9, &NoHooks).map_err(|(error, _)| error),
        Err(ShrinkError::NotPlugged { block: 9 })
    );
    assert_eq!(frames.blocks().counts(), before);
    for block in 0..4 {
        assert!(!frames.blocks().block_use(block).unwrap().isolated);
    }
    all_intact(&frames, &memory, &slots, 1);
}

#[test]
fn a_frame_with_no_owner_is_refused_as_unmovable() {
    let (frames, memory) = setup(2, 4);
    assert!(frames.blocks().add_blocks(0, 2));
    let stray = frames.blocks().alloc().unwrap();
    let (error, done) = shrink_block(&frames, &memory, 0, &NoHooks).unwrap_err();
    assert_eq!(
        error,
        ShrinkError::Unmovable {
            block: 0,
            pfn: stray
        }
    );
    assert_eq!(done.migrated, 0);
    assert_eq!(frames.blocks().counts(), (7, 8), "targets returned");
    assert!(!frames.blocks().block_use(0).unwrap().isolated);
}

#[test]
fn used_blocks_are_emptied_into_others_and_each_copy_equals_its_source() {
    let (frames, memory) = setup(4, 8);
    assert!(frames.blocks().add_blocks(0, 4));
    let mut slots = owners(&frames, &memory, 12); // block 0 and half of 1
    for (_, slot) in slots.drain(..4) {
        assert!(frames.free(slot));
    }
    let sums: Vec<u64> = slots
        .iter()
        .map(|&(_, slot)| memory.checksum(frames.frame_of(slot).unwrap()))
        .collect();
    let report = shrink(&frames, &memory, 24, &NoHooks).unwrap();
    assert!(report.complete(), "{report:?}");
    assert_eq!(
        report.taken,
        [3, 2, 1],
        "wholly free first, then fewest used, ties from the top"
    );
    assert_eq!(report.migrated, 4, "block 1's four owners moved");
    assert_eq!(report.reached(), 24);
    for (&(_, slot), sum) in slots.iter().zip(&sums) {
        assert_eq!(memory.checksum(frames.frame_of(slot).unwrap()), *sum);
    }
    all_intact(&frames, &memory, &slots, 1);
    assert_eq!(frames.blocks().counts(), (0, 8), "0 pages lost");
    // Nothing can hold block 0's eight frames: it rolls back.
    let report = shrink(&frames, &memory, 8, &NoHooks).unwrap();
    assert!(!report.complete() && report.reached() == 0);
    assert_eq!(
        report.rolled_back,
        [(
            0,
            ShrinkError::NoTarget {
                block: 0,
                needed: 8,
                found: 0
            }
        )]
    );
    all_intact(&frames, &memory, &slots, 1);
}

/// Fails the `k`-th target allocation of a block.
struct FailTarget(usize);

impl ShrinkHooks for FailTarget {
    fn allow_target(&self, index: usize) -> bool {
        index != self.0
    }
}

#[test]
fn a_target_allocation_failing_at_any_frame_rolls_the_block_back() {
    for k in 0..6 {
        let (frames, memory) = setup(3, 8);
        assert!(frames.blocks().add_blocks(0, 3));
        let slots = owners(&frames, &memory, 6);
        let before = frames.blocks().counts();
        let (error, done) = shrink_block(&frames, &memory, 0, &FailTarget(k)).unwrap_err();
        assert_eq!(
            error,
            ShrinkError::NoTarget {
                block: 0,
                needed: 6,
                found: k
            }
        );
        assert_eq!(
            done.migrated, 0,
            "nothing moves before every target is held"
        );
        assert_eq!(frames.blocks().counts(), before, "targets freed, k = {k}");
        assert!(!frames.blocks().block_use(0).unwrap().isolated);
        all_intact(&frames, &memory, &slots, 1);
        // The block hands out again.
        assert_eq!(
            frames.blocks().block_of(frames.blocks().alloc().unwrap()),
            Some(0)
        );
    }
}

/// An arena whose `k`-th copy fails, as a frame that cannot be read.
struct FailCopy {
    arena: Arena,
    at: usize,
    copies: AtomicUsize,
}

impl FrameMemory for FailCopy {
    fn words(&self) -> usize {
        self.arena.words()
    }
    fn load(&self, frame: Pfn, word: usize) -> u64 {
        self.arena.load(frame, word)
    }
    fn store(&self, frame: Pfn, word: usize, value: u64) {
        self.arena.store(frame, word, value);
    }
    fn copy(&self, from: Pfn, to: Pfn) -> Result<(), CopyFault> {
        if self.copies.fetch_add(1, SeqCst) == self.at {
            return Err(CopyFault);
        }
        self.arena.copy(from, to)
    }
}

#[test]
fn a_copy_failing_mid_migration_rolls_back_and_keeps_the_frames_moved_whole() {
    for k in 0..5 {
        let (frames, arena) = setup(3, 8);
        assert!(frames.blocks().add_blocks(0, 3));
        let slots = owners(&frames, &arena, 5);
        let memory = FailCopy {
            arena,
            at: k,
            copies: AtomicUsize::new(0),
        };
        let failing = frames.frame_of(slots[k].1).unwrap();
        let report = shrink(&frames, &memory, 8, &NoHooks).unwrap();
        // Block 1 or 2 is wholly free and goes first; block 0 is not tried.
        assert!(report.complete() && report.taken[0] != 0);
        let (error, done) = shrink_block(&frames, &memory, 0, &NoHooks).unwrap_err();
        assert_eq!(
            error,
            ShrinkError::CopyFault {
                block: 0,
                pfn: failing
            }
        );
        assert_eq!(
            done.migrated, k as u64,
            "frames before the fault stay moved"
        );
        assert_eq!(
            frames.blocks().counts(),
            (16 - 5, 16),
            "0 lost, targets freed"
        );
        assert!(!frames.blocks().block_use(0).unwrap().isolated);
        all_intact(&frames, &memory.arena, &slots, 1);
    }
}

/// Hands `block` over when the shrink has isolated its block.
struct GrowWhileIsolated<'a> {
    frames: &'a MovableFrames,
    block: usize,
    grown: AtomicBool,
}

impl ShrinkHooks for GrowWhileIsolated<'_> {
    fn isolated(&self, _: usize) {
        self.grown
            .store(self.frames.blocks().add_blocks(self.block, 1), SeqCst);
    }
}

#[test]
fn a_grow_between_isolation_and_take_completes_both() {
    let (frames, memory) = setup(3, 8);
    assert!(frames.blocks().add_blocks(0, 2));
    let slots = owners(&frames, &memory, 16); // both blocks full
    let hooks = GrowWhileIsolated {
        frames: &frames,
        block: 2,
        grown: AtomicBool::new(false),
    };
    let report = shrink(&frames, &memory, 8, &hooks).unwrap();
    assert!(hooks.grown.load(SeqCst));
    assert!(
        report.complete(),
        "the grow's block holds the targets: {report:?}"
    );
    assert_eq!(report.migrated, 8);
    all_intact(&frames, &memory, &slots, 1);
    assert_eq!(frames.blocks().counts(), (0, 16));
}

#[test]
fn owners_read_and_write_their_frames_intact_while_shrinks_move_them() {
    const OWNERS: u64 = 4;
    const EACH: usize = 6;
    let (frames, memory) = setup(8, 16);
    assert!(frames.blocks().add_blocks(0, 8));
    // Three owners a block, so every shrink has frames to move.
    let mut all: Vec<Slot> = (0..128).map(|_| frames.alloc().unwrap()).collect();
    for (index, slot) in all.iter().enumerate() {
        if index % 16 >= 3 {
            assert!(frames.free(*slot));
        }
    }
    all = all
        .into_iter()
        .enumerate()
        .filter(|(index, _)| index % 16 < 3)
        .map(|(_, slot)| slot)
        .collect();
    let mine: Vec<Vec<Slot>> = all.chunks(EACH).map(<[Slot]>::to_vec).collect();
    let shared = Arc::new((frames, memory, AtomicBool::new(false)));
    let mut threads = Vec::new();
    // A reader of every owner's frames, which it never writes: each read
    // is whole and the owner's (zero before the owner's first write).
    let theirs = Arc::clone(&shared);
    threads.push(std::thread::spawn(move || {
        let (frames, memory, stop) = &*theirs;
        let mut reads = 0;
        while !stop.load(SeqCst) {
            for (id, &slot) in all.iter().enumerate() {
                let mut words = [0; WORDS];
                if frames.read(slot, memory, &mut words) && words != [0; WORDS] {
                    assert_eq!(
                        check(&words).map(|(owner, _)| owner),
                        Some(id as u64),
                        "torn"
                    );
                    reads += 1;
                }
            }
        }
        reads
    }));
    for (owner, slots) in (0..OWNERS).zip(mine) {
        let shared = Arc::clone(&shared);
        threads.push(std::thread::spawn(move || {
            let (frames, memory, stop) = &*shared;
            let ids: Vec<u64> = (0..EACH as u64).map(|i| owner * EACH as u64 + i).collect();
            let mut generation = 0;
            let mut reads = 0u64;
            while !stop.load(SeqCst) || generation < 50 {
                generation += 1;
                for (&slot, &id) in slots.iter().zip(&ids) {
                    assert!(frames.write(slot, memory, &frame_of(id, generation)));
                }
                for (&slot, &id) in slots.iter().zip(&ids) {
                    let mut words = [0; WORDS];
                    assert!(frames.read(slot, memory, &mut words));
                    assert_eq!(check(&words), Some((id, generation)), "torn or stale");
                    reads += 1;
                }
            }
            for slot in slots {
                assert!(frames.free(slot));
            }
            reads
        }));
    }
    let (frames, memory, stop) = &*shared;
    let mut taken_total = 0;
    let mut migrated = 0;
    // A fixed time rather than a count of rounds: long enough for the
    // owners' writes to meet the shrinks' moves many times.
    let started = std::time::Instant::now();
    for round in 0.. {
        if started.elapsed() > std::time::Duration::from_millis(300) {
            break;
        }
        // Shrink to 2-4 blocks, then grow back to all 8.
        let size = (4 + round % 3) as u64 * 16;
        if let Ok(report) = shrink(frames, memory, size, &NoHooks) {
            taken_total += report.taken.len();
            migrated += report.migrated;
        }
        for block in 0..8 {
            if frames.blocks().block_use(block).is_none() {
                assert!(frames.blocks().add_blocks(block, 1));
            }
        }
    }
    stop.store(true, SeqCst);
    let reads: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    assert!(taken_total > 0 && reads > 0);
    assert!(migrated > 0, "some shrink moved a frame in use");
    assert_eq!(
        frames.blocks().counts(),
        (128, 128),
        "every frame back, none twice"
    );
}

#[test]
fn a_shrink_never_moves_into_or_out_of_a_blocks_descriptor_frames() {
    // Four blocks of 64 frames, each with 8 descriptor frames in front.
    let (frames, memory) = setup(4, 64);
    assert!(frames
        .blocks()
        .add_blocks_reserving(0, 4, Online::Movable, 8));
    let descriptor = |frame: Pfn| (frame.0 - FIRST) % 64 < 8;
    // Owners in every block, so that each shrink must migrate.
    let slots: Vec<(u64, Slot)> = (0..4)
        .flat_map(|block| (0..20).map(move |i| (block * 20 + i, block as usize)))
        .map(|(owner, block)| {
            let slot = frames.alloc_in(block).expect("room in the block");
            assert!(!descriptor(frames.frame_of(slot).unwrap()));
            assert!(frames.write(slot, &memory, &frame_of(owner, 1)));
            (owner, slot)
        })
        .collect();
    // What the descriptor frames hold: a shrink writing there corrupts it.
    let descriptors =
        || (0..4u64).flat_map(|block| (0..8).map(move |i| Pfn(FIRST + block * 64 + i)));
    for frame in descriptors() {
        memory.store(frame, 0, 0xdead_0000 + frame.0);
    }
    let report = shrink(&frames, &memory, 2 * 64, &NoHooks).unwrap();
    assert!(report.complete(), "{report:?}");
    assert_eq!(report.migrated, 40);
    all_intact(&frames, &memory, &slots, 1);
    for &(_, slot) in &slots {
        let frame = frames.frame_of(slot).unwrap();
        assert!(
            !descriptor(frame),
            "an owner moved onto descriptors at {frame:?}"
        );
    }
    for frame in descriptors().filter(|&frame| frames.blocks().holds(frame)) {
        assert_eq!(
            memory.load(frame, 0),
            0xdead_0000 + frame.0,
            "{frame:?} written"
        );
    }
    // The two blocks left hold 40 + 40 owners of their 112 usable frames.
    assert_eq!(frames.blocks().counts(), (32, 112));
}

#[test]
fn owners_come_from_every_block_and_a_shrink_moves_them_out_of_the_last() {
    // Eight blocks of 16 frames. The owner table once covered the blocks
    // a quarter of the heap held from the region's front; now every
    // frame of every block can be owned.
    let (frames, memory) = setup(8, 16);
    assert!(frames.blocks().add_blocks(0, 8));
    let slots = owners(&frames, &memory, 8 * 16);
    assert_eq!(frames.blocks().counts(), (0, 128), "every frame owned");
    assert!(frames.alloc().is_none());
    let last = |slot: Slot| frames.frame_of(slot).unwrap().0 >= FIRST + 7 * 16;
    assert_eq!(slots.iter().filter(|&&(_, slot)| last(slot)).count(), 16);
    // Room outside the last block: free every other owner of blocks 0-3.
    let (freed, kept): (Vec<_>, Vec<_>) = slots
        .into_iter()
        .partition(|&(owner, _)| owner < 64 && owner % 2 == 0);
    for &(_, slot) in &freed {
        assert!(frames.free(slot));
    }
    let report = shrink_block(&frames, &memory, 7, &NoHooks).unwrap();
    assert_eq!(report.migrated, 16);
    all_intact(&frames, &memory, &kept, 1);
    // A frame handed out without an owner still cannot move.
    assert!(frames.blocks().add_blocks(7, 1));
    let stray = frames.blocks().alloc_in(7, Mobility::Movable).unwrap();
    assert_eq!(frames.owner_of(stray), None);
    let error = shrink_block(&frames, &memory, 7, &NoHooks).unwrap_err().0;
    assert_eq!(
        error,
        ShrinkError::Unmovable {
            block: 7,
            pfn: stray
        }
    );
    assert!(frames.blocks().is_used(stray));
    all_intact(&frames, &memory, &kept, 1);
}

#[test]
fn a_shrink_names_a_bounded_number_of_rolled_back_blocks_and_counts_the_rest() {
    use hotkern_kernel::migrate::ROLLED_BACK_KEPT;
    let blocks = ROLLED_BACK_KEPT + 8;
    let (frames, memory) = setup(blocks, 2);
    assert!(frames.blocks().add_blocks(0, blocks));
    // A frame in every block handed out with no owner: none can move.
    for block in 0..blocks {
        frames.blocks().alloc_in(block, Mobility::Movable).unwrap();
    }
    let report = shrink(&frames, &memory, 2 * blocks as u64, &NoHooks).unwrap();
    assert_eq!(report.reached(), 0);
    assert_eq!(report.rolled_back.len(), ROLLED_BACK_KEPT);
    assert_eq!(report.rolled_back_unnamed, blocks - ROLLED_BACK_KEPT);
    assert!(
        report.rolled_back.capacity() <= ROLLED_BACK_KEPT,
        "room for a name per block"
    );
}
