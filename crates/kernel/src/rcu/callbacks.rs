//! What a kernel does with RCU callbacks, written once for both
//! platforms: queueing one (Linux's `call_rcu`), the `rcu:data` hotplug
//! step's lists (created, handed to a live CPU as their CPU dies — Linux's
//! `rcutree_migrate_callbacks` — and freed), and running the ready ones on
//! each CPU's `rcuc` thread. The code is
//! [`StepKernel`](crate::steps::StepKernel)'s provided RCU methods and
//! [`smpboot::run_rcu_callbacks`](crate::smpboot::run_rcu_callbacks);
//! this module holds what they share: the [`Callback`] payload and the
//! [`GracePeriodDriver`] trait, through which each platform's grace
//! periods serve the callbacks.
//!
//! # The protocol
//!
//! - **Queueing** (`StepKernel::call_rcu`, on any CPU or on a thread that
//!   is no CPU): first asks the driver which grace period the callback
//!   needs ([`GracePeriodDriver::request`]: the first that begins after
//!   now, as Linux's `rcu_seq_snap`, and the driver makes sure it will be
//!   driven, as `call_rcu` → `rcu_start_this_gp`); then offers the
//!   callback, stamped with it, to the preferred CPU's list and to each
//!   online CPU's after it ([`crate::placement::place`]), each offer under
//!   that list's lock with interrupts off (a bare-metal handler may take
//!   it). An offline CPU's list takes nothing, the preferred one's
//!   included: bolt keeps the list of a CPU that went down, and nothing
//!   would run a callback there until it came back. The CPU that took it is woken if it is not the caller, so that
//!   an idle CPU whose tick is stopped keeps it from now on
//!   (`rcu_needs_cpu`). [`defer_free`](crate::steps::StepKernel::defer_free)
//!   queues the kernel's own clean-up on the calling CPU's list, as
//!   Linux's `call_rcu` uses `this_cpu_ptr(&rcu_data)`.
//! - **No list takes it**: the callback waits in the limbo with the tasks,
//!   work items and timers no CPU took ([`crate::placement::Limbo`]), runs
//!   nowhere meanwhile, and is queued again when a CPU becomes active
//!   (`StepKernel::cpus_activated`), asking for a grace period then: it
//!   still runs once, after a full grace period that began after it was
//!   queued. Never waiting here is Linux's contract for `call_rcu`, which
//!   may be called with interrupts off: a caller inside a stop-machine or
//!   a dying CPU's teardown could not wait for a grace period that the
//!   CPUs spinning in the rendezvous hold up, and running the callback
//!   there runs it on the wrong CPU, in the wrong context.
//! - **Migrating** (`StepKernel::rcu_migrate`, the `rcu:data` teardown on
//!   the controller, after the CPU died): every callback moves to the heir
//!   with the grace period it was stamped with, so none runs earlier or
//!   later than it would have; the heir is woken to keep its tick. The
//!   dead CPU's empty list is then freed (classic) or kept (bolt).
//! - **Running** (the CPU's `rcuc` thread, and bare metal's controller for
//!   CPU 0, which has no loop to switch to it): takes the callbacks whose
//!   grace period is at or before [`GracePeriodDriver::completed`], under
//!   the list's lock with interrupts off, and runs them outside it, oldest
//!   first.
//!
//! Who writes what: the lists are the shared
//! [`CallbackLists`], one lock per CPU, in the kernel's
//! [`Subsystems`](crate::subsystems::Subsystems); queueing and migrating
//! write them, the `rcuc` thread takes from its own CPU's. The pending
//! counts are read without the lock (the tick's `rcu_needs_cpu`; the
//! machine's grace-period thread, which rings the CPUs holding callbacks
//! when a grace period ends). Only the driver writes the grace periods.
//!
//! What stays each platform's is the [`GracePeriodDriver`]: the machine's
//! `rcu_gp` thread, which many callers ask for grace periods, and bare
//! metal's hotplug controller, which drives each one itself with a
//! deadline. How a [`Callback::Job`] runs is the platform's too
//! ([`KthreadKernel::run_job`](crate::smpboot::KthreadKernel::run_job)).

use alloc::boxed::Box;

use crate::cblist::CallbackLists;

/// Something to run after a grace period, for jobs `J`.
pub enum Callback<J> {
    /// A job the kernel's ledger counts (a task's `call_rcu` on the
    /// machine), run as its work items and timers are.
    Job {
        /// Its number in the ledger.
        id: u64,
        /// What it runs.
        job: J,
    },
    /// The kernel's own clean-up: freeing what was unpublished
    /// ([`defer_free`](crate::steps::StepKernel::defer_free)), the hotplug
    /// lock's re-queue.
    Free(Box<dyn FnOnce() + Send>),
}

/// Every CPU's list of callbacks for jobs `J`.
pub type Lists<J> = CallbackLists<Callback<J>>;

/// How a platform's grace periods serve its RCU callbacks: one trait for
/// the machine's `rcu_gp` thread and bare metal's controller.
pub trait GracePeriodDriver {
    /// The grace period a callback queued now waits for: the first that
    /// begins after now (Linux's `rcu_seq_snap`), compared with
    /// [`completed`](Self::completed). The driver makes sure it will be
    /// driven: the machine wakes its grace-period thread; bare metal's
    /// controller drives one before it looks at callbacks.
    fn request(&self) -> u64;

    /// Grace periods ended so far; never decreases.
    fn completed(&self) -> u64;

    /// Waits for a normal grace period (Linux's `synchronize_rcu`).
    fn synchronize(&self);

    /// Whether grace periods wait for `cpu` (the `rcu:starting` step).
    fn set_online(&self, cpu: usize, online: bool);

    /// Whether grace periods wait for `cpu`.
    fn is_online(&self, cpu: usize) -> bool;

    /// The CPU the caller runs on; `None` on a thread that is no CPU.
    fn this_cpu(&self) -> Option<usize>;
}

#[cfg(test)]
mod tests;
