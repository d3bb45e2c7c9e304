//! Real threads: several controllers reconfigure CPUs at once (operations
//! serialise on the hotplug lock) while a worker thread runs deferred
//! callbacks and the platform runs targets in parallel. Afterwards every
//! step's state agrees with the callbacks' physical state.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::*;
use hotkern_cpuhp::{CpuId, CpuSet, Engine, Error, StepId, StepStatus};

/// A small deterministic generator (xorshift), seeded per thread.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
fn concurrent_controllers_and_worker_keep_states_exact() {
    const CPUS: u32 = 8;
    let (hp, world) = machine(Engine::Bolt, CPUS, true);
    let hp = Arc::new(hp);
    let stop = Arc::new(AtomicBool::new(false));
    let worker = {
        let (hp, stop) = (hp.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut ran = 0;
            while !stop.load(Ordering::Acquire) {
                ran += hp.run_deferred();
                std::thread::yield_now();
            }
            ran
        })
    };
    let controllers: Vec<_> = (0..3u64)
        .map(|seed| {
            let hp = hp.clone();
            std::thread::spawn(move || {
                let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (seed + 1));
                let mut done = 0;
                for round in 0..150 {
                    let cpu = CpuId(1 + (rng.next() % u64::from(CPUS - 1)) as u32);
                    let set: CpuSet = (1..CPUS)
                        .filter(|_| rng.next() % 2 == 0)
                        .map(CpuId)
                        .collect();
                    let result = match rng.next() % 5 {
                        0 => hp.online(cpu),
                        1 => hp.offline(cpu),
                        2 => hp.online_many(set.difference(&hp.online_cpus())),
                        3 => hp.offline_many(set.intersection(&hp.online_cpus())),
                        _ => {
                            if round % 50 == 0 {
                                let engine = if seed % 2 == 0 {
                                    Engine::Classic
                                } else {
                                    Engine::Bolt
                                };
                                hp.set_engine(engine);
                            }
                            continue;
                        }
                    };
                    match result {
                        Ok(_) => done += 1,
                        // Other controllers move CPUs between our check and our call.
                        Err(
                            Error::AlreadyOnline(_) | Error::AlreadyOffline(_) | Error::EmptySet,
                        ) => {}
                        Err(other) => panic!("unexpected {other}"),
                    }
                }
                done
            })
        })
        .collect();
    let done: usize = controllers.into_iter().map(|c| c.join().unwrap()).sum();
    stop.store(true, Ordering::Release);
    worker.join().unwrap();
    hp.flush_deferred();
    assert!(done > 50, "only {done} operations succeeded");
    assert!(hp.online_cpus().contains(CpuId(0)));
    for cpu in hp.possible_cpus() {
        let want = if hp.is_online(cpu) {
            StepStatus::Up
        } else {
            StepStatus::Down
        };
        for i in 0..TABLE.len() {
            assert_eq!(
                hp.step_status(cpu, StepId(i as u16)),
                Some(want),
                "{cpu} step {i}"
            );
        }
    }
    assert_consistent(&hp, &world);
    assert_eq!(hp.warnings(), Default::default());
    // One reconfiguration at a time: no two stop-machines ever overlapped.
    assert_eq!(hp.platform().overlaps.load(Ordering::SeqCst), 0);
}
