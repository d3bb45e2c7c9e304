//! Each CPU's hotplug thread (`cpuhp/N`, Linux's `cpuhp_thread_fun`), over
//! the platform's [`Thread`]: the engine's platform posts a step's work to
//! the CPU's slot in [`Control`] and sleeps until it is done; the CPU's
//! loop switches to the thread only when work waits for it, and the
//! thread's body runs it ([`Control::run_pending`]). Also the posted
//! cross-CPU calls of a stop-machine's members, from gather to release
//! ([`PostedCalls`]).

use alloc::sync::Arc;

use hotkern_cpuhp::{CpuId, CpuSet};

use super::Control;
use crate::kthread::{PerCpuThread, Thread};
use crate::sync::Mutex;

/// Each CPU's hotplug thread.
///
/// ```
/// use hotkern_cpuhp::{CpuId, CpuSet};
/// use hotkern_kernel::hotplug::{Control, HotplugThreads};
/// use hotkern_kernel::kthread::Thread;
///
/// struct Body;
/// impl Thread for Body {
///     fn run(&self) -> bool { true }
///     fn park(&self) {}
///     fn unpark(&self) {}
///     fn is_parked(&self) -> bool { false }
/// }
///
/// let threads = HotplugThreads::new(2);
/// threads.install(CpuSet::from_iter([CpuId(0), CpuId(1)]), |_cpu| Body);
/// assert!(threads.get(CpuId(1)).is_some());
/// // Nothing posted: the loop does not switch to it.
/// assert!(!threads.run_if_posted(&Control::new(2), CpuId(1)));
/// ```
pub struct HotplugThreads<T>(PerCpuThread<T>);

impl<T: Thread> HotplugThreads<T> {
    /// No thread yet, room for CPUs `0..cpus`.
    pub fn new(cpus: usize) -> Self {
        HotplugThreads(PerCpuThread::new(cpus))
    }

    /// Makes the thread of every CPU of `possible` (Linux registers them
    /// for every possible CPU), each unparked for good: it runs whenever
    /// work is posted to it. A CPU that has one keeps it.
    pub fn install(&self, possible: CpuSet, mut make: impl FnMut(CpuId) -> T) {
        for cpu in possible.iter() {
            if !self.0.exists(cpu.index()) {
                self.0.install(cpu.index(), make(cpu));
            }
            self.0.get(cpu.index()).inspect(|thread| thread.unpark());
        }
    }

    /// `cpu`'s thread, if it has one.
    pub fn get(&self, cpu: CpuId) -> Option<Arc<T>> {
        self.0.get(cpu.index())
    }

    /// Switches to `cpu`'s thread if work was posted to it in `control`;
    /// returns whether it did. Called by the CPU's loop at every turn, so
    /// it looks at the posted work (atomics) before it takes the thread's
    /// slot lock.
    pub fn run_if_posted(&self, control: &Control, cpu: CpuId) -> bool {
        if !control.has_pending(cpu) {
            return false;
        }
        self.get(cpu).is_some_and(|thread| thread.run())
    }
}

/// The call posted to each stop-machine member (`P`, the platform's
/// handle of a cross-CPU call) between gather and release, CPUs
/// `0..CPUS`.
///
/// ```
/// use hotkern_cpuhp::CpuId;
/// use hotkern_kernel::hotplug::PostedCalls;
///
/// static CALLS: PostedCalls<u32, 4> = PostedCalls::new();
/// assert_eq!(CALLS.record(CpuId(1), 7), Ok(()));
/// assert_eq!(CALLS.record(CpuId(9), 8), Err(8), "no such CPU: handed back");
/// assert_eq!(CALLS.take(CpuId(1)), Some(7));
/// assert_eq!(CALLS.take(CpuId(1)), None, "released once");
/// ```
pub struct PostedCalls<P, const CPUS: usize>(Mutex<[Option<P>; CPUS]>);

impl<P, const CPUS: usize> PostedCalls<P, CPUS> {
    /// No call posted.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        PostedCalls(Mutex::new([const { None }; CPUS]))
    }

    /// No call posted.
    #[cfg(loom)]
    pub fn new() -> Self {
        PostedCalls(Mutex::new([const { None }; CPUS]))
    }

    /// Keeps `call`, posted to `cpu`, until [`take`](Self::take).
    ///
    /// # Errors
    ///
    /// `call` back if `cpu` is past the table; nothing is kept.
    pub fn record(&self, cpu: CpuId, call: P) -> Result<(), P> {
        match self.0.lock().get_mut(cpu.index()) {
            Some(slot) => {
                *slot = Some(call);
                Ok(())
            }
            None => Err(call),
        }
    }

    /// The call posted to `cpu`, once.
    pub fn take(&self, cpu: CpuId) -> Option<P> {
        self.0.lock().get_mut(cpu.index()).and_then(Option::take)
    }
}

impl<P, const CPUS: usize> Default for PostedCalls<P, CPUS> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use alloc::sync::Arc as StdArc;
    use core::sync::atomic::AtomicU32;

    use super::*;
    use crate::kthread::tests::probe;
    use crate::platform::Cpus;

    struct Quiet;

    impl Cpus for Quiet {
        fn current(&self) -> Option<CpuId> {
            None
        }
        fn wake(&self, _cpu: CpuId) {}
        fn wake_threads(&self) {}
        fn wait_until(&self, condition: &dyn Fn() -> bool) {
            assert!(condition());
        }
    }

    #[test]
    fn a_hotplug_thread_runs_only_when_work_is_posted_to_its_cpu() {
        let dropped = StdArc::new(AtomicU32::new(0));
        let threads = HotplugThreads::new(2);
        threads.install(CpuSet::from_iter([CpuId(0), CpuId(1)]), |_| probe(&dropped));
        let control = Control::new(2);
        assert!(!threads.run_if_posted(&control, CpuId(0)));
        let work: &(dyn Fn(CpuId) + Sync) = &|_| {};
        let posted = control
            .mailboxes
            .post(&Quiet, CpuSet::from_iter([CpuId(1)]), &work);
        assert!(
            !threads.run_if_posted(&control, CpuId(0)),
            "posted to CPU 1"
        );
        assert!(threads.run_if_posted(&control, CpuId(1)));
        assert_eq!(threads.get(CpuId(0)).map(|thread| thread.turns()), Some(0));
        assert_eq!(threads.get(CpuId(1)).map(|thread| thread.turns()), Some(1));
        assert!(control.run_pending(&Quiet, CpuId(1)));
        assert!(control.mailboxes.wait(&Quiet, &posted, u64::MAX).is_ok());
        assert!(
            !threads.run_if_posted(&control, CpuId(1)),
            "done: no new work"
        );
        assert_eq!(threads.get(CpuId(1)).map(|thread| thread.turns()), Some(1));
    }

    #[test]
    fn installing_again_keeps_each_cpus_thread() {
        let dropped = StdArc::new(AtomicU32::new(0));
        let threads = HotplugThreads::new(2);
        threads.install(CpuSet::from_iter([CpuId(0)]), |_| probe(&dropped));
        let first = threads.get(CpuId(0));
        threads.install(CpuSet::from_iter([CpuId(0), CpuId(1)]), |_| probe(&dropped));
        assert!(first.is_some_and(|first| threads
            .get(CpuId(0))
            .is_some_and(|now| Arc::ptr_eq(&first, &now))));
        assert!(threads.get(CpuId(1)).is_some());
        assert!(threads.get(CpuId(5)).is_none());
    }
}
