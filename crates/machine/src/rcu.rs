//! RCU-like grace periods over the vCPUs' quiescent states.
//!
//! A vCPU is in a read-side critical section whenever it runs something (a
//! task slice, a kernel thread's turn, a callback); it passes a quiescent
//! state each time round its scheduler loop, and an idle or untracked
//! (offline) vCPU is quiescent throughout. When a grace period is over is
//! the shared kernel's [`hotkern_kernel::rcu`], as on bare metal; what
//! stays here is the machine's own: a grace-period thread, as Linux's
//! `rcu_gp` kthread, that drives one grace period at a time for the
//! requests of many `synchronize` callers, and the `call_rcu` callback
//! lists that each vCPU's `rcuc` thread runs once their grace period ends.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;

use hotkern_kernel::cblist::CallbackLists;
use hotkern_kernel::cpuset::cpu_id;
use hotkern_kernel::platform::Cpus;
use hotkern_kernel::rcu::{GracePeriods, Kind};
use hotkern_kernel::sync::{AtomicBool, Condvar, Mutex};
use hotkern_kernel::tick::Hz;

use crate::signal::{current_cpu, Doorbells};
use crate::task::Job;

/// Something to run after a grace period.
pub(crate) enum Callback {
    /// A machine job with its ledger id, run on the CPU's `rcuc` thread.
    Job(u64, Job),
    /// The machine's own clean-up (freeing an unpublished structure).
    Internal(Box<dyn FnOnce() + Send>),
}

/// The grace periods asked for and done, as the grace-period thread and
/// its callers count them.
#[derive(Default)]
struct Requests {
    completed: u64,
    in_progress: bool,
    requested: u64,
    /// The last grace period an expedited caller waits for: until it has
    /// ended, the thread runs expedited ones. One sequence serves both
    /// kinds (Linux keeps two, `rcu_state.gp_seq` and `expedited_sequence`):
    /// an expedited grace period is a full one, so normal callers take it.
    expedite_until: u64,
    stop: bool,
}

pub(crate) struct Rcu {
    state: Mutex<Requests>,
    /// Wakes the grace-period thread for requests and for `stop`.
    to_thread: Condvar,
    /// Wakes `synchronize` callers.
    ended: Condvar,
    /// When a grace period is over; the vCPUs report to it.
    detect: GracePeriods,
    /// Gives up the grace period in progress: the machine is stopping.
    stopping: AtomicBool,
    /// Each vCPU's callbacks waiting for their grace period; a vCPU has no
    /// list while its RCU data is torn down.
    lists: CallbackLists<Callback>,
    doorbells: Arc<Doorbells>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Rcu {
    pub(crate) fn start(
        cpus: usize,
        doorbells: Arc<Doorbells>,
        hz: Hz,
    ) -> std::io::Result<Arc<Rcu>> {
        let rcu = Rcu::unstarted(cpus, doorbells);
        rcu.detect.set_hz(hz);
        let theirs = Arc::clone(&rcu);
        let handle = std::thread::Builder::new()
            .name("rcu_gp".into())
            .spawn(move || theirs.grace_period_thread())?;
        *rcu.thread.lock() = Some(handle);
        Ok(rcu)
    }

    /// An `Rcu` with no grace-period thread yet: [`start`](Self::start)
    /// spawns one, the loom model runs its body itself.
    pub(crate) fn unstarted(cpus: usize, doorbells: Arc<Doorbells>) -> Arc<Rcu> {
        Arc::new(Rcu {
            state: Mutex::new(Requests::default()),
            to_thread: Condvar::new(),
            ended: Condvar::new(),
            detect: GracePeriods::new(),
            stopping: AtomicBool::new(false),
            lists: CallbackLists::new(cpus),
            doorbells,
            thread: Mutex::new(None),
        })
    }

    /// The grace-period thread's body, run by the caller (for the loom model).
    #[cfg(loom)]
    pub(crate) fn run_grace_period_thread(&self) {
        self.grace_period_thread();
    }

    /// Stops the grace-period thread and joins it.
    pub(crate) fn stop(&self) {
        self.state.lock().stop = true;
        self.to_thread.notify_all();
        // The grace period in progress waits on the threads' doorbell.
        self.stopping.store(true, Ordering::SeqCst);
        self.doorbells.wake_threads();
        if let Some(handle) = self.thread.lock().take() {
            let _ = handle.join();
        }
    }

    /// Grace periods completed so far.
    pub(crate) fn completed(&self) -> u64 {
        self.detect.completed()
    }

    /// Waits for a full grace period: every read-side section running now
    /// has ended when this returns (Linux's `synchronize_rcu`, woken by the
    /// grace-period thread as `rcu_normal_wake_from_gp` does).
    pub(crate) fn synchronize(&self) {
        self.wait_for_grace_period(Kind::Normal);
    }

    /// [`Rcu::synchronize`] with an expedited grace period (Linux's
    /// `synchronize_rcu_expedited`): the vCPUs are rung rather than waited
    /// for.
    pub(crate) fn synchronize_expedited(&self) {
        self.wait_for_grace_period(Kind::Expedited);
    }

    fn wait_for_grace_period(&self, kind: Kind) {
        // A vCPU blocked here runs nothing: it is quiescent while it waits,
        // as a task that sleeps in `synchronize_rcu` lets its CPU switch.
        let blocked = current_cpu().map(|cpu| (cpu, self.idle_entered(cpu)));
        let mut state = self.state.lock();
        let target = Self::request(&mut state);
        if kind == Kind::Expedited {
            state.expedite_until = state.expedite_until.max(target);
            if state.in_progress {
                // A normal one in progress would hold this caller up at
                // normal speed before its own could begin.
                self.detect.expedite(&*self.doorbells);
            }
        }
        self.to_thread.notify_all();
        while state.completed < target {
            self.ended.wait(&mut state);
        }
        drop(state);
        if let Some((cpu, false)) = blocked {
            self.idle_exited(cpu);
        }
    }

    /// Asks for the first grace period that starts after now; returns its number.
    fn request(state: &mut Requests) -> u64 {
        let target = state.completed + if state.in_progress { 2 } else { 1 };
        state.requested = state.requested.max(target);
        target
    }

    /// vCPU `cpu` passed a quiescent state.
    pub(crate) fn quiescent(&self, cpu: usize) {
        self.detect.quiescent(&*self.doorbells, cpu_id(cpu));
    }

    /// vCPU `cpu`'s scheduler tick.
    pub(crate) fn tick(&self, cpu: usize) {
        self.detect.tick(&*self.doorbells, cpu_id(cpu));
    }

    /// Whether `cpu` must keep its tick while idle: it holds callbacks
    /// waiting for grace periods (Linux's `rcu_needs_cpu`).
    pub(crate) fn needs_cpu(&self, cpu: usize) -> bool {
        self.lists.pending(cpu) > 0
    }

    /// Starts or stops waiting for `cpu` (its online state, for RCU): a
    /// grace period waiting on a vCPU that goes offline ends without it.
    pub(crate) fn set_tracked(&self, cpu: usize, tracked: bool) {
        self.detect
            .set_online(&*self.doorbells, cpu_id(cpu), tracked);
    }

    pub(crate) fn is_tracked(&self, cpu: usize) -> bool {
        self.detect.is_online(cpu_id(cpu))
    }

    /// vCPU `cpu` runs nothing from now (it sleeps, or its thread blocks)
    /// until [`Rcu::idle_exited`]: a grace period waiting for it ends.
    /// Returns whether it was idle already.
    pub(crate) fn idle_entered(&self, cpu: usize) -> bool {
        self.detect.enter_idle(&*self.doorbells, cpu_id(cpu))
    }

    /// vCPU `cpu` may run something again.
    pub(crate) fn idle_exited(&self, cpu: usize) {
        self.detect.exit_idle(cpu_id(cpu));
    }

    /// vCPU `cpu` found nothing to do: sleeps on its doorbell until rung or
    /// until `until`, quiescent meanwhile. What the loom model
    /// (`tests/loom.rs`) runs as the vCPU loop's idle path: the shared
    /// loop's halt (`hotkern_kernel::idle`) with the same RCU calls around
    /// the same doorbell wait.
    #[cfg(loom)]
    pub(crate) fn idle(&self, cpu: usize, until: Option<std::time::Instant>) {
        self.doorbells.get(cpu).idle_wait(
            until,
            || {
                self.idle_entered(cpu);
            },
            || self.idle_exited(cpu),
        );
    }

    /// Creates `cpu`'s callback list; false if it already exists.
    pub(crate) fn create_data(&self, cpu: usize) -> bool {
        self.lists.create(cpu)
    }

    /// Hands `cpu`'s callbacks to `heir` with their grace periods
    /// unchanged, keeping `cpu`'s (now empty) list; returns how many moved.
    /// Nothing moves if the heir has no list.
    pub(crate) fn migrate(&self, cpu: usize, heir: usize) -> usize {
        let moved = self.lists.migrate(cpu, heir);
        if moved > 0 {
            self.doorbells.ring(heir);
        }
        moved
    }

    /// Frees `cpu`'s callback list; false (and nothing changes) if it does
    /// not exist or still holds callbacks.
    pub(crate) fn free_data(&self, cpu: usize) -> bool {
        self.lists.free(cpu)
    }

    /// Frees `cpu`'s callback list whatever it holds (the machine is
    /// stopping; callbacks left are counted as outstanding by the ledger).
    pub(crate) fn drop_data(&self, cpu: usize) -> bool {
        self.lists.take_all(cpu).is_some()
    }

    /// Callbacks queued on `cpu`, ready or not; `None` if it has no list.
    pub(crate) fn queued(&self, cpu: usize) -> Option<usize> {
        self.lists.exists(cpu).then(|| self.lists.pending(cpu))
    }

    /// Whether `cpu` has RCU data.
    #[cfg(test)]
    pub(crate) fn has_data(&self, cpu: usize) -> bool {
        self.lists.exists(cpu)
    }

    /// Queues `callback` on `cpu` to run after a grace period. Returns the
    /// callback if `cpu` has no RCU data.
    pub(crate) fn call(&self, cpu: usize, callback: Callback) -> Result<(), Callback> {
        let target = {
            let mut state = self.state.lock();
            let target = Self::request(&mut state);
            self.to_thread.notify_all();
            target
        };
        self.lists.call(cpu, target, callback)
    }

    /// Waits until every callback queued before the call has run (Linux's
    /// `rcu_barrier`): entrains one more callback behind each vCPU's list
    /// (a list runs in grace-period order, and the new one's grace period
    /// is no earlier than any queued before it) and waits for all of them.
    /// Only online vCPUs' lists: an offline vCPU's teardown moved its
    /// callbacks to a live one (a list bolt kept stays empty), and one
    /// going offline after this moves the entrained callback with the
    /// rest. Called from a thread that is no vCPU, as a vCPU that blocks
    /// here could not run its own callbacks.
    pub(crate) fn barrier(&self) {
        let left = Arc::new((Mutex::new(0usize), Condvar::new()));
        for cpu in (0..self.lists.cpus()).filter(|&cpu| self.is_tracked(cpu)) {
            let theirs = Arc::clone(&left);
            let entrained = Callback::Internal(Box::new(move || {
                let (count, all_ran) = &*theirs;
                let mut count = count.lock();
                *count -= 1;
                if *count == 0 {
                    all_ran.notify_all();
                }
            }));
            // Counted first, so that a callback that runs at once finds
            // itself counted.
            *left.0.lock() += 1;
            if self.call(cpu, entrained).is_err() {
                *left.0.lock() -= 1;
            }
        }
        let (count, all_ran) = &*left;
        let mut count = count.lock();
        while *count > 0 {
            all_ran.wait(&mut count);
        }
    }

    /// Each vCPU's callbacks waiting for their grace period, which its
    /// `rcuc` thread runs once [`Rcu::completed`] reaches it (the shared
    /// body, `hotkern_kernel::smpboot`).
    pub(crate) fn lists(&self) -> &CallbackLists<Callback> {
        &self.lists
    }

    /// Whether `cpu` has a callback whose grace period has ended.
    #[cfg(test)]
    pub(crate) fn has_ready(&self, cpu: usize) -> bool {
        self.lists.has_ready(cpu, self.completed())
    }

    /// Takes `cpu`'s callbacks whose grace period has ended.
    #[cfg(test)]
    pub(crate) fn take_ready(&self, cpu: usize) -> Vec<Callback> {
        self.lists.take_ready(cpu, self.completed())
    }

    fn grace_period_thread(&self) {
        let mut state = self.state.lock();
        loop {
            while state.requested <= state.completed && !state.stop {
                self.to_thread.wait(&mut state);
            }
            if state.stop {
                return;
            }
            state.in_progress = true;
            let kind = if state.expedite_until > state.completed {
                Kind::Expedited
            } else {
                Kind::Normal
            };
            drop(state);
            // Expedited, its beginning rings the busy vCPUs (the IPI);
            // normal, their ticks report and forcing quiescent states
            // finds the idle ones.
            let grace_period = self.detect.begin(&*self.doorbells, kind);
            // Given up only when the machine stops; it then counts as
            // ended, so that no `synchronize` caller waits for good.
            let _ = grace_period.wait(&*self.doorbells, None, &|| {
                self.stopping.load(Ordering::SeqCst)
            });
            grace_period.end();
            state = self.state.lock();
            state.completed += 1;
            state.in_progress = false;
            self.ended.notify_all();
            // vCPUs holding callbacks may now run them. Doorbells are rung
            // without the state lock: an idling vCPU holds its doorbell
            // while it reports to us.
            drop(state);
            for cpu in 0..self.lists.cpus() {
                if self.lists.pending(cpu) > 0 {
                    self.doorbells.ring(cpu);
                }
            }
            state = self.state.lock();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    /// Waits for a state another thread reaches, whatever the scheduling.
    fn wait_until(mut reached: impl FnMut() -> bool) {
        while !reached() {
            std::thread::yield_now();
        }
    }

    /// What a busy vCPU does for a normal grace period: its tick notices
    /// it, a turn of its loop passes a quiescent state, the next tick
    /// reports it.
    fn report(rcu: &Rcu, cpu: usize) {
        rcu.tick(cpu);
        rcu.quiescent(cpu);
        rcu.tick(cpu);
    }

    #[test]
    fn grace_period_waits_for_a_busy_cpu_and_ignores_untracked_ones() {
        let doorbells = Arc::new(Doorbells::new(2));
        let rcu = Rcu::start(2, Arc::clone(&doorbells), Hz::DEFAULT).unwrap();
        rcu.set_tracked(0, true);
        rcu.set_tracked(1, false);
        // CPU 0 is "busy" (not idle, no quiescent state): synchronize blocks.
        let waiter = {
            let rcu = Arc::clone(&rcu);
            std::thread::spawn(move || rcu.synchronize())
        };
        // Until the grace-period thread has taken its snapshot and waits
        // for CPU 0; a grace period that ends without doing so is the bug.
        wait_until(|| {
            assert!(
                !waiter.is_finished(),
                "the grace period ended without waiting for busy CPU 0"
            );
            rcu.detect.holding_up().contains(cpu_id(0))
        });
        assert_eq!(rcu.completed(), 0);
        // A turn of its loop alone is no report of a normal grace period.
        rcu.quiescent(0);
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(
            rcu.completed(),
            0,
            "ended without a report from CPU 0's tick"
        );
        report(&rcu, 0);
        waiter.join().unwrap();
        assert!(rcu.completed() >= 1);
        rcu.stop();
    }

    /// A grace period run by `waiter` on an `rcu` whose CPU 0 is tracked
    /// and counts as idle must end without a report from CPU 0, when it
    /// forces quiescent states: fails (after releasing the waiter) if it
    /// has not ended a second later.
    fn ends_without_cpu_0(rcu: &Rcu, waiter: JoinHandle<()>, why: &str) {
        let start = std::time::Instant::now();
        while !waiter.is_finished() && start.elapsed() < std::time::Duration::from_secs(1) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let ended = waiter.is_finished();
        if !ended {
            report(rcu, 0);
        }
        waiter.join().unwrap();
        assert!(ended, "the grace period waited for CPU 0, {why}");
        assert_eq!(rcu.completed(), 1);
        assert!(rcu.detect.fqs_scans() >= 1, "found idle by forcing");
    }

    #[test]
    fn an_idle_cpu_is_quiescent_without_passing_a_quiescent_state() {
        let doorbells = Arc::new(Doorbells::new(1));
        let rcu = Rcu::start(1, Arc::clone(&doorbells), Hz::DEFAULT).unwrap();
        rcu.set_tracked(0, true);
        rcu.idle_entered(0);
        let waiter = {
            let rcu = Arc::clone(&rcu);
            std::thread::spawn(move || rcu.synchronize())
        };
        ends_without_cpu_0(&rcu, waiter, "which is idle");
        rcu.stop();
    }

    #[test]
    fn a_vcpu_blocked_in_synchronize_counts_as_idle_meanwhile() {
        let doorbells = Arc::new(Doorbells::new(2));
        let rcu = Rcu::start(2, Arc::clone(&doorbells), Hz::DEFAULT).unwrap();
        rcu.set_tracked(0, true);
        // vCPU 0 itself waits for a grace period: it runs nothing while it
        // waits, so the grace period must not wait for it.
        let waiter = {
            let rcu = Arc::clone(&rcu);
            std::thread::spawn(move || {
                crate::signal::set_current_cpu(Some(0));
                rcu.synchronize();
                // Busy again once it returns.
                assert!(!rcu.detect.is_idle(cpu_id(0)));
            })
        };
        ends_without_cpu_0(&rcu, waiter, "which was blocked in synchronize");
        rcu.stop();
    }

    #[test]
    fn callbacks_run_after_their_grace_period_and_survive_migration() {
        let doorbells = Arc::new(Doorbells::new(2));
        let rcu = Rcu::start(2, Arc::clone(&doorbells), Hz::DEFAULT).unwrap();
        rcu.set_tracked(0, true);
        assert!(rcu.create_data(0) && rcu.create_data(1));
        assert!(!rcu.create_data(0));
        let ran = Arc::new(AtomicU32::new(0));
        let counter = Arc::clone(&ran);
        let callback = Callback::Internal(Box::new(move || {
            counter.fetch_add(1, Ordering::SeqCst);
        }));
        assert!(rcu.call(1, callback).is_ok());
        assert!(!rcu.has_ready(1), "no grace period has ended yet");
        assert_eq!(rcu.migrate(1, 0), 1);
        assert!(rcu.free_data(1));
        assert!(!rcu.has_data(1));
        assert!(rcu.call(1, Callback::Internal(Box::new(|| {}))).is_err());
        // End the grace period: once the grace-period thread waits for
        // CPU 0, one quiescent state of CPU 0 is enough. A callback ready
        // before then had a grace period that never waited for CPU 0.
        wait_until(|| rcu.detect.holding_up().contains(cpu_id(0)) || rcu.has_ready(0));
        assert!(
            !rcu.has_ready(0),
            "ready before CPU 0 passed a quiescent state"
        );
        report(&rcu, 0);
        wait_until(|| rcu.has_ready(0));
        for callback in rcu.take_ready(0) {
            if let Callback::Internal(run) = callback {
                run();
            }
        }
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        rcu.stop();
    }
}
