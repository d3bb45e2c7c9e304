//! The memory storm: random resizes of the machine's memory device (grow,
//! shrink, a shrink again during a shrink, a grow during a shrink) and
//! CPU offline/online, while tasks allocate movable frames, write their
//! (owner, generation) pattern, re-read every frame they own and free
//! some. After every resize the memory invariants hold; at the end every
//! task re-read all its frames intact and every item completed once. The
//! storm runs with descriptors on the heap and in the runs layout.

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use hotkern_machine::{
    CpuId, Machine, MemoryDeviceConfig, ResizeOutcome, RollbackCause, Slot, TaskStatus,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const BLOCKS: u64 = 12;
const BLOCK: u64 = 32;

/// A task owning about `quota` frames until `stop`: each slice it takes a
/// frame (below its quota), frees a random one (above it), or writes one
/// at a new generation, then re-reads every frame it owns. Any mismatch
/// panics the task (a violation). The host moves the quota up and down,
/// so that owned frames end up scattered over the blocks and shrinks
/// have frames to migrate.
fn owner(
    id: u64,
    quota: Arc<AtomicUsize>,
    seed: u64,
    stop: Arc<AtomicBool>,
) -> impl FnMut(&mut hotkern_machine::Context<'_>) -> TaskStatus + Send + 'static {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut owned: Vec<(Slot, u64)> = Vec::new();
    move |ctx| {
        let most = quota.load(Ordering::Relaxed);
        match rng.random_range(0..4) {
            _ if owned.len() > most => {
                let (slot, _) = owned.swap_remove(rng.random_range(0..owned.len()));
                assert!(ctx.free_movable(slot));
            }
            0 | 1 if owned.len() < most => {
                if let Some(slot) = ctx.alloc_movable(id) {
                    owned.push((slot, 0));
                }
            }
            2 if !owned.is_empty() => {
                let at = rng.random_range(0..owned.len());
                owned[at].1 += 1;
                assert!(ctx.write_movable(owned[at].0, owned[at].1));
            }
            3 if !owned.is_empty() => {
                let (slot, _) = owned.swap_remove(rng.random_range(0..owned.len()));
                assert!(ctx.free_movable(slot));
            }
            _ => {}
        }
        for &(slot, generation) in &owned {
            assert!(
                ctx.check_movable(slot, id, generation),
                "task {id} generation {generation}"
            );
        }
        if stop.load(Ordering::Relaxed) {
            for (slot, _) in owned.drain(..) {
                assert!(ctx.free_movable(slot));
            }
            TaskStatus::Done
        } else {
            TaskStatus::Again
        }
    }
}

fn storm(resizes: usize, seed: u64, layout: MemoryDeviceConfig) {
    let cpus = 4;
    let machine = Machine::builder()
        .cpus(cpus)
        .memory_device(MemoryDeviceConfig {
            blocks: BLOCKS as usize,
            block_frames: BLOCK,
            plugged_blocks: 6,
            ..layout
        })
        .build()
        .unwrap();
    let device = machine.memory_device().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let quota = Arc::new(AtomicUsize::new(8));
    for task in 0..8 {
        let quota = Arc::clone(&quota);
        machine.submit(owner(task, quota, seed ^ task, Arc::clone(&stop)));
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let mut outcomes = [0usize; 3];
    let mut migrated = 0;
    let mut holders_kept = 0;
    let mut offline: Vec<u32> = Vec::new();
    for step in 0..resizes {
        // Eight tasks own up to 8 × 30 frames, of the smallest size's 128:
        // shrinks migrate, and stop short when too few targets are left.
        quota.store(rng.random_range(2..=30), Ordering::Relaxed);
        let size = |rng: &mut StdRng| rng.random_range(4..=BLOCKS) * BLOCK;
        let reports = match rng.random_range(0..4) {
            0 | 1 => vec![machine.resize_memory(size(&mut rng))],
            // A second size while the first is followed: a shrink again
            // or a grow during a shrink, whichever the sizes make it.
            _ => {
                let first = device.request_size(size(&mut rng));
                let second = device.request_size(size(&mut rng));
                vec![machine.wait_memory(first), machine.wait_memory(second)]
            }
        };
        for report in reports {
            let report = report.unwrap_or_else(|error| panic!("step {step}: {error}"));
            outcomes[report.outcome as usize] += 1;
            migrated += report.migrated;
            holders_kept += (report.rolled_back.iter())
                .filter(|(_, cause)| *cause == RollbackCause::HoldsDescriptors)
                .count();
        }
        assert_eq!(machine.check_memory(), vec![], "after step {step}");
        if step % 4 == 0 {
            let cpu = rng.random_range(1..cpus as u32);
            if let Some(at) = offline.iter().position(|&c| c == cpu) {
                machine.online(CpuId(cpu)).unwrap();
                offline.swap_remove(at);
            } else {
                machine.offline(CpuId(cpu)).unwrap();
                offline.push(cpu);
            }
        }
    }
    stop.store(true, Ordering::Relaxed);
    common::drain(&machine);
    assert_eq!(machine.check_memory(), vec![]);
    assert!(machine.check_invariants().is_empty());
    eprintln!(
        "outcomes (completed, partial, superseded) {outcomes:?}, {migrated} frames migrated, \
         {holders_kept} holders kept for their runs"
    );
    assert!(
        outcomes[ResizeOutcome::Completed as usize] > 0,
        "{outcomes:?}"
    );
    assert!(migrated > 0, "shrinks moved used frames");
    let report = machine.shutdown();
    assert!(report.is_clean(), "{report:?}");
}

/// Descriptors and bitmaps on the blocks, in runs of four (the shared
/// core's runs layout): `check_memory` after every resize also finds each
/// plugged block's holder plugged and its descriptors intact.
fn runs_of_four() -> MemoryDeviceConfig {
    MemoryDeviceConfig {
        descriptors_on_block: true,
        run_blocks: 4,
        ..Default::default()
    }
}

#[test]
fn resizes_while_tasks_write_and_verify_their_frames() {
    storm(600, 7, MemoryDeviceConfig::default());
}

#[test]
fn resizes_in_runs_while_tasks_write_and_verify_their_frames() {
    storm(600, 11, runs_of_four());
}

#[test]
#[ignore = "long: run with --ignored"]
fn a_long_storm_of_resizes() {
    for seed in 0..8 {
        storm(3000, seed, MemoryDeviceConfig::default());
        storm(3000, seed, runs_of_four());
    }
}
