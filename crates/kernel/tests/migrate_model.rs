//! Random sequences of allocations, frees, owner writes, shrinks and
//! grows against a simple model: the blocks handed over, each owner's
//! generation, the unmovable frames. After every step each owner re-reads
//! its frame intact, no frame is owned twice, no frame is lost, no block
//! stays isolated, and a refused request changed nothing.
#![cfg(not(loom))]

use std::collections::{BTreeMap, BTreeSet};
use std::vec::Vec;

use proptest::prelude::*;

use hotkern_kernel::blockframes::{Mobility, Online};
use hotkern_kernel::migrate::{shrink, shrink_block, NoHooks, ShrinkError};
use hotkern_kernel::movable::{Arena, MovableFrames, Slot};
use hotkern_physmem::Pfn;

const FIRST: u64 = 0x80;
const BLOCKS: usize = 6;
const BLOCK_FRAMES: u64 = 8;
const WORDS: usize = 3;

fn frame_of(owner: u64, generation: u64) -> [u64; WORDS] {
    let head = owner << 32 | generation;
    [head, head.wrapping_mul(0x9e37_79b9_7f4a_7c15), !head]
}

#[derive(Debug, Clone)]
enum Step {
    Alloc,
    Free(usize),
    Write(usize),
    AllocUnmovable,
    FreeUnmovable(usize),
    /// Blocks, or a size one frame off a block multiple.
    Shrink {
        blocks: usize,
        ragged: bool,
    },
    ShrinkBlock(usize),
    Grow {
        block: usize,
        kernel: bool,
    },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => Just(Step::Alloc),
        3 => any::<usize>().prop_map(Step::Free),
        3 => any::<usize>().prop_map(Step::Write),
        1 => Just(Step::AllocUnmovable),
        1 => any::<usize>().prop_map(Step::FreeUnmovable),
        3 => (0..=BLOCKS, proptest::bool::weighted(0.1))
            .prop_map(|(blocks, ragged)| Step::Shrink { blocks, ragged }),
        1 => (0..BLOCKS + 1).prop_map(Step::ShrinkBlock),
        3 => (0..BLOCKS, proptest::bool::weighted(0.2))
            .prop_map(|(block, kernel)| Step::Grow { block, kernel }),
    ]
}

struct Model {
    present: BTreeSet<usize>,
    /// Live owners: slot, owner id, generation.
    owners: Vec<(Slot, u64, u64)>,
    unmovable: Vec<Pfn>,
    next_owner: u64,
}

fn present(frames: &MovableFrames) -> BTreeSet<usize> {
    (0..BLOCKS)
        .filter(|&b| frames.blocks().block_use(b).is_some())
        .collect()
}

fn check(frames: &MovableFrames, memory: &Arena, model: &Model) -> Result<(), TestCaseError> {
    prop_assert_eq!(present(frames), model.present.clone());
    let mut owned = BTreeMap::new();
    for &(slot, owner, generation) in &model.owners {
        let mut words = [0; WORDS];
        prop_assert!(frames.read(slot, memory, &mut words));
        prop_assert_eq!(words, frame_of(owner, generation), "owner {}", owner);
        let frame = frames.frame_of(slot).unwrap();
        prop_assert!(
            owned.insert(frame, slot).is_none(),
            "{:?} owned twice",
            frame
        );
        prop_assert_eq!(frames.owner_of(frame), Some(slot));
        prop_assert!(frames.blocks().holds(frame));
        prop_assert!(!frames.blocks().is_unmovable(frame));
    }
    for &frame in &model.unmovable {
        prop_assert!(frames.blocks().is_unmovable(frame) && frames.blocks().holds(frame));
    }
    let (free, total) = frames.blocks().counts();
    prop_assert_eq!(total, model.present.len() as u64 * BLOCK_FRAMES);
    let used = (model.owners.len() + model.unmovable.len()) as u64;
    prop_assert_eq!(total - free, used, "frames lost or leaked");
    for block in &model.present {
        prop_assert!(!frames.blocks().block_use(*block).unwrap().isolated);
    }
    Ok(())
}

fn run(steps: Vec<Step>) -> Result<(), TestCaseError> {
    let frames = MovableFrames::new(Pfn(FIRST), BLOCKS, BLOCK_FRAMES).unwrap();
    let memory = Arena::new(Pfn(FIRST), BLOCKS * BLOCK_FRAMES as usize, WORDS);
    let mut model = Model {
        present: BTreeSet::new(),
        owners: Vec::new(),
        unmovable: Vec::new(),
        next_owner: 0,
    };
    for step in steps {
        match step {
            Step::Alloc => {
                if let Some(slot) = frames.alloc() {
                    let owner = model.next_owner;
                    model.next_owner += 1;
                    prop_assert!(frames.write(slot, &memory, &frame_of(owner, 1)));
                    model.owners.push((slot, owner, 1));
                }
            }
            Step::Free(at) if !model.owners.is_empty() => {
                let (slot, ..) = model.owners.swap_remove(at % model.owners.len());
                prop_assert!(frames.free(slot));
                prop_assert!(!frames.free(slot), "a slot freed twice");
            }
            Step::Write(at) if !model.owners.is_empty() => {
                let at = at % model.owners.len();
                let (slot, owner, generation) = &mut model.owners[at];
                *generation += 1;
                prop_assert!(frames.write(*slot, &memory, &frame_of(*owner, *generation)));
            }
            Step::AllocUnmovable => {
                if let Some(frame) = frames.blocks().alloc_as(Mobility::Unmovable) {
                    model.unmovable.push(frame);
                }
            }
            Step::FreeUnmovable(at) if !model.unmovable.is_empty() => {
                let frame = model.unmovable.swap_remove(at % model.unmovable.len());
                prop_assert!(frames.blocks().free(frame));
            }
            Step::Shrink { blocks, ragged } => {
                let size = blocks as u64 * BLOCK_FRAMES + u64::from(ragged);
                let before = frames.blocks().counts();
                let emptiable = model
                    .present
                    .iter()
                    .filter(|&&b| frames.blocks().block_use(b).unwrap().unmovable == 0)
                    .count();
                match shrink(&frames, &memory, size, &NoHooks) {
                    Err(error) => {
                        let expected = if ragged {
                            ShrinkError::NotBlockMultiple {
                                frames: size,
                                block_frames: BLOCK_FRAMES,
                            }
                        } else {
                            ShrinkError::BelowUnmovable {
                                requested: blocks,
                                movable: emptiable,
                            }
                        };
                        prop_assert_eq!(error, expected);
                        prop_assert_eq!(
                            frames.blocks().counts(),
                            before,
                            "a refusal changed nothing"
                        );
                    }
                    Ok(report) => {
                        prop_assert!(!ragged && blocks <= emptiable);
                        prop_assert!(report.taken.len() <= blocks);
                        for block in &report.taken {
                            prop_assert!(
                                model.present.remove(block),
                                "block {} taken twice",
                                block
                            );
                        }
                        prop_assert_eq!(before.1 - frames.blocks().counts().1, report.reached());
                        for (block, error) in &report.rolled_back {
                            prop_assert!(
                                matches!(error, ShrinkError::NoTarget { .. }),
                                "block {} rolled back: {}",
                                block,
                                error
                            );
                        }
                        // Short only when there was no room for the frames to move.
                        if !report.complete() {
                            prop_assert!(!report.rolled_back.is_empty());
                        }
                    }
                }
            }
            Step::ShrinkBlock(block) => match shrink_block(&frames, &memory, block, &NoHooks) {
                Ok(_) => prop_assert!(model.present.remove(&block)),
                Err((ShrinkError::NotPlugged { block: b }, _)) => {
                    prop_assert!(b == block && !model.present.contains(&block));
                }
                Err((ShrinkError::Unmovable { block: b, pfn }, _)) => {
                    prop_assert_eq!(b, block);
                    prop_assert!(model.unmovable.contains(&pfn));
                }
                Err((ShrinkError::NoTarget { .. }, _)) => {}
                Err((error, _)) => prop_assert!(false, "unexpected {}", error),
            },
            Step::Grow { block, kernel } => {
                let online = if kernel {
                    Online::Kernel
                } else {
                    Online::Movable
                };
                let added = frames.blocks().add_blocks_as(block, 1, online);
                prop_assert_eq!(added, model.present.insert(block));
            }
            _ => {}
        }
        check(&frames, &memory, &model)?;
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn every_owner_reads_its_frame_intact_after_any_resizes(
        steps in proptest::collection::vec(step(), 1..120)
    ) {
        run(steps)?;
    }
}
