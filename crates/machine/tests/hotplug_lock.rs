//! The hotplug lock protects what Linux's `cpus_read_lock` protects: a task
//! that holds it for reading, across many slices, sees the online mask
//! unchanged, while CPUs go offline and come back under it with each
//! engine. Readers switch to their slow path only while a writer is near.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hotkern_machine::{CpuId, CpuSet, Engine, Machine, TaskStatus};

#[derive(Default)]
struct Seen {
    holds: AtomicU64,
    /// A mask that changed under a read hold.
    changed: AtomicU64,
    stop: AtomicBool,
}

/// A task that takes the lock, holds it for `slices` slices checking the
/// online mask at each, gives it back, and starts over.
fn reader(machine: &Machine, seen: &Arc<Seen>, slices: u32) {
    let seen = Arc::clone(seen);
    let mut held: Option<(CpuSet, u32)> = None;
    machine.submit(move |ctx| {
        match held.take() {
            None => {
                if seen.stop.load(Ordering::SeqCst) {
                    return TaskStatus::Done;
                }
                if ctx.cpus_read_trylock() {
                    held = Some((ctx.online_cpus(), slices));
                }
            }
            Some((mask, left)) => {
                if ctx.online_cpus() != mask {
                    seen.changed.fetch_add(1, Ordering::SeqCst);
                }
                if left == 0 {
                    ctx.cpus_read_unlock();
                    seen.holds.fetch_add(1, Ordering::SeqCst);
                } else {
                    held = Some((mask, left - 1));
                }
            }
        }
        std::thread::yield_now();
        TaskStatus::Again
    });
}

fn readers_see_a_stable_online_mask(engine: Engine) {
    let machine = Machine::builder().cpus(4).engine(engine).build().unwrap();
    let seen = Arc::new(Seen::default());
    for _ in 0..6 {
        reader(&machine, &seen, 40);
    }
    for round in 0..12u32 {
        let cpu = CpuId(1 + round % 3);
        machine.offline(cpu).unwrap();
        machine.online(cpu).unwrap();
        if round % 4 == 3 {
            machine.offline_many(CpuSet::range(1, 4)).unwrap();
            machine.online_many(CpuSet::range(1, 4)).unwrap();
        }
    }
    seen.stop.store(true, Ordering::SeqCst);
    assert!(
        machine.wait_idle(Duration::from_secs(30)),
        "readers finished"
    );
    assert_eq!(
        seen.changed.load(Ordering::SeqCst),
        0,
        "{engine:?}: a CPU came or went under a read hold"
    );
    assert!(
        seen.holds.load(Ordering::SeqCst) > 0,
        "{engine:?}: no read hold"
    );
    // Readers are fast again once the last operation's grace period ends.
    assert!(machine.wait_hotplug_lock_quiet(Duration::from_secs(10)));
    let violations = machine.check_invariants();
    assert!(violations.is_empty(), "{violations:?}");
}

#[test]
fn classic_readers_see_a_stable_online_mask() {
    readers_see_a_stable_online_mask(Engine::Classic);
}

#[test]
fn bolt_readers_see_a_stable_online_mask() {
    readers_see_a_stable_online_mask(Engine::Bolt);
}

#[test]
fn bolt_nostop_readers_see_a_stable_online_mask() {
    readers_see_a_stable_online_mask(Engine::BoltNoStop);
}
