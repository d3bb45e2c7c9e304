//! What the shared kernel asks of the platform it runs on, beyond locks
//! and atomics ([`crate::sync`]): the first piece is [`Cpus`], the
//! services of a CPU that waits for, and wakes, other CPUs.
//!
//! Not to be confused with [`hotkern_cpuhp::Platform`], which is what the
//! hotplug *engine* asks of a kernel (run on a CPU, stop-machine, power a
//! CPU on or off). [`Cpus`] sits underneath: the kernel's own mechanisms
//! ([`crate::stop_machine`], [`crate::rcu`]; the idle loops next) are written
//! once over it, and each platform implements it in a few lines: the
//! bare-metal kernel with `hlt` and wake-up IPIs, the user-mode machine
//! with a doorbell (mutex and condvar) per vCPU thread.

use hotkern_cpuhp::CpuId;

use crate::activity::Activity;

/// A platform's CPUs as the shared kernel's mechanisms see them: who am I,
/// sleep until something holds, wake someone who sleeps.
///
/// The one rule binding [`Cpus::wait_until`] to the wake-ups: a wake sent
/// *after* the condition became true is never lost. A waker therefore
/// makes the condition true first (a store the condition reads), then
/// wakes; a waiter checks the condition and goes to sleep as one step
/// with respect to wake-ups (`sti; hlt` with the check done under
/// `cli`; a condvar wait with the check done under its mutex).
///
/// A platform whose mechanism callers can be threads that are no CPU (the
/// user-mode machine's hotplug engine or grace-period thread) wakes those
/// with [`Cpus::wake_threads`]; on bare metal every caller is a CPU.
///
/// ```
/// use hotkern_cpuhp::CpuId;
/// use hotkern_kernel::platform::Cpus;
/// use std::cell::Cell;
/// use std::sync::{Condvar, Mutex};
///
/// thread_local!(static ME: Cell<Option<CpuId>> = const { Cell::new(None) });
///
/// /// CPUs that are OS threads, with one mutex and condvar for everyone
/// /// (a real platform has one per CPU so a wake-up disturbs only its CPU).
/// #[derive(Default)]
/// struct Threads {
///     lock: Mutex<()>,
///     wake: Condvar,
/// }
///
/// impl Cpus for Threads {
///     fn current(&self) -> Option<CpuId> {
///         ME.with(Cell::get)
///     }
///     fn wake(&self, _cpu: CpuId) {
///         // Taking the lock orders this after a waiter's check: it is
///         // either before the check (which sees the condition) or after
///         // the waiter went to sleep (which this wakes).
///         let _held = self.lock.lock().unwrap();
///         self.wake.notify_all();
///     }
///     fn wake_threads(&self) {
///         self.wake(CpuId(0));
///     }
///     fn wait_until(&self, condition: &dyn Fn() -> bool) {
///         let mut held = self.lock.lock().unwrap();
///         while !condition() {
///             held = self.wake.wait(held).unwrap();
///         }
///     }
/// }
///
/// let cpus = Threads::default();
/// cpus.wait_until(&|| true);
/// assert_eq!(cpus.current(), None);
/// ```
pub trait Cpus {
    /// The CPU the caller runs on, or `None` for a thread that is no CPU
    /// (the machine's engine thread; never on bare metal). Called from
    /// any context, interrupt handlers included: it may not block or
    /// take a lock.
    fn current(&self) -> Option<CpuId>;

    /// Wakes `cpu` if it sleeps in [`Cpus::wait_until`], so it checks its
    /// condition again (bare metal: the wake-up IPI; user mode: the vCPU's
    /// doorbell). A wake that finds `cpu` awake may make its next sleep
    /// return at once, or do nothing. Called with the condition already
    /// true, from any CPU or thread, interrupts off included; it may not
    /// wait for `cpu`.
    fn wake(&self, cpu: CpuId);

    /// Wakes every caller of [`Cpus::wait_until`] that is no CPU
    /// ([`Cpus::current`] is `None`); nothing where there are none. Same
    /// rules as [`Cpus::wake`].
    fn wake_threads(&self);

    /// Returns once `condition` holds, sleeping between checks rather than
    /// spinning (a halted CPU, a parked thread): virtual CPUs that spin
    /// keep the ones they wait for off the host's cores. Wake-ups may be
    /// spurious; a wake sent after `condition` became true must not be
    /// lost. `condition` only reads atomics: it may be called with the
    /// platform's sleep lock held or interrupts off. Called on a CPU in
    /// any context, a stop-machine's call handler included (bare metal:
    /// the implementation keeps interrupts off except inside the halt),
    /// or on a thread that is no CPU; the caller may hold no lock its
    /// waker needs.
    fn wait_until(&self, condition: &dyn Fn() -> bool);

    /// The platform's monotonic clock in nanoseconds, for the deadlines of
    /// [`Cpus::wait_until_deadline`] (bare metal: the calibrated TSC). The
    /// default, for a platform that never waits with a deadline, is a
    /// clock that stands at zero.
    fn now_ns(&self) -> u64 {
        0
    }

    /// [`Cpus::wait_until`], but returns at the latest soon after
    /// [`Cpus::now_ns`] reaches `deadline_ns` (bare metal: the tick wakes
    /// the halt to look at the clock); returns whether `condition` held.
    /// Same rules as [`Cpus::wait_until`]. The default has no clock and
    /// waits without a deadline: a platform whose waits may time out (a
    /// stalled CPU reported rather than waited for forever) overrides it.
    fn wait_until_deadline(&self, condition: &dyn Fn() -> bool, deadline_ns: u64) -> bool {
        let _ = deadline_ns;
        self.wait_until(condition);
        true
    }

    /// What `cpu` is running now (its idle loop, a kernel thread, a task
    /// slice, a cross-CPU call), for a stalled grace period's report
    /// ([`crate::rcu::Stall`]); read from another CPU, so a platform
    /// records it cheaply as the CPU switches ([`crate::activity::Activities`]).
    /// The default records nothing.
    fn activity(&self, cpu: CpuId) -> Activity {
        let _ = cpu;
        Activity::Unknown
    }
}
