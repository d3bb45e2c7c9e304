use std::collections::{BTreeSet, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::vec::Vec;

use super::*;

const FIRST: u64 = 0x4_0000;

fn xorshift(seed: &mut u64) -> u64 {
    *seed ^= *seed << 13;
    *seed ^= *seed >> 7;
    *seed ^= *seed << 17;
    *seed
}

#[test]
fn a_region_of_nothing_or_past_the_frame_numbers_is_refused() {
    assert_eq!(
        BlockFrames::new(Pfn(0), 0, 512).err(),
        Some(RegionError::Empty)
    );
    assert_eq!(
        BlockFrames::new(Pfn(0), 4, 0).err(),
        Some(RegionError::Empty)
    );
    assert_eq!(
        BlockFrames::new(Pfn(u64::MAX - 100), 1, 512).err(),
        Some(RegionError::TooLarge)
    );
    assert_eq!(
        BlockFrames::new(Pfn(0), usize::MAX, 1 << 40).err(),
        Some(RegionError::TooLarge)
    );
}

#[test]
fn frames_come_low_first_each_once_and_only_from_blocks_handed_over() {
    // 100 frames a block: the last bitmap word is partial.
    let frames = BlockFrames::new(Pfn(FIRST), 6, 100).unwrap();
    assert_eq!(frames.alloc(), None, "nothing handed over yet");
    assert!(frames.add_blocks(4, 1));
    assert!(frames.add_blocks(1, 2));
    assert_eq!(frames.counts(), (300, 300));
    let mut got = Vec::new();
    while let Some(frame) = frames.alloc() {
        got.push(frame.0);
    }
    let expected: Vec<u64> = [1u64, 2, 4]
        .iter()
        .flat_map(|&block| (0..100).map(move |i| FIRST + block * 100 + i))
        .collect();
    assert_eq!(got, expected);
    assert_eq!(frames.counts(), (0, 300));
}

#[test]
fn a_run_outside_the_region_or_over_a_block_handed_over_changes_nothing() {
    let frames = BlockFrames::new(Pfn(FIRST), 4, 512).unwrap();
    assert!(frames.add_blocks(1, 1));
    assert!(!frames.add_blocks(0, 2), "block 1 is handed over");
    assert!(!frames.add_blocks(3, 2), "block 4 is past the region");
    assert!(!frames.add_blocks(usize::MAX, 2), "overflow");
    assert_eq!(frames.counts(), (512, 512), "block 0 and 3 not added");
    assert!(!frames.holds(Pfn(FIRST)));
    assert!(!frames.holds(Pfn(FIRST + 3 * 512)));
    assert!(frames.holds(Pfn(FIRST + 512)));
    assert!(frames.holds(Pfn(FIRST + 1023)));
    assert!(!frames.holds(Pfn(FIRST + 1024)));
    assert!(!frames.holds(Pfn(FIRST - 1)));
}

#[test]
fn only_a_wholly_free_block_is_taken_back_and_its_frames_are_gone() {
    let frames = BlockFrames::new(Pfn(FIRST), 2, 512).unwrap();
    assert!(frames.add_blocks(0, 2));
    let held = frames.alloc().unwrap();
    assert_eq!(held, Pfn(FIRST));
    assert!(!frames.take_block(0), "a frame of it is in use");
    assert!(frames.take_block(1));
    assert!(!frames.take_block(1), "taken once");
    assert!(!frames.take_block(2), "past the region");
    assert_eq!(frames.counts(), (511, 512));
    assert!(
        !frames.free(Pfn(FIRST + 512)),
        "a frame of a block taken back"
    );
    assert!(frames.free(held));
    assert!(!frames.free(held), "a double free");
    assert!(!frames.free(Pfn(FIRST + 5000)), "a stray frame");
    assert!(frames.take_block(0));
    assert_eq!(frames.counts(), (0, 0));
    assert_eq!(frames.alloc(), None);
    assert!(frames.add_blocks(0, 1), "a block taken back can come again");
    assert_eq!(frames.alloc(), Some(Pfn(FIRST)), "whole again");
}

/// Random operations against a plain model: a set of blocks handed over
/// and a set of free frames.
#[test]
fn random_operations_agree_with_a_model() {
    const BLOCKS: usize = 9;
    const BLOCK_FRAMES: u64 = 70;
    let frames = BlockFrames::new(Pfn(FIRST), BLOCKS, BLOCK_FRAMES).unwrap();
    let mut present = BTreeSet::new();
    let mut free: BTreeSet<u64> = BTreeSet::new();
    let mut held: Vec<u64> = Vec::new();
    let mut seed = 0x1234_5678_9abc_def1u64;
    let block_of = |frame: u64| ((frame - FIRST) / BLOCK_FRAMES) as usize;
    for _ in 0..20_000 {
        let roll = xorshift(&mut seed);
        match roll % 6 {
            0 => {
                let first = (xorshift(&mut seed) % (BLOCKS as u64 + 1)) as usize;
                let count = (xorshift(&mut seed) % 3) as usize;
                let fits = first + count <= BLOCKS
                    && (first..first + count).all(|b| !present.contains(&b));
                assert_eq!(frames.add_blocks(first, count), fits);
                if fits {
                    for block in first..first + count {
                        present.insert(block);
                        free.extend(
                            (0..BLOCK_FRAMES).map(|i| FIRST + block as u64 * BLOCK_FRAMES + i),
                        );
                    }
                }
            }
            1 => {
                let block = (xorshift(&mut seed) % (BLOCKS as u64 + 1)) as usize;
                let whole = present.contains(&block) && !held.iter().any(|&f| block_of(f) == block);
                assert_eq!(frames.take_block(block), whole);
                if whole {
                    present.remove(&block);
                    free.retain(|&f| block_of(f) != block);
                }
            }
            2 | 3 => {
                let expected = free.iter().next().copied();
                assert_eq!(frames.alloc().map(|p| p.0), expected);
                if let Some(frame) = expected {
                    free.remove(&frame);
                    held.push(frame);
                }
            }
            _ => {
                // A held frame, or now and then a free or stray one.
                let frame = if !held.is_empty() && roll % 4 != 0 {
                    held.swap_remove((xorshift(&mut seed) % held.len() as u64) as usize)
                } else {
                    FIRST + xorshift(&mut seed) % (BLOCK_FRAMES * (BLOCKS as u64 + 1))
                };
                let ok = present.contains(&block_of(frame))
                    && block_of(frame) < BLOCKS
                    && !free.contains(&frame);
                assert_eq!(frames.free(Pfn(frame)), ok, "free of {frame:#x}");
                if ok {
                    free.insert(frame);
                    held.retain(|&f| f != frame);
                }
            }
        }
        let total = present.len() as u64 * BLOCK_FRAMES;
        assert_eq!(frames.counts(), (free.len() as u64, total));
    }
}

/// CPUs allocate and free while one hands blocks over and takes them back:
/// no frame is handed out twice, none outside a block handed over, and the
/// counts add up at the end.
#[test]
fn under_contention_no_frame_is_handed_out_twice() {
    const BLOCKS: usize = 16;
    const BLOCK_FRAMES: u64 = 128;
    let frames = Arc::new(BlockFrames::new(Pfn(FIRST), BLOCKS, BLOCK_FRAMES).unwrap());
    assert!(frames.add_blocks(0, BLOCKS / 2));
    let out: Arc<Vec<AtomicBool>> = Arc::new(
        (0..BLOCKS as u64 * BLOCK_FRAMES)
            .map(|_| AtomicBool::new(false))
            .collect(),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(AtomicU64::new(0));
    let users: Vec<_> = (0..3)
        .map(|thread| {
            let (frames, out, stop, errors) =
                (frames.clone(), out.clone(), stop.clone(), errors.clone());
            std::thread::spawn(move || {
                let mut mine = Vec::new();
                let mut seed = 0x9e37_79b9 + thread;
                while !stop.load(Ordering::Relaxed) {
                    if xorshift(&mut seed) % 3 != 0 {
                        if let Some(frame) = frames.alloc() {
                            let index = (frame.0 - FIRST) as usize;
                            if out[index].swap(true, Ordering::AcqRel) {
                                errors.fetch_add(1, Ordering::Relaxed);
                            }
                            mine.push(frame);
                        }
                    } else if let Some(frame) = mine.pop() {
                        out[(frame.0 - FIRST) as usize].store(false, Ordering::Release);
                        if !frames.free(frame) {
                            errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }
                for frame in mine {
                    out[(frame.0 - FIRST) as usize].store(false, Ordering::Release);
                    if !frames.free(frame) {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    let mut seed = 77u64;
    let mut handed: HashSet<usize> = (0..BLOCKS / 2).collect();
    for _ in 0..20_000 {
        let block = (xorshift(&mut seed) % BLOCKS as u64) as usize;
        if handed.contains(&block) {
            if frames.take_block(block) {
                handed.remove(&block);
            }
        } else {
            assert!(frames.add_blocks(block, 1));
            handed.insert(block);
        }
    }
    stop.store(true, Ordering::Relaxed);
    for user in users {
        user.join().unwrap();
    }
    assert_eq!(errors.load(Ordering::Relaxed), 0);
    let total = handed.len() as u64 * BLOCK_FRAMES;
    assert_eq!(frames.counts(), (total, total), "every frame came back");
}

#[test]
fn blocks_past_the_first_bitmap_word_and_past_the_region() {
    // 128 blocks: the block bitmaps are two whole words.
    let frames = BlockFrames::new(Pfn(FIRST), 128, 8).unwrap();
    assert!(frames.add_blocks(100, 1));
    assert_eq!(
        frames.alloc(),
        Some(Pfn(FIRST + 100 * 8)),
        "in the second word"
    );
    assert!(frames.add_blocks(0, 100));
    assert!(frames.add_blocks(101, 27));
    let past = Pfn(FIRST + 128 * 8);
    assert!(!frames.holds(past));
    assert!(!frames.free(past));
    assert!(!frames.take_block(128));
    assert!(frames.holds(Pfn(past.0 - 1)));
    assert!(frames.take_block(127));
}

#[test]
fn each_region_error_says_what_is_wrong() {
    let messages = [
        RegionError::Empty,
        RegionError::TooLarge,
        RegionError::OutOfMemory,
    ]
    .map(|error| std::format!("{error}"));
    assert!(messages[0].contains("no blocks"));
    assert!(messages[1].contains("overflow"));
    assert!(messages[2].contains("heap"));
}

#[test]
fn a_reserved_prefix_is_never_handed_out_freed_or_reported_used() {
    // 100 frames a block, 70 reserved: the prefix crosses a bitmap word.
    let frames = BlockFrames::new(Pfn(FIRST), 3, 100).unwrap();
    assert!(!frames.add_blocks_reserving(0, 1, Online::Movable, 100));
    assert_eq!(frames.counts(), (0, 0), "a refused prefix changes nothing");
    assert!(frames.add_blocks_reserving(0, 2, Online::Movable, 70));
    assert!(frames.add_blocks(2, 1));
    assert_eq!(frames.reserved(0), Some(70));
    assert_eq!(frames.reserved(2), Some(0));
    assert_eq!(frames.counts(), (160, 160));
    let mut got = BTreeSet::new();
    while let Some(frame) = frames.alloc() {
        assert!(got.insert(frame.0), "{frame:?} handed out twice");
    }
    assert_eq!(got.len(), 160);
    for block in 0..2 {
        for index in 0..70 {
            let frame = Pfn(FIRST + block * 100 + index);
            assert!(
                !got.contains(&frame.0),
                "descriptor frame {frame:?} handed out"
            );
            assert!(!frames.is_used(frame));
            assert!(!frames.free(frame), "descriptor frame {frame:?} freed");
        }
        let mut used = 0;
        frames.each_used(block as usize, |frame| {
            assert!(
                frame.0 >= FIRST + block * 100 + 70,
                "{frame:?} offered to a shrink"
            );
            used += 1;
        });
        assert_eq!(used, 30);
        assert_eq!(frames.block_use(block as usize).unwrap().used, 30);
        assert_eq!(frames.isolate(block as usize), Ok(30));
    }
    for frame in got.iter().filter(|&&frame| frame < FIRST + 100) {
        assert!(frames.free(Pfn(*frame)));
    }
    assert!(frames.take_block(0), "free but for its descriptors");
    assert_eq!(frames.reserved(0), None);
    assert_eq!(frames.counts(), (0, 130));
    // Handed over again without descriptors, the whole block is free.
    assert!(frames.add_blocks(0, 1));
    assert_eq!(frames.counts(), (100, 230));
    assert_eq!(frames.alloc(), Some(Pfn(FIRST)));
}
