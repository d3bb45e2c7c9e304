//! The stop-machine rendezvous with std threads as CPUs: every member
//! joins each generation once, the targets run the work while everyone is
//! stopped, nobody leaves before the work is done, and a failed gathering
//! runs nothing.
#![cfg(not(loom))]

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use common::{Bells, Cpu};
use hotkern_cpuhp::{CpuId, CpuSet};
use hotkern_kernel::platform::Cpus;
use hotkern_kernel::stop_machine::Rendezvous;

/// CPUs `cpus` as threads that join whatever they are asked to until
/// `quit`; `after_join` runs each time one took part. Each returns how
/// many stop-machines it joined.
fn spawn_cpus(
    cpus: std::ops::Range<u32>,
    rendezvous: &Arc<Rendezvous>,
    bells: &Arc<Bells>,
    quit: &Arc<AtomicBool>,
    after_join: impl Fn(u64) + Clone + Send + 'static,
) -> Vec<(u32, JoinHandle<u64>)> {
    cpus.map(|n| {
        let (rendezvous, quit, after_join) =
            (Arc::clone(rendezvous), Arc::clone(quit), after_join.clone());
        let cpu = Cpu {
            me: Some(CpuId(n)),
            bells: Arc::clone(bells),
        };
        let thread = std::thread::spawn(move || {
            let mut joined = 0;
            loop {
                cpu.wait_until(&|| quit.load(SeqCst) || rendezvous.requested(CpuId(n)));
                if quit.load(SeqCst) {
                    return joined;
                }
                if rendezvous.join(&cpu) {
                    joined += 1;
                    after_join(joined);
                }
            }
        });
        (n, thread)
    })
    .collect()
}

fn stop_cpus(
    controller: &Cpu,
    quit: &AtomicBool,
    threads: Vec<(u32, JoinHandle<u64>)>,
) -> Vec<u64> {
    quit.store(true, SeqCst);
    for (n, _) in &threads {
        controller.wake(CpuId(*n));
    }
    threads
        .into_iter()
        .map(|(_, t)| t.join().unwrap())
        .collect()
}

/// The gathering of the user-mode machine: wake each member.
fn wake_each(controller: &Cpu) -> impl FnOnce(CpuSet) -> Result<(), ()> + '_ {
    |others| {
        others.iter().for_each(|cpu| controller.wake(cpu));
        Ok(())
    }
}

#[test]
fn every_member_runs_the_work_while_all_are_stopped() {
    let (rendezvous, bells) = (Arc::new(Rendezvous::new()), Bells::new(4));
    let quit = Arc::new(AtomicBool::new(false));
    let threads = spawn_cpus(0..4, &rendezvous, &bells, &quit, |_| {});
    let controller = Cpu { me: None, bells };
    let (inside, ran) = (AtomicU64::new(0), Mutex::new(Vec::new()));
    for _ in 0..5 {
        let cpus: CpuSet = [0, 1, 3].map(CpuId).into_iter().collect();
        let work = |cpu: CpuId| {
            inside.fetch_add(1, SeqCst);
            ran.lock().unwrap().push(cpu.index());
        };
        assert_eq!(
            rendezvous.run(&controller, cpus, cpus, &work, wake_each(&controller)),
            Ok(())
        );
    }
    assert_eq!(stop_cpus(&controller, &quit, threads), [5, 5, 0, 5]);
    assert_eq!(inside.load(SeqCst), 15);
    let mut ran = ran.into_inner().unwrap();
    ran.sort_unstable();
    assert_eq!(ran, [[0; 5], [1; 5], [3; 5]].concat());
    assert_eq!(rendezvous.completed(), 5);
}

#[test]
fn nobody_runs_while_a_target_runs_its_part() {
    let (rendezvous, bells) = (Arc::new(Rendezvous::new()), Bells::new(4));
    let quit = Arc::new(AtomicBool::new(false));
    let (ran, early) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let threads = {
        let (ran, early) = (Arc::clone(&ran), Arc::clone(&early));
        // Back to "normal work" after its n-th stop-machine (every CPU is
        // a member of each): the work of all n must have run.
        spawn_cpus(0..4, &rendezvous, &bells, &quit, move |joined| {
            if ran.load(SeqCst) < joined {
                early.fetch_add(1, SeqCst);
            }
        })
    };
    let controller = Cpu { me: None, bells };
    let (stopped, unstopped) = (Arc::new(AtomicU64::new(0)), AtomicU64::new(0));
    for round in 0..20u32 {
        let target = round % 4;
        let everyone = CpuSet::range(0, 4);
        let work = |cpu: CpuId| {
            assert_eq!(cpu.0, target);
            // Every member stopped before any target runs: nobody has
            // counted a return from this round yet (a count, not an
            // assert: a panic here would leave `run` waiting forever).
            if stopped.load(SeqCst) != u64::from(round) * 4 {
                unstopped.fetch_add(1, SeqCst);
            }
            // Whether a member waits cannot be seen, only what it does
            // when it leaves: these yields give one that leaves without
            // waiting time to be caught above.
            for _ in 0..50 {
                std::thread::yield_now();
            }
            ran.fetch_add(1, SeqCst);
        };
        let target_set = CpuSet::single(CpuId(target));
        rendezvous
            .run(
                &controller,
                everyone,
                target_set,
                &work,
                wake_each(&controller),
            )
            .unwrap();
        stopped.fetch_add(4, SeqCst);
    }
    assert_eq!(stop_cpus(&controller, &quit, threads), [20; 4]);
    assert_eq!(ran.load(SeqCst), 20);
    assert_eq!(unstopped.load(SeqCst), 0, "ran before all stopped");
    assert_eq!(early.load(SeqCst), 0, "left before the targets finished");
}

#[test]
fn a_controller_on_a_cpu_joins_and_may_be_the_target() {
    let (rendezvous, bells) = (Arc::new(Rendezvous::new()), Bells::new(3));
    let quit = Arc::new(AtomicBool::new(false));
    // CPUs 1 and 2 are threads; the controller is CPU 0, as on bare metal
    // (no other thread is CPU 0: one that were would race the controller
    // for its own place).
    let threads = spawn_cpus(1..3, &rendezvous, &bells, &quit, |_| {});
    let controller = Cpu {
        me: Some(CpuId(0)),
        bells,
    };
    let ran = Mutex::new(Vec::new());
    let work = |cpu: CpuId| ran.lock().unwrap().push(cpu.0);
    let others: CpuSet = [1, 2].map(CpuId).into_iter().collect();
    for targets in [[0, 1], [2, 0]] {
        let targets: CpuSet = targets.map(CpuId).into_iter().collect();
        rendezvous
            .run(&controller, others, targets, &work, wake_each(&controller))
            .unwrap();
    }
    // Both threads joined both rounds; the controller stood in for CPU 0.
    assert_eq!(stop_cpus(&controller, &quit, threads), [2, 2]);
    let mut ran = ran.into_inner().unwrap();
    ran.sort_unstable();
    assert_eq!(ran, [0, 0, 1, 2]);
}

#[test]
fn a_failed_gathering_runs_nothing_and_returns_the_error() {
    let rendezvous = Rendezvous::new();
    let controller = Cpu {
        me: None,
        bells: Bells::new(2),
    };
    let ran = AtomicU64::new(0);
    let work = |_: CpuId| {
        ran.fetch_add(1, SeqCst);
    };
    let failed = rendezvous.run(
        &controller,
        CpuSet::range(0, 2),
        CpuSet::range(0, 2),
        &work,
        |_| Err("cpu 1 did not take the call"),
    );
    assert_eq!(failed, Err("cpu 1 did not take the call"));
    assert_eq!((ran.load(SeqCst), rendezvous.completed()), (0, 0));
    // Nobody to stop: nothing to wait for.
    let nobody = rendezvous.run(
        &controller,
        CpuSet::EMPTY,
        CpuSet::range(0, 2),
        &work,
        |_| Err("not called"),
    );
    assert_eq!((nobody, ran.load(SeqCst)), (Ok(()), 0));
}
