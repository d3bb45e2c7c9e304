//! Real threads: several controllers reconfigure CPUs at once (operations
//! serialise on the hotplug lock) while a worker thread runs deferred
//! callbacks and the platform runs targets in parallel. Afterwards every
//! step's state agrees with the callbacks' physical state.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::*;
use hotkern_cpuhp::{CpuId, CpuSet, Engine, Error, StepId, StepStatus};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

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
                // StdRng: the same sequence on every platform (SmallRng's
                // algorithm changes with the pointer width).
                let mut rng = StdRng::seed_from_u64(seed);
                let mut done = 0;
                for round in 0..150 {
                    let cpu = CpuId(rng.random_range(1..CPUS));
                    let set: CpuSet = (1..CPUS).filter(|_| rng.random()).map(CpuId).collect();
                    let result = match rng.random_range(0..5) {
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
