//! When readers of a lock may skip their memory barriers: Linux's
//! `rcu_sync` (kernel/rcu/sync.c), the half of a per-CPU reader-writer
//! lock that tells readers whether a writer is near.
//!
//! * **States.** `Idle` (no writer near: readers take their fast path),
//!   `Enter` (the first writer waits for a grace period, after which no
//!   reader still runs that saw `Idle`), `Passed` (writers may proceed;
//!   readers take their slow path), `Exit` (the last writer left; a grace
//!   period later readers may be fast again) and `Replay` (a writer came
//!   and left again during `Exit`: one more grace period).
//! * **Who writes what.** Only writers and the grace-period callback change
//!   the state, all under `writers`' lock; readers only load it, inside a
//!   read-side section of the grace periods the writers wait for.
//! * **The cost it models.** The first writer after a quiet spell pays one
//!   grace period; writers that follow each other within a grace period
//!   pay none, as back-to-back CPU hotplug operations in Linux share
//!   `cpu_hotplug_lock`'s. Which kind of grace period is the writer's
//!   choice (Linux expedites it where `rcu_expedite_gp()` is in force).
//! * **Why the callback.** Readers may only go fast again once every
//!   section that saw the writer's `Passed` state has ended: that is a grace
//!   period after the last writer left, queued by [`RcuSync::exit`] as
//!   Linux queues it with `call_rcu`, and run by the platform's callback
//!   machinery, which calls [`RcuSync::grace_period_ended`].

use crate::cpuset::AtomicCpuSet;
use crate::platform::Cpus;
use crate::sync::{AtomicUsize, Mutex, Ordering};

const IDLE: usize = 0;
const ENTER: usize = 1;
const PASSED: usize = 2;
const EXIT: usize = 3;
const REPLAY: usize = 4;

/// Whether a writer is near, for the readers of one lock.
///
/// ```
/// use hotkern_kernel::platform::Cpus;
/// use hotkern_kernel::rcu_sync::RcuSync;
/// # use hotkern_cpuhp::CpuId;
/// # struct Thread;
/// # impl Cpus for Thread {
/// #     fn current(&self) -> Option<CpuId> { None }
/// #     fn wake(&self, _: CpuId) {}
/// #     fn wake_threads(&self) {}
/// #     fn wait_until(&self, condition: &dyn Fn() -> bool) { while !condition() {} }
/// # }
///
/// let sync = RcuSync::new();
/// let mut grace_periods = 0;
/// assert!(sync.is_idle());
/// assert!(sync.enter(&Thread, || grace_periods += 1), "the first writer waits");
/// assert!(!sync.is_idle());
/// assert!(sync.exit(), "queue the grace period after which readers are fast");
/// // A writer within that grace period waits for none.
/// assert!(!sync.enter(&Thread, || grace_periods += 1));
/// assert!(!sync.exit(), "the queued one replays instead");
/// assert!(sync.grace_period_ended(), "one more for the replay");
/// assert!(!sync.grace_period_ended());
/// assert!(sync.is_idle());
/// assert_eq!(grace_periods, 1);
/// ```
pub struct RcuSync {
    state: AtomicUsize,
    /// Writers between [`RcuSync::enter`] and [`RcuSync::exit`] (Linux's
    /// `gp_count`); the lock also orders every change of `state`.
    writers: Mutex<usize>,
    /// CPUs of writers waiting in [`RcuSync::enter`] for another's grace
    /// period.
    waiting: AtomicCpuSet,
}

impl RcuSync {
    /// No writer near.
    pub fn new() -> Self {
        RcuSync {
            state: AtomicUsize::new(IDLE),
            writers: Mutex::new(0),
            waiting: AtomicCpuSet::default(),
        }
    }

    /// Whether readers may take their fast path (Linux's
    /// `rcu_sync_is_idle`). A reader calls it inside a read-side section of
    /// the grace periods writers wait for: seeing `true` there, it is done
    /// before any writer's [`RcuSync::enter`] returns.
    pub fn is_idle(&self) -> bool {
        // Acquire pairs with the release in `grace_period_ended`: a reader
        // that sees `Idle` sees what the last writer did.
        self.state.load(Ordering::Acquire) == IDLE
    }

    /// A writer arrives; returns once readers take their slow path.
    /// `synchronize` waits for one grace period, and is called only by the
    /// first writer after a quiet spell; returns whether it was called.
    pub fn enter<P: Cpus + ?Sized>(&self, cpus: &P, synchronize: impl FnOnce()) -> bool {
        let was = {
            let mut writers = self.writers.lock();
            let was = self.state.load(Ordering::Relaxed);
            if was == IDLE {
                // SeqCst: stored before the grace period begins, so that a
                // section that does not see it is one the grace period
                // waits for (partner: the grace period's begin).
                self.state.store(ENTER, Ordering::SeqCst);
            }
            *writers += 1;
            was
        };
        if was == IDLE {
            synchronize();
            {
                let _writers = self.writers.lock();
                // An RMW, paired with the waiters' in `has_passed`.
                self.state.swap(PASSED, Ordering::SeqCst);
            }
            self.wake_waiting(cpus);
            return true;
        }
        let me = cpus.current();
        if let Some(cpu) = me {
            // Registered before the check, so that the first writer's wake
            // after its store of `Passed` cannot miss us.
            self.waiting.set(cpu, true);
        }
        cpus.wait_until(&|| self.has_passed());
        if let Some(cpu) = me {
            self.waiting.set(cpu, false);
        }
        false
    }

    /// A writer leaves. Returns whether the caller must now arrange for
    /// [`RcuSync::grace_period_ended`] to run after a grace period (Linux
    /// queues it with `call_rcu`).
    pub fn exit(&self) -> bool {
        let mut writers = self.writers.lock();
        debug_assert!(*writers > 0, "rcu_sync: exit without enter");
        *writers = writers.saturating_sub(1);
        if *writers > 0 {
            return false;
        }
        match self.state.load(Ordering::Relaxed) {
            PASSED => {
                self.state.store(EXIT, Ordering::Relaxed);
                true
            }
            EXIT => {
                self.state.store(REPLAY, Ordering::Relaxed);
                false
            }
            _ => false,
        }
    }

    /// The grace period queued by [`RcuSync::exit`] (or by an earlier call
    /// of this) has ended. Returns whether one more must be queued: a
    /// writer came and went meanwhile.
    pub fn grace_period_ended(&self) -> bool {
        let writers = self.writers.lock();
        match self.state.load(Ordering::Relaxed) {
            // A writer is back: it entered without waiting, since `Exit`
            // is past `Passed`; writers stay.
            _ if *writers > 0 => {
                self.state.store(PASSED, Ordering::Relaxed);
                false
            }
            REPLAY => {
                self.state.store(EXIT, Ordering::Relaxed);
                true
            }
            _ => {
                // Release: pairs with the readers' acquire in `is_idle`.
                self.state.store(IDLE, Ordering::Release);
                false
            }
        }
    }

    /// Whether writers may proceed, read with an RMW: a waiter registers
    /// itself, then reads this; the first writer stores `Passed`, then
    /// reads who waits. Both sides RMWs, neither can miss the other.
    fn has_passed(&self) -> bool {
        self.state.fetch_add(0, Ordering::SeqCst) >= PASSED
    }

    fn wake_waiting<P: Cpus + ?Sized>(&self, cpus: &P) {
        for cpu in self.waiting.load_latest().iter() {
            cpus.wake(cpu);
        }
        cpus.wake_threads();
    }
}

impl Default for RcuSync {
    fn default() -> Self {
        RcuSync::new()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use hotkern_cpuhp::CpuId;

    struct Thread;

    impl Cpus for Thread {
        fn current(&self) -> Option<CpuId> {
            None
        }
        fn wake(&self, _: CpuId) {}
        fn wake_threads(&self) {}
        fn wait_until(&self, condition: &dyn Fn() -> bool) {
            assert!(condition(), "would sleep for good");
        }
    }

    /// Two writers overlap: only the last one out queues the grace
    /// period, and readers stay slow until it ends.
    #[test]
    fn only_the_last_writer_out_queues_the_grace_period() {
        let sync = RcuSync::new();
        let mut grace_periods = 0;
        assert!(sync.enter(&Thread, || grace_periods += 1));
        assert!(!sync.enter(&Thread, || grace_periods += 1));
        assert_eq!(grace_periods, 1);
        assert!(!sync.exit(), "a writer is still in");
        assert!(!sync.is_idle());
        assert!(sync.exit());
        assert!(!sync.is_idle(), "slow until the grace period ends");
        assert!(!sync.grace_period_ended());
        assert!(sync.is_idle());
        // Quiet again: the next writer pays a whole grace period.
        assert!(sync.enter(&Thread, || grace_periods += 1));
        assert_eq!(grace_periods, 2);
        // Its callback, run while a writer is back in, keeps readers slow
        // and queues nothing.
        assert!(sync.exit());
        assert!(!sync.enter(&Thread, || grace_periods += 1));
        assert!(!sync.grace_period_ended());
        assert!(!sync.is_idle());
        assert!(sync.exit());
        assert!(!sync.grace_period_ended());
        assert!(sync.is_idle());
        assert_eq!(grace_periods, 2);
    }
}
