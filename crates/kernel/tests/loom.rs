//! Model checks of the stop-machine rendezvous: two member CPUs and a
//! controller, which is either a thread that is no CPU (the user-mode
//! machine's engine) or a CPU that joins (the bare-metal kernel's).
//! The work runs exactly once per target, only once every member has
//! arrived, and nobody leaves before it is done; loom also fails a model
//! whose threads all end up asleep (a lost wake-up).
//! Run with `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test
//! --release -p hotkern-kernel --test loom`.
#![cfg(loom)]

mod common;

use loom::sync::atomic::{AtomicU32, Ordering::SeqCst};
use loom::sync::Arc;

use common::{checker, Bells, Cpu};
use hotkern_cpuhp::{CpuId, CpuSet};
use hotkern_kernel::platform::Cpus;
use hotkern_kernel::stop_machine::Rendezvous;

/// What the work records: runs per CPU, and members arrived when it ran.
struct Seen {
    runs: [AtomicU32; 3],
    arrived: AtomicU32,
}

/// One stop-machine: CPUs `threads` are threads that wait for the request
/// and join; the controller is `controller` (None: no CPU); `targets` run
/// the work. Every member, once it leaves, and the controller, once it
/// returns, finds each target's work done exactly once.
fn one_stop_machine(controller: Option<u32>, threads: &[u32], targets: &'static [u32]) {
    let rendezvous = Arc::new(Rendezvous::new());
    let bells = Bells::new(3);
    let seen = Arc::new(Seen {
        runs: Default::default(),
        arrived: AtomicU32::new(0),
    });
    let members = threads.len() as u32 + u32::from(controller.is_some());
    let done = move |seen: &Seen| {
        for cpu in 0..3 {
            let expected = u32::from(targets.contains(&cpu));
            assert_eq!(
                seen.runs[cpu as usize].load(SeqCst),
                expected,
                "cpu {cpu}'s work"
            );
        }
    };
    let handles: Vec<_> = threads
        .iter()
        .map(|&n| {
            let (rendezvous, seen) = (Arc::clone(&rendezvous), Arc::clone(&seen));
            let cpu = Cpu {
                me: Some(CpuId(n)),
                bells: Arc::clone(&bells),
            };
            loom::thread::spawn(move || {
                cpu.wait_until(&|| rendezvous.requested(CpuId(n)));
                seen.arrived.fetch_add(1, SeqCst);
                assert!(rendezvous.join(&cpu));
                done(&seen);
            })
        })
        .collect();
    let me = Cpu {
        me: controller.map(CpuId),
        bells,
    };
    if controller.is_some() {
        seen.arrived.fetch_add(1, SeqCst);
    }
    let work = |cpu: CpuId| {
        assert_eq!(seen.arrived.load(SeqCst), members, "ran before all arrived");
        seen.runs[cpu.index()].fetch_add(1, SeqCst);
    };
    let all: CpuSet = threads.iter().map(|&n| CpuId(n)).collect();
    let targets: CpuSet = targets.iter().map(|&n| CpuId(n)).collect();
    let gathered = rendezvous.run(&me, all, targets, &work, |others| {
        others.iter().for_each(|cpu| me.wake(cpu));
        Ok::<(), ()>(())
    });
    assert_eq!(gathered, Ok(()));
    done(&seen);
    for handle in handles {
        handle.join().unwrap();
    }
}

/// The user-mode machine's shape: the controller is no CPU; one member is
/// the target, the other only stops.
#[test]
fn a_thread_controls_two_cpus() {
    checker().check(|| one_stop_machine(None, &[0, 1], &[0]));
}

/// The bare-metal kernel's shape: the controller is CPU 0 and joins; the
/// other CPU is the target.
#[test]
fn a_cpu_controls_and_joins() {
    checker().check(|| one_stop_machine(Some(0), &[1], &[1]));
}

/// Both members are targets: each runs the work once.
#[test]
fn two_targets_each_run_the_work_once() {
    checker().check(|| one_stop_machine(None, &[0, 1], &[0, 1]));
}
