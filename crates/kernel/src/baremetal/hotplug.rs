//! The hotplug engine's state on a bare-metal kernel: the engine
//! platform's [`Control`] (the hotplug lock, each CPU's posted work,
//! stop-machine's rendezvous, the step recorder), each CPU's `cpuhp/N`
//! thread that runs the posted work ([`HotplugThreads`]), the grace
//! periods the controller drives ([`CallerDriven`]), and the hotplug
//! lock's settling between operations and its read side for tasks.

use hotkern_cpuhp::{CpuId, CpuSet};

use super::{Arch, Kernel};
use crate::hotplug::{settle, Control, HotplugThreads, Unsettled};
use crate::rcu::caller_driven::CallerDriven;

impl<A: Arch> Kernel<A> {
    /// Makes the engine's platform state for CPUs `0..cpus`, once the heap
    /// exists; before it, no lock is taken and no work is posted.
    pub fn init_control(cpus: usize) {
        A::state().control.call_once(|| Control::new(cpus));
    }

    /// The engine's platform state, once made.
    pub fn control() -> Option<&'static Control> {
        A::state().control.get()
    }

    /// The grace periods: each CPU reports to them, the controller
    /// drives them (with a deadline), `call_rcu` waits for them.
    pub fn rcu() -> &'static CallerDriven<Kernel<A>> {
        &A::state().rcu
    }

    /// Makes the hotplug thread of every CPU of `possible` (Linux
    /// registers them for every possible CPU).
    pub fn install_hotplug_threads(possible: CpuSet) {
        let threads = A::state()
            .hotplug_threads
            .call_once(|| HotplugThreads::new(A::MAX_CPUS));
        threads.install(possible, |cpu| {
            A::spawn_thread("cpuhp", cpu, Self::hotplug_thread)
        });
    }

    /// A hotplug thread's turn: the work posted to its CPU.
    fn hotplug_thread(cpu: CpuId) {
        if let Some(control) = Self::control() {
            control.run_pending(&Self::HANDLE, cpu);
        }
    }

    /// Runs `cpu`'s hotplug thread if work was posted to it. Called by
    /// the CPU's loop, interrupts off.
    pub(super) fn run_hotplug_thread(cpu: CpuId) {
        let state = A::state();
        if let (Some(threads), Some(control)) = (state.hotplug_threads.get(), Self::control()) {
            threads.run_if_posted(control, cpu);
        }
    }

    /// Drives grace periods until the hotplug lock's readers are back on
    /// their fast path ([`settle`]), running the caller's ready RCU
    /// callbacks after each: the lock's own grace period, which Linux's
    /// grace-period kthread would drive in the background, ends before
    /// the next operation starts.
    pub fn settle_hotplug_lock() -> Result<(), Unsettled> {
        let Some(control) = Self::control() else {
            return Ok(());
        };
        let cpu = A::current_cpu();
        settle(control.hotplug_lock(), Self::rcu(), || {
            Self::run_rcu_callbacks(cpu);
        })
    }

    /// Takes the hotplug lock's read side if no writer holds it (Linux's
    /// `cpus_read_trylock`). Called inside a task slice, between two
    /// quiescent states of the caller's CPU: what lets its fast path go
    /// without a barrier.
    pub fn cpus_read_trylock() -> bool {
        Self::control().is_none_or(|control| control.hotplug_lock().try_read(&Self::HANDLE))
    }

    /// Gives back a read hold, on any CPU.
    pub fn cpus_read_unlock() {
        if let Some(control) = Self::control() {
            control.hotplug_lock().read_unlock(&Self::HANDLE);
        }
    }
}
