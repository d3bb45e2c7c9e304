//! The machine's memory device in the runs layout (descriptors and
//! allocator bitmaps on the plugged memory, as the bare-metal virtio-mem
//! driver keeps them, through the shared core's `hotkern_kernel::runs`):
//! a run's first block, its holder, is never taken while its run keeps a
//! block; a holder goes with the last of its run; an UNPLUG the device
//! refuses plugs the block back on its own memory, losing nothing.
//! `tests/memory_storm.rs` storms this layout too.

mod common;

use std::sync::{Arc, Mutex};

use hotkern_machine::{
    Machine, MemoryDeviceConfig, ResizeOutcome, RollbackCause, Slot, TaskStatus,
};

const BLOCK: u64 = 32;
const BLOCKS: u64 = 8;
/// A holder keeps a frame of descriptors (128 frames of 16 bytes) and one
/// of its run's bitmaps (4 × 5 words).
const HELD: u64 = 2;

/// Eight blocks plugged in two runs of four (holders 0 and 4).
fn machine() -> Machine {
    Machine::builder()
        .cpus(2)
        .memory_device(MemoryDeviceConfig {
            blocks: BLOCKS as usize,
            block_frames: BLOCK,
            plugged_blocks: BLOCKS as usize,
            descriptors_on_block: true,
            run_blocks: 4,
            ..Default::default()
        })
        .build()
        .unwrap()
}

/// A task owns `count` frames (low blocks first), each written at
/// generation 1, then frees those whose index `free` picks. Returns the
/// slots it got, in order, and whether each is kept.
fn own(machine: &Machine, count: u64, free: fn(u64) -> bool) -> Vec<(Slot, bool)> {
    let got = Arc::new(Mutex::new(Vec::new()));
    let theirs = Arc::clone(&got);
    machine.submit(move |ctx| {
        let slots: Vec<Slot> = (0..count)
            .map(|index| ctx.alloc_movable(index).expect("room"))
            .collect();
        for (index, slot) in slots.into_iter().enumerate() {
            assert!(ctx.write_movable(slot, 1));
            let keep = !free(index as u64);
            if !keep {
                assert!(ctx.free_movable(slot));
            }
            theirs.lock().unwrap().push((slot, keep));
        }
        TaskStatus::Done
    });
    common::drain(machine);
    let got = got.lock().unwrap().clone();
    got
}

/// A task frees `slots`.
fn free(machine: &Machine, slots: Vec<Slot>) {
    machine.submit(move |ctx| {
        for &slot in &slots {
            assert!(ctx.free_movable(slot));
        }
        TaskStatus::Done
    });
    common::drain(machine);
}

#[test]
fn a_holder_stays_while_its_run_keeps_a_block_and_goes_with_the_last() {
    let machine = machine();
    let device = machine.memory_device().unwrap();
    let usable = BLOCKS * BLOCK - 2 * HELD;
    let per_run = usable / 2;
    // Every frame owned, then block 0's (the first 30) freed: the holder
    // of run 0 is the one wholly free block, the shrink's first pick.
    let owned = own(&machine, usable, |index| index < BLOCK - HELD);
    assert_eq!(
        owned.len() as u64,
        usable,
        "a holder's frames were handed out"
    );
    assert_eq!(machine.check_memory(), vec![]);
    let report = machine.resize_memory((BLOCKS - 1) * BLOCK).unwrap();
    assert_eq!(report.outcome, ResizeOutcome::Partial, "{report:?}");
    assert_eq!(report.reached, BLOCKS * BLOCK);
    assert_eq!(report.rolled_back, [(0, RollbackCause::HoldsDescriptors)]);
    assert!(device.is_plugged(0), "blocks 1 to 3 keep their holder");
    assert_eq!(machine.check_memory(), vec![]);
    // Run 1 emptied (the last 126 frames): it goes whole, its holder
    // last, and run 0 with its owned frames stays.
    let run_1 = owned[per_run as usize..].iter().map(|&(slot, _)| slot);
    free(&machine, run_1.collect());
    let report = machine.resize_memory(4 * BLOCK).unwrap();
    assert_eq!(report.outcome, ResizeOutcome::Completed, "{report:?}");
    assert_eq!(report.migrated, 0, "run 1 was free");
    assert!((0..8).all(|block| device.is_plugged(block) == (block < 4)));
    assert_eq!(machine.check_memory(), vec![]);
    // Grown back, run 1's holder keeps its frames again.
    assert_eq!(machine.resize_memory(8 * BLOCK).unwrap().reached, 8 * BLOCK);
    assert_eq!(own(&machine, per_run, |_| false).len() as u64, per_run);
    assert_eq!(machine.check_memory(), vec![]);
    let report = machine.shutdown();
    assert!(report.is_clean(), "{report:?}");
}

#[test]
fn a_refused_unplug_plugs_the_block_back_on_its_own_memory_and_loses_nothing() {
    let machine = machine();
    let device = machine.memory_device().unwrap();
    // 60 frames owned, in blocks 0 to 2; the rest free.
    let owned = own(&machine, 60, |_| false);
    assert_eq!(owned.len(), 60);
    device.refuse_next(1);
    // The shrink takes blocks 6 and 7 (wholly free, from the top): 6 left
    // physmem before the device refused it; it comes back on its own first
    // frames, its own holder, and 7 goes back to the allocator.
    let report = machine.resize_memory(6 * BLOCK).unwrap();
    assert_eq!(report.outcome, ResizeOutcome::Partial, "{report:?}");
    assert_eq!(report.rolled_back, [(6, RollbackCause::DeviceRefused)]);
    assert_eq!(
        (report.reached, device.plugged_size()),
        (8 * BLOCK, 8 * BLOCK)
    );
    assert_eq!(
        machine.check_memory(),
        vec![],
        "nothing lost, every holder plugged"
    );
    // Block 6 now holds its own descriptors: a block fewer to hand out.
    let free_frames = 8 * BLOCK - 3 * HELD - 60;
    let more = own(&machine, free_frames, |_| false);
    assert_eq!(more.len() as u64, free_frames);
    assert!(
        own_one_more(&machine).is_none(),
        "a holder's frame was handed out"
    );
    free(&machine, more.into_iter().map(|(slot, _)| slot).collect());
    // Down to run 0, then back: the pieces of run 1 and block 6's own
    // plug all go, and come back as one run.
    let report = machine.resize_memory(4 * BLOCK).unwrap();
    assert_eq!(report.outcome, ResizeOutcome::Completed, "{report:?}");
    assert_eq!(machine.check_memory(), vec![]);
    assert_eq!(machine.resize_memory(8 * BLOCK).unwrap().reached, 8 * BLOCK);
    assert_eq!(machine.check_memory(), vec![]);
    let report = machine.shutdown();
    assert!(report.is_clean(), "{report:?}");
}

/// One more frame for a new owner, freed again at once; `None` if none.
fn own_one_more(machine: &Machine) -> Option<()> {
    let got = Arc::new(Mutex::new(None));
    let theirs = Arc::clone(&got);
    machine.submit(move |ctx| {
        if let Some(slot) = ctx.alloc_movable(9_999) {
            assert!(ctx.free_movable(slot));
            *theirs.lock().unwrap() = Some(());
        }
        TaskStatus::Done
    });
    common::drain(machine);
    let got = *got.lock().unwrap();
    got
}

#[test]
fn a_run_too_long_for_its_holder_is_refused() {
    let config = |block_frames| MemoryDeviceConfig {
        blocks: 8,
        block_frames,
        descriptors_on_block: true,
        run_blocks: 8,
        ..Default::default()
    };
    // A holder of two frames would keep both (one of descriptors, one of
    // bitmaps): physmem's 4 KiB frames are counted, not the arena's.
    let built = Machine::builder().memory_device(config(2)).build();
    let error = built.err().expect("refused").to_string();
    assert!(error.contains("would fill its first block"), "{error}");
    assert!(Machine::builder().memory_device(config(4)).build().is_ok());
}
