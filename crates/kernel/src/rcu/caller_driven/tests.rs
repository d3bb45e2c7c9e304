//! The caller-driven grace periods over CPUs that never run: only the
//! reports a test makes reach the grace period, and the clock moves only
//! when the driver waits past what it waits for.

use alloc::string::ToString;
use std::boxed::Box;

use hotkern_cpuhp::CpuId;

use super::{CallerDriven, RunningCpus};
use crate::activity::Activity;
use crate::failures::Failures;
use crate::platform::Cpus;
use crate::rcu::callbacks::GracePeriodDriver;
use crate::rcu::Kind;
use crate::sync::{AtomicU64, Ordering};

/// CPUs `0..4`, those of `running` started; the caller is CPU 0.
struct Still {
    running: u64,
    clock: AtomicU64,
}

impl Cpus for Still {
    fn current(&self) -> Option<CpuId> {
        Some(CpuId(0))
    }

    fn wake(&self, _cpu: CpuId) {}

    fn wake_threads(&self) {}

    fn wait_until(&self, condition: &dyn Fn() -> bool) {
        assert!(condition(), "would wait for good: no CPU runs");
    }

    fn now_ns(&self) -> u64 {
        self.clock.load(Ordering::SeqCst)
    }

    /// Nothing runs meanwhile: the deadline comes.
    fn wait_until_deadline(&self, condition: &dyn Fn() -> bool, deadline_ns: u64) -> bool {
        if !condition() {
            self.clock.fetch_max(deadline_ns, Ordering::SeqCst);
        }
        condition()
    }

    fn activity(&self, _cpu: CpuId) -> Activity {
        Activity::TaskSlice
    }
}

impl RunningCpus for Still {
    fn cpu_count(&self) -> usize {
        4
    }

    fn is_running(&self, cpu: CpuId) -> bool {
        self.running & (1 << cpu.0) != 0
    }
}

const TIMEOUT_NS: u64 = 5_000_000_000;

fn rcu(running: u64) -> CallerDriven<Still> {
    let failures: &'static Failures = Box::leak(Box::new(Failures::new(|_| {})));
    let cpus = Still {
        running,
        clock: AtomicU64::new(0),
    };
    CallerDriven::new(cpus, TIMEOUT_NS, failures)
}

#[test]
fn a_deadline_that_passes_gives_a_stall_naming_the_busy_cpu() {
    // CPUs 0 (the caller) and 2 run; 2 never reports.
    let rcu = rcu(0b101);
    for kind in [Kind::Normal, Kind::Expedited] {
        let stall = rcu.synchronize(kind).expect_err("CPU 2 never reported");
        let named: std::vec::Vec<CpuId> = stall.cpus.iter().map(|cpu| cpu.cpu).collect();
        assert_eq!(named, [CpuId(2)], "{kind:?}");
        assert_eq!(stall.cpus[0].activity, Activity::TaskSlice);
        assert_eq!(stall.kind, kind);
        assert!(
            stall.elapsed_ns >= TIMEOUT_NS,
            "gave up before its deadline"
        );
        assert!(stall.to_string().contains("2:"), "{stall}");
    }
    assert_eq!(rcu.completed(), 0, "a stalled grace period never completes");
}

#[test]
fn the_online_set_follows_the_running_cpus_at_each_start() {
    let rcu = rcu(0b101);
    // Marked online by hand, CPU 3 is not running: the refresh drops it.
    rcu.set_online(CpuId(3), true);
    assert!(rcu.synchronize(Kind::Normal).is_err());
    assert!(!rcu.is_online(CpuId(3)));
    assert!(rcu.is_online(CpuId(2)));
    // CPU 2 parked: the next grace period does not wait for it.
    let rcu = CallerDriven::new(
        Still {
            running: 0b001,
            clock: AtomicU64::new(0),
        },
        TIMEOUT_NS,
        rcu.failures,
    );
    assert_eq!(rcu.synchronize(Kind::Normal), Ok(()));
    assert_eq!(rcu.completed(), 1);
}

#[test]
fn an_idle_cpu_holds_up_no_grace_period_and_its_tick_reports_nothing() {
    let rcu = rcu(0b011);
    rcu.enter_idle(CpuId(1));
    rcu.tick(CpuId(1));
    assert_eq!(rcu.synchronize(Kind::Normal), Ok(()));
    rcu.exit_idle(CpuId(1));
    assert!(rcu.synchronize(Kind::Expedited).is_err(), "awake and busy");
}

#[test]
fn the_callbacks_driver_records_a_stall_as_a_failure() {
    let rcu = rcu(0b011);
    let needed = GracePeriodDriver::request(&rcu);
    assert_eq!(needed, 1);
    GracePeriodDriver::synchronize(&rcu);
    assert_eq!(rcu.failures.len(), 1);
    assert!(rcu.failures.all()[0].contains("1:"));
    assert_eq!(GracePeriodDriver::this_cpu(&rcu), Some(0));
    assert!(GracePeriodDriver::completed(&rcu) < needed);
}
