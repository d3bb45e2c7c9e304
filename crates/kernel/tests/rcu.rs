//! Grace-period detection: when a grace period is over, on CPUs that are
//! std threads (the loom models are in `tests/rcu_loom.rs`).
#![cfg(not(loom))]

mod common;

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;

use common::{Bells, Cpu};
use hotkern_cpuhp::{CpuId, CpuSet};
use hotkern_kernel::platform::Cpus;
use hotkern_kernel::rcu::{GracePeriods, Kind, Unfinished};

/// The thread that drives grace periods, no CPU.
fn driver(bells: &Arc<Bells>) -> Cpu {
    Cpu {
        me: None,
        bells: Arc::clone(bells),
    }
}

fn set(cpus: &[u32]) -> CpuSet {
    cpus.iter().map(|&n| CpuId(n)).collect()
}

/// Grace periods over CPUs `0..n`, all online and awake.
fn online(cpus: &Cpu, n: u32) -> GracePeriods {
    let rcu = GracePeriods::new();
    for cpu in 0..n {
        rcu.set_online(cpus, CpuId(cpu), true);
    }
    rcu
}

/// Whether the grace period is over now, without sleeping.
fn over(grace_period: &hotkern_kernel::rcu::GracePeriod<'_>, cpus: &Cpu) -> Result<(), Unfinished> {
    grace_period.wait(cpus, None, &|| true)
}

#[test]
fn a_grace_period_waits_for_each_running_cpu_to_report() {
    let bells = Bells::new(2);
    let me = driver(&bells);
    let rcu = online(&me, 2);
    // A report from before the grace period began does not count.
    rcu.quiescent(&me, CpuId(0));
    let grace_period = rcu.begin(&me, Kind::Normal);
    assert_eq!(grace_period.waiting(), set(&[0, 1]));
    assert_eq!(over(&grace_period, &me), Err(Unfinished(set(&[0, 1]))));
    rcu.quiescent(&me, CpuId(0));
    assert_eq!(over(&grace_period, &me), Err(Unfinished(set(&[1]))));
    assert_eq!(rcu.completed(), 0);
    rcu.quiescent(&me, CpuId(1));
    assert_eq!(over(&grace_period, &me), Ok(()));
    grace_period.end();
    assert_eq!(rcu.completed(), 1);
}

#[test]
fn an_idle_cpu_does_not_hold_a_grace_period_up() {
    let bells = Bells::new(2);
    let me = driver(&bells);
    let rcu = online(&me, 2);
    assert!(!rcu.enter_idle(&me, CpuId(1)));
    let grace_period = rcu.begin(&me, Kind::Normal);
    assert_eq!(grace_period.waiting(), set(&[0]));
    // Going idle while it waits is a report too.
    assert!(!rcu.enter_idle(&me, CpuId(0)));
    assert_eq!(over(&grace_period, &me), Ok(()));
    grace_period.end();
    // Awake again, it is waited for.
    rcu.exit_idle(CpuId(1));
    let grace_period = rcu.begin(&me, Kind::Expedited);
    assert_eq!(grace_period.waiting(), set(&[1]));
    assert_eq!(over(&grace_period, &me), Err(Unfinished(set(&[1]))));
}

#[test]
fn an_offline_cpu_does_not_hold_a_grace_period_up() {
    let bells = Bells::new(3);
    let me = driver(&bells);
    let rcu = online(&me, 3);
    rcu.set_online(&me, CpuId(2), false);
    assert!(!rcu.is_online(CpuId(2)));
    let grace_period = rcu.begin(&me, Kind::Normal);
    assert_eq!(grace_period.waiting(), set(&[0, 1]));
    rcu.quiescent(&me, CpuId(0));
    // Its dying step, while the grace period waits for it.
    rcu.set_online(&me, CpuId(1), false);
    assert_eq!(over(&grace_period, &me), Ok(()));
}

#[test]
fn the_calling_cpu_is_quiescent_while_it_waits() {
    let bells = Bells::new(1);
    let cpu0 = Cpu {
        me: Some(CpuId(0)),
        bells,
    };
    let rcu = online(&cpu0, 1);
    assert_eq!(rcu.synchronize(&cpu0, Kind::Normal, None), Ok(()));
    assert!(!rcu.is_idle(CpuId(0)), "awake again once it returns");
    assert_eq!(rcu.completed(), 1);
}

#[test]
fn the_last_report_wakes_a_sleeping_driver() {
    let bells = Bells::new(2);
    let me = driver(&bells);
    let rcu = Arc::new(online(&me, 2));
    let waiter = {
        let (rcu, me) = (Arc::clone(&rcu), me.clone());
        std::thread::spawn(move || rcu.synchronize(&me, Kind::Normal, None))
    };
    while rcu.holding_up() != set(&[0, 1]) {
        assert!(!waiter.is_finished(), "ended without the busy CPUs");
        std::thread::yield_now();
    }
    rcu.quiescent(&me, CpuId(0));
    rcu.enter_idle(&me, CpuId(1));
    assert_eq!(waiter.join().unwrap(), Ok(()));
    assert_eq!(rcu.completed(), 1);
}

/// A platform whose clock advances by a millisecond each time it is read.
struct Ticking {
    now: AtomicU64,
    cpu: Cpu,
}

impl Cpus for Ticking {
    fn current(&self) -> Option<CpuId> {
        self.cpu.current()
    }
    fn wake(&self, cpu: CpuId) {
        self.cpu.wake(cpu);
    }
    fn wake_threads(&self) {
        self.cpu.wake_threads();
    }
    fn wait_until(&self, condition: &dyn Fn() -> bool) {
        self.cpu.wait_until(condition);
    }
    fn now_ns(&self) -> u64 {
        self.now.fetch_add(1_000_000, SeqCst)
    }
    fn wait_until_deadline(&self, condition: &dyn Fn() -> bool, deadline_ns: u64) -> bool {
        while !condition() {
            if self.now_ns() >= deadline_ns {
                return false;
            }
        }
        true
    }
}

#[test]
fn a_stalled_cpu_is_named_at_the_deadline_and_later_grace_periods_still_end() {
    let platform = Ticking {
        now: AtomicU64::new(0),
        cpu: driver(&Bells::new(2)),
    };
    let rcu = online(&platform.cpu, 2);
    rcu.enter_idle(&platform, CpuId(0));
    let deadline = platform.now_ns() + 5_000_000;
    assert_eq!(
        rcu.synchronize(&platform, Kind::Normal, Some(deadline)),
        Err(Unfinished(set(&[1])))
    );
    assert_eq!(rcu.completed(), 0);
    rcu.enter_idle(&platform, CpuId(1));
    let deadline = platform.now_ns() + 5_000_000;
    assert_eq!(
        rcu.synchronize(&platform, Kind::Normal, Some(deadline)),
        Ok(())
    );
    assert_eq!(rcu.completed(), 1);
}
