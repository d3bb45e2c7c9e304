//! The hotplug lock's settle, for a kernel whose grace periods only the
//! hotplug controller drives ([`CallerDriven`]): the grace period the last
//! writer out queued (Linux's `rcu_sync_exit` → `call_rcu`) ends only when
//! the controller drives one, so between two operations it drives them
//! itself, outside any timed region, as Linux's grace-period kthread does
//! in the background. The next operation then starts from a quiet lock and
//! its writer pays a whole grace period, as a lone operation in Linux.

use core::fmt;

use crate::percpu_rwsem::PercpuRwsem;
use crate::rcu::caller_driven::{CallerDriven, RunningCpus};
use crate::rcu::{Kind, Stall};

/// Why the hotplug lock did not settle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unsettled {
    /// Readers were still off their fast path when the timeout passed.
    Timeout,
    /// A grace period it drove stalled.
    Stall(Stall),
}

impl fmt::Display for Unsettled {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unsettled::Timeout => f.write_str("the hotplug lock did not settle in time"),
            Unsettled::Stall(stall) => write!(f, "hotplug lock: {stall}"),
        }
    }
}

/// Drives grace periods of `rcu` and runs the callbacks whose grace period
/// ended (`run_callbacks`, on the calling CPU) until readers of `lock` are
/// back on their fast path, waking every running CPU after each one (the
/// callback may sit on another CPU's list, whose `rcuc` thread runs it
/// once woken). Gives up after `rcu`'s timeout.
///
/// # Errors
///
/// [`Unsettled::Timeout`] once the timeout passed, [`Unsettled::Stall`] if
/// a grace period stalled.
///
/// ```
/// use hotkern_cpuhp::CpuId;
/// use hotkern_kernel::failures::Failures;
/// use hotkern_kernel::hotplug::settle;
/// use hotkern_kernel::percpu_rwsem::PercpuRwsem;
/// use hotkern_kernel::platform::Cpus;
/// use hotkern_kernel::rcu::caller_driven::{CallerDriven, RunningCpus};
///
/// struct Alone;
/// impl Cpus for Alone {
///     fn current(&self) -> Option<CpuId> { Some(CpuId(0)) }
///     fn wake(&self, _: CpuId) {}
///     fn wake_threads(&self) {}
///     fn wait_until(&self, condition: &dyn Fn() -> bool) { assert!(condition()) }
/// }
/// impl RunningCpus for Alone {
///     fn cpu_count(&self) -> usize { 1 }
///     fn is_running(&self, cpu: CpuId) -> bool { cpu == CpuId(0) }
/// }
///
/// static FAILURES: Failures = Failures::new(|_| {});
/// static RCU: CallerDriven<Alone> = CallerDriven::new(Alone, 1_000_000, &FAILURES);
/// let lock = PercpuRwsem::new(1);
/// lock.write_lock(&Alone, || {});
/// assert!(lock.write_unlock(&Alone), "a grace period must end first");
/// // The callback the writer queued runs after the grace period.
/// let callback = || while lock.grace_period_ended() {};
/// assert_eq!(settle(&lock, &RCU, callback), Ok(()));
/// assert!(!lock.writer_near());
/// ```
pub fn settle<C: RunningCpus>(
    lock: &PercpuRwsem,
    rcu: &CallerDriven<C>,
    mut run_callbacks: impl FnMut(),
) -> Result<(), Unsettled> {
    let cpus = rcu.cpus();
    let deadline = cpus.now_ns().saturating_add(rcu.timeout_ns());
    while lock.writer_near() {
        if cpus.now_ns() > deadline {
            return Err(Unsettled::Timeout);
        }
        rcu.synchronize(Kind::Normal).map_err(Unsettled::Stall)?;
        run_callbacks();
        for cpu in (0..cpus.cpu_count()).map(crate::cpuset::cpu_id) {
            if cpus.is_running(cpu) {
                cpus.wake(cpu);
            }
        }
        core::hint::spin_loop();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::boxed::Box;

    use hotkern_cpuhp::CpuId;

    use super::*;
    use crate::failures::Failures;
    use crate::platform::Cpus;
    use crate::sync::{AtomicU64, Ordering};

    /// CPU 0 alone, the caller; its clock moves a millisecond per look.
    struct Ticking(AtomicU64);

    impl Cpus for Ticking {
        fn current(&self) -> Option<CpuId> {
            Some(CpuId(0))
        }
        fn wake(&self, _cpu: CpuId) {}
        fn wake_threads(&self) {}
        fn wait_until(&self, condition: &dyn Fn() -> bool) {
            assert!(condition());
        }
        fn now_ns(&self) -> u64 {
            self.0.fetch_add(1_000_000, Ordering::SeqCst)
        }
    }

    impl RunningCpus for Ticking {
        fn cpu_count(&self) -> usize {
            1
        }
        fn is_running(&self, cpu: CpuId) -> bool {
            cpu == CpuId(0)
        }
    }

    fn rcu() -> CallerDriven<Ticking> {
        let failures: &'static Failures = Box::leak(Box::new(Failures::new(|_| {})));
        CallerDriven::new(Ticking(AtomicU64::new(0)), 50_000_000, failures)
    }

    #[test]
    fn settle_gives_up_after_its_timeout_while_a_writer_holds_the_lock() {
        let rcu = rcu();
        let lock = PercpuRwsem::new(1);
        lock.write_lock(rcu.cpus(), || {});
        let mut rounds = 0;
        assert_eq!(settle(&lock, &rcu, || rounds += 1), Err(Unsettled::Timeout));
        assert!(rounds >= 1, "drove grace periods while it waited");
        assert!(rcu.completed() >= 1);
        assert!(lock.writer_near(), "settling changes no lock state");
    }

    #[test]
    fn settle_returns_once_the_queued_callback_ran() {
        let rcu = rcu();
        let lock = PercpuRwsem::new(1);
        lock.write_lock(rcu.cpus(), || {});
        assert!(lock.write_unlock(rcu.cpus()));
        let mut ran = 0;
        let callback = || {
            ran += 1;
            while lock.grace_period_ended() {}
        };
        assert_eq!(settle(&lock, &rcu, callback), Ok(()));
        assert!(!lock.writer_near());
        assert!(ran >= 1);
        // A quiet lock drives nothing.
        let completed = rcu.completed();
        assert_eq!(settle(&lock, &rcu, || {}), Ok(()));
        assert_eq!(rcu.completed(), completed);
    }
}
