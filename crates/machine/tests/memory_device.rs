//! The machine's memory device, request by request: a shrink of used
//! memory migrates frames intact; injected failures (a target allocation
//! failing mid-migration, the device refusing, the device never
//! answering) roll back and the report says so; a shrink again, or a
//! grow, during a shrink supersedes it cleanly; bad requests end with a
//! typed error and change nothing. `tests/memory_storm.rs` has the random
//! storm.

mod common;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hotkern_machine::{
    DeviceRequest, Machine, MemoryDeviceConfig, MemoryError, MemoryFailure, ResizeOutcome,
    RollbackCause, ShrinkError, Slot, TaskStatus,
};

const BLOCK: u64 = 32;

fn machine(config: MemoryDeviceConfig) -> Machine {
    Machine::builder()
        .cpus(2)
        .memory_device(MemoryDeviceConfig {
            block_frames: BLOCK,
            ..config
        })
        .build()
        .unwrap()
}

/// Eight blocks plugged; a task owns `count` frames, keeps every other
/// one (so used frames are spread over the low blocks) at generation 1.
fn spread(count: u64) -> (Machine, Arc<Mutex<Vec<Slot>>>) {
    let machine = machine(MemoryDeviceConfig {
        blocks: 8,
        plugged_blocks: 8,
        ..Default::default()
    });
    let kept = Arc::new(Mutex::new(Vec::new()));
    let theirs = Arc::clone(&kept);
    machine.submit(move |ctx| {
        let slots: Vec<Slot> = (0..count)
            .map(|owner| ctx.alloc_movable(owner).expect("room"))
            .collect();
        for (owner, slot) in slots.into_iter().enumerate() {
            if owner % 2 == 0 {
                assert!(ctx.write_movable(slot, 1));
                theirs.lock().unwrap().push(slot);
            } else {
                assert!(ctx.free_movable(slot));
            }
        }
        TaskStatus::Done
    });
    common::drain(&machine);
    assert!(machine.check_memory().is_empty());
    (machine, kept)
}

fn plugged(machine: &Machine) -> u64 {
    machine.memory_device().unwrap().plugged_size()
}

#[test]
fn a_shrink_of_used_memory_migrates_every_frame_intact_and_confirms_to_the_device() {
    let (machine, kept) = spread(128);
    let report = machine.resize_memory(2 * BLOCK).unwrap();
    assert_eq!(report.outcome, ResizeOutcome::Completed, "{report:?}");
    assert_eq!((report.before, report.reached), (8 * BLOCK, 2 * BLOCK));
    assert!(report.migrated > 0, "blocks 0-3 held used frames");
    assert_eq!(plugged(&machine), 2 * BLOCK, "the device was told");
    assert_eq!(machine.check_memory(), vec![]);
    assert_eq!(kept.lock().unwrap().len(), 64);
    assert_eq!(machine.resize_memory(8 * BLOCK).unwrap().reached, 8 * BLOCK);
    assert!(machine.check_invariants().is_empty());
    assert!(machine.shutdown().is_clean());
}

#[test]
fn a_target_allocation_failing_mid_migration_rolls_the_block_back() {
    let (machine, _) = spread(128);
    // Four wholly free blocks go first; the fifth has frames to move.
    machine
        .inject_memory_failure(MemoryFailure::TargetAllocation { at: 3 })
        .unwrap();
    let report = machine.resize_memory(2 * BLOCK).unwrap();
    assert_eq!(report.outcome, ResizeOutcome::Partial, "{report:?}");
    assert_eq!(report.reached, 4 * BLOCK, "the free blocks went, no more");
    assert!(matches!(
        report.rolled_back.as_slice(),
        [(
            _,
            RollbackCause::Migration(ShrinkError::NoTarget { found: 3, .. })
        )]
    ));
    assert_eq!(plugged(&machine), 4 * BLOCK);
    assert_eq!(machine.check_memory(), vec![]);
    let again = machine.resize_memory(2 * BLOCK).unwrap();
    assert_eq!(again.outcome, ResizeOutcome::Completed);
    assert_eq!(machine.check_memory(), vec![]);
}

#[test]
fn a_device_refusing_rolls_back_a_shrink_and_stops_a_grow() {
    let (machine, _) = spread(128);
    let device = machine.memory_device().unwrap();
    device.refuse_next(1);
    let report = machine.resize_memory(2 * BLOCK).unwrap();
    assert_eq!(report.outcome, ResizeOutcome::Partial);
    assert_eq!(report.rolled_back.len(), 1);
    assert_eq!(report.rolled_back[0].1, RollbackCause::DeviceRefused);
    assert_eq!((report.reached, plugged(&machine)), (8 * BLOCK, 8 * BLOCK));
    assert_eq!(machine.check_memory(), vec![], "the block went back whole");
    assert_eq!(machine.resize_memory(4 * BLOCK).unwrap().reached, 4 * BLOCK);
    device.refuse_next(1);
    let grow = machine.resize_memory(8 * BLOCK).unwrap();
    assert_eq!(
        (grow.outcome, grow.reached),
        (ResizeOutcome::Partial, 4 * BLOCK)
    );
    assert_eq!(grow.rolled_back[0].1, RollbackCause::DeviceRefused);
    assert_eq!(machine.check_memory(), vec![]);
}

#[test]
fn a_device_that_never_confirms_ends_with_a_typed_error_and_loses_nothing() {
    let machine = machine(MemoryDeviceConfig {
        blocks: 4,
        plugged_blocks: 4,
        confirm_timeout: Duration::from_millis(50),
        ..Default::default()
    });
    let device = machine.memory_device().unwrap();
    device.set_silent(true);
    let error = machine.resize_memory(BLOCK).unwrap_err();
    assert!(
        matches!(
            error,
            MemoryError::DeviceTimeout {
                request: DeviceRequest::Unplug { count: 1, .. },
                ..
            }
        ),
        "{error}"
    );
    assert_eq!(plugged(&machine), 4 * BLOCK);
    assert_eq!(machine.check_memory(), vec![], "the block was handed back");
    device.set_silent(false);
    assert_eq!(machine.resize_memory(BLOCK).unwrap().reached, BLOCK);
    device.set_silent(true);
    assert!(matches!(
        machine.resize_memory(2 * BLOCK),
        Err(MemoryError::DeviceTimeout {
            request: DeviceRequest::Plug { .. },
            ..
        })
    ));
    assert_eq!(plugged(&machine), BLOCK);
    assert_eq!(machine.check_memory(), vec![]);
}

#[test]
fn bad_requests_end_with_a_typed_error_and_change_nothing() {
    let machine = machine(MemoryDeviceConfig {
        blocks: 6,
        plugged_blocks: 6,
        kernel_blocks: 2,
        ..Default::default()
    });
    let pinned = [machine.alloc_unmovable().unwrap(), {
        // Fill block 0 so the next lands in block 1.
        let mut last = None;
        for _ in 0..BLOCK {
            last = machine.alloc_unmovable();
        }
        last.unwrap()
    }];
    assert!(pinned
        .iter()
        .all(|&frame| frame.0 >= machine.memory_device().unwrap().first().0));
    let before = plugged(&machine);
    assert_eq!(
        machine.resize_memory(BLOCK + 1),
        Err(MemoryError::NotBlockMultiple {
            frames: BLOCK + 1,
            block_frames: BLOCK
        })
    );
    assert_eq!(
        machine.resize_memory(7 * BLOCK),
        Err(MemoryError::BeyondRegion {
            frames: 7 * BLOCK,
            region_frames: 6 * BLOCK
        })
    );
    assert_eq!(
        machine.resize_memory(BLOCK),
        Err(MemoryError::BelowUnmovable {
            frames: BLOCK,
            unmovable_frames: 2 * BLOCK
        })
    );
    assert_eq!(plugged(&machine), before);
    assert_eq!(machine.check_memory(), vec![]);
    let report = machine.resize_memory(2 * BLOCK).unwrap();
    assert_eq!(
        report.outcome,
        ResizeOutcome::Completed,
        "down to the pinned blocks"
    );
    assert!(!machine.free_unmovable(hotkern_machine::Pfn(1)));
    assert_eq!(machine.check_memory(), vec![]);
}

#[test]
fn a_shrink_again_or_a_grow_during_a_shrink_supersedes_it_cleanly() {
    let (machine, _) = spread(128);
    let device = machine.memory_device().unwrap();
    machine
        .inject_memory_failure(MemoryFailure::HoldAfterIsolation)
        .unwrap();
    let first = device.request_size(4 * BLOCK);
    assert!(machine.wait_memory_held(Duration::from_secs(10)));
    let again = device.request_size(2 * BLOCK);
    machine.release_memory_hold();
    let first = machine.wait_memory(first).unwrap();
    assert_eq!(first.outcome, ResizeOutcome::Superseded);
    assert_eq!(first.reached, 7 * BLOCK, "the block in hand completed");
    let again = machine.wait_memory(again).unwrap();
    assert_eq!(
        (again.outcome, again.reached),
        (ResizeOutcome::Completed, 2 * BLOCK)
    );
    assert_eq!(machine.check_memory(), vec![]);

    machine.resize_memory(6 * BLOCK).unwrap();
    machine
        .inject_memory_failure(MemoryFailure::HoldAfterIsolation)
        .unwrap();
    let shrink = device.request_size(2 * BLOCK);
    assert!(machine.wait_memory_held(Duration::from_secs(10)));
    let grow = device.request_size(8 * BLOCK);
    machine.release_memory_hold();
    assert_eq!(
        machine.wait_memory(shrink).unwrap().outcome,
        ResizeOutcome::Superseded
    );
    let grow = machine.wait_memory(grow).unwrap();
    assert_eq!(
        (grow.outcome, grow.reached),
        (ResizeOutcome::Completed, 8 * BLOCK)
    );
    assert_eq!(plugged(&machine), 8 * BLOCK);
    assert_eq!(machine.check_memory(), vec![]);
}

/// Readers re-read large frames without pause while the host takes their
/// block and gives it back: the window between a reader loading its
/// frame number and reading the words is wide (4096 words), and the
/// block is overwritten once unplugged, so a read that skipped its slot's
/// sequence check would see the garbage. Readers move to a new frame now
/// and then, so frames spill into the high block and shrinks migrate.
#[test]
fn readers_never_see_a_frame_of_a_block_taken_away() {
    let machine = Machine::builder()
        .cpus(3)
        .memory_device(MemoryDeviceConfig {
            blocks: 2,
            block_frames: 8,
            plugged_blocks: 2,
            frame_words: 4096,
            ..Default::default()
        })
        .build()
        .unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    for owner in 0..8u64 {
        let stop = Arc::clone(&stop);
        let mut owned: Option<(Slot, u64)> = None;
        let mut slices = 0u64;
        machine.submit(move |ctx| {
            slices += 1;
            if let Some((slot, generation)) = owned {
                for _ in 0..8 {
                    assert!(ctx.check_movable(slot, owner, generation));
                }
                // The new frame first: with the low block full it lands in
                // the other, which the next shrink then empties.
                if slices % 2 == 0 {
                    if let Some(moved) = ctx.alloc_movable(owner) {
                        assert!(ctx.free_movable(slot));
                        owned = Some((moved, 0));
                    }
                }
            } else {
                owned = ctx.alloc_movable(owner).map(|slot| (slot, 0));
            }
            if stop.load(std::sync::atomic::Ordering::Relaxed) {
                if let Some((slot, _)) = owned.take() {
                    assert!(ctx.free_movable(slot));
                }
                return TaskStatus::Done;
            }
            TaskStatus::Again
        });
    }
    let mut migrated = 0;
    for _ in 0..600 {
        // A shrink may stop short while a reader holds two frames.
        migrated += machine.resize_memory(8).unwrap().migrated;
        machine.resize_memory(16).unwrap();
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    common::drain(&machine);
    assert!(migrated > 0, "the readers' frames moved");
    assert_eq!(machine.check_memory(), vec![]);
    let report = machine.shutdown();
    assert!(report.is_clean(), "{report:?}");
}

/// Every frame a task can own, each written at generation 1; every other
/// one freed again. Returns how many it got and the ones it kept.
fn own_all(machine: &Machine, first_owner: u64) -> (u64, Vec<Slot>) {
    let got = Arc::new(Mutex::new((0, Vec::new())));
    let theirs = Arc::clone(&got);
    machine.submit(move |ctx| {
        let mut slots = Vec::new();
        while let Some(slot) = ctx.alloc_movable(first_owner + slots.len() as u64) {
            assert!(ctx.write_movable(slot, 1));
            slots.push(slot);
        }
        let mut got = theirs.lock().unwrap();
        got.0 = slots.len() as u64;
        for (index, slot) in slots.into_iter().enumerate() {
            if index % 2 == 0 {
                got.1.push(slot);
            } else {
                assert!(ctx.free_movable(slot));
            }
        }
        TaskStatus::Done
    });
    common::drain(machine);
    let got = got.lock().unwrap();
    (got.0, got.1.clone())
}

#[test]
fn descriptors_on_each_block_are_never_handed_out_and_a_shrink_and_regrow_keep_them() {
    let machine = machine(MemoryDeviceConfig {
        blocks: 8,
        plugged_blocks: 8,
        descriptors_on_block: true,
        ..Default::default()
    });
    // Runs of one block: 32 frames' descriptors fill each block's first
    // frame, its bitmaps (5 words) the second.
    let usable = 8 * (BLOCK - 2);
    let (count, kept) = own_all(&machine, 0);
    assert_eq!(count, usable, "a descriptor frame was handed out");
    assert_eq!(machine.check_memory(), vec![]);
    let report = machine.resize_memory(5 * BLOCK).unwrap();
    assert_eq!(report.outcome, ResizeOutcome::Completed, "{report:?}");
    assert!(report.migrated > 0, "every block held used frames");
    assert_eq!(machine.check_memory(), vec![]);
    // The blocks come back with their descriptors on them again (physmem
    // let the old ones go), and again only their other frames are owned.
    assert_eq!(machine.resize_memory(8 * BLOCK).unwrap().reached, 8 * BLOCK);
    let (more, _) = own_all(&machine, 1_000);
    assert_eq!(
        kept.len() as u64 + more,
        usable,
        "a descriptor frame was handed out"
    );
    assert_eq!(machine.check_memory(), vec![]);
}
