//! RCU-like grace periods over the vCPUs' quiescent states.
//!
//! A vCPU is in a read-side critical section whenever it runs something (a
//! task slice, a kernel thread's turn, a callback); it passes a quiescent
//! state each time round its scheduler loop, and an idle or untracked
//! (offline) vCPU is quiescent throughout. When a grace period is over is
//! the shared kernel's [`hotkern_kernel::rcu`], as on bare metal, and so
//! is what happens to `call_rcu` callbacks
//! ([`hotkern_kernel::rcu::callbacks`]); what stays here is the machine's
//! own: a grace-period thread, as Linux's `rcu_gp` kthread, that drives
//! one grace period at a time for the requests of many `synchronize` and
//! `call_rcu` callers (the callbacks' [`GracePeriodDriver`]), rings the
//! vCPUs holding callbacks as each one ends, and `rcu_barrier`.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::thread::JoinHandle;

use hotkern_kernel::cpuset::cpu_id;
use hotkern_kernel::platform::Cpus;
use hotkern_kernel::rcu::callbacks::{Callback, GracePeriodDriver, Lists};
use hotkern_kernel::rcu::{GracePeriods, Kind};
use hotkern_kernel::sync::{AtomicBool, Condvar, Mutex};
use hotkern_kernel::tick::Hz;

use crate::signal::{current_cpu, Doorbells};
use crate::task::Job;

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
    /// Each vCPU's callbacks waiting for their grace period (the kernel's
    /// `Subsystems` holds them): the vCPUs holding some are rung as a
    /// grace period ends.
    lists: Arc<Lists<Job>>,
    doorbells: Arc<Doorbells>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Rcu {
    pub(crate) fn start(
        lists: Arc<Lists<Job>>,
        doorbells: Arc<Doorbells>,
        hz: Hz,
    ) -> std::io::Result<Arc<Rcu>> {
        let rcu = Rcu::unstarted(lists, doorbells);
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
    pub(crate) fn unstarted(lists: Arc<Lists<Job>>, doorbells: Arc<Doorbells>) -> Arc<Rcu> {
        Arc::new(Rcu {
            state: Mutex::new(Requests::default()),
            to_thread: Condvar::new(),
            ended: Condvar::new(),
            detect: GracePeriods::new(),
            stopping: AtomicBool::new(false),
            lists,
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

    /// Asks for the first grace period that begins after now and wakes
    /// the grace-period thread for it; returns its number.
    fn request_grace_period(&self) -> u64 {
        let mut state = self.state.lock();
        let target = Self::request(&mut state);
        self.to_thread.notify_all();
        target
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
            let entrained = Callback::Free(Box::new(move || {
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
            let gp = self.request_grace_period();
            if self.lists.call(cpu, gp, entrained).is_err() {
                *left.0.lock() -= 1;
            }
        }
        let (count, all_ran) = &*left;
        let mut count = count.lock();
        while *count > 0 {
            all_ran.wait(&mut count);
        }
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

/// The machine's grace periods as its RCU callbacks see them: a callback
/// asks the grace-period thread for the next one (Linux's `call_rcu` →
/// `rcu_start_this_gp`), which rings the vCPUs holding callbacks once it
/// ends.
impl GracePeriodDriver for Rcu {
    fn request(&self) -> u64 {
        self.request_grace_period()
    }

    fn completed(&self) -> u64 {
        Rcu::completed(self)
    }

    fn synchronize(&self) {
        Rcu::synchronize(self);
    }

    fn set_online(&self, cpu: usize, online: bool) {
        self.set_tracked(cpu, online);
    }

    fn is_online(&self, cpu: usize) -> bool {
        self.is_tracked(cpu)
    }

    fn this_cpu(&self) -> Option<usize> {
        current_cpu()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    /// Callback lists for `cpus` vCPUs, none created.
    fn lists(cpus: usize) -> Arc<Lists<Job>> {
        Arc::new(Lists::new(cpus))
    }

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
        let rcu = Rcu::start(lists(2), Arc::clone(&doorbells), Hz::DEFAULT).unwrap();
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
        let rcu = Rcu::start(lists(1), Arc::clone(&doorbells), Hz::DEFAULT).unwrap();
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
        let rcu = Rcu::start(lists(2), Arc::clone(&doorbells), Hz::DEFAULT).unwrap();
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
    fn a_callbacks_request_drives_a_grace_period_that_waits_for_busy_cpus() {
        let doorbells = Arc::new(Doorbells::new(2));
        let lists = lists(2);
        let rcu = Rcu::start(Arc::clone(&lists), Arc::clone(&doorbells), Hz::DEFAULT).unwrap();
        rcu.set_tracked(0, true);
        assert!(lists.create(1));
        let ran = Arc::new(AtomicU32::new(0));
        let counter = Arc::clone(&ran);
        let callback = Callback::Free(Box::new(move || {
            counter.fetch_add(1, Ordering::SeqCst);
        }));
        // Nobody calls `synchronize`: the request alone wakes the thread.
        let gp = GracePeriodDriver::request(&*rcu);
        assert!(lists.call(1, gp, callback).is_ok());
        // Once the grace-period thread waits for CPU 0, one quiescent state
        // of CPU 0 ends it. A callback ready before then had a grace period
        // that never waited for CPU 0.
        let ready = || lists.has_ready(1, rcu.completed());
        wait_until(|| rcu.detect.holding_up().contains(cpu_id(0)) || ready());
        assert!(!ready(), "ready before CPU 0 passed a quiescent state");
        report(&rcu, 0);
        wait_until(ready);
        for callback in lists.take_ready(1, rcu.completed()) {
            if let Callback::Free(run) = callback {
                run();
            }
        }
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        rcu.stop();
    }
}
