//! What each per-CPU kernel thread does, written once (Linux's smpboot:
//! a `struct smp_hotplug_thread` describes a per-CPU thread once, by its
//! `thread_should_run` and `thread_fn`, and `smpboot_thread_fn` runs it on
//! every CPU).
//!
//! Each role ([`Role`]) has a predicate, [`should_run`], which the CPU's
//! loop asks before it switches to the thread ([`run_ready`]), and a body,
//! [`run`], one bounded turn of the thread's work after which it switches
//! back:
//!
//! * `kworker/N` ([`Role::Worker`]) runs the CPU's task slices where the
//!   platform runs tasks inside its worker
//!   ([`KthreadKernel::TASKS_IN_WORKER`]), then at most
//!   [`WORK_PER_TURN`] work items, so the CPU comes back to its loop.
//! * `ksoftirqd/N` ([`Role::Softirq`]) runs the CPU's timers due at the
//!   last tick.
//! * `rcuc/N` ([`Role::RcuCallbacks`]) runs the CPU's RCU callbacks whose
//!   grace period ended ([`run_rcu_callbacks`]).
//!
//! Timers are due at the last tick, not at the clock's reading now: a
//! timer fires at the first tick at or after its deadline
//! ([`Hz::expiry`]), as Linux's timer wheel expires timers from the tick
//! (`run_timer_softirq` collects those whose `expires` is at or before
//! `jiffies`). So both platforms fire a timer at the same tick, whenever
//! their loop happens to look, and the CPU loop's idle deadline (the
//! timer's expiry) is exactly when the timer becomes due.
//!
//! Shared structures are taken from with interrupts off
//! ([`StepKernel::without_interrupts`]: on bare metal a handler may take
//! the same locks); what they hold runs with interrupts as the thread
//! found them. What differs between the platforms is the
//! [`KthreadKernel`] trait: how a job runs (the machine catches its panic
//! and completes it in its ledger; bare metal calls it), where its clock
//! and its tick rate come from, and where task slices run. The RCU
//! callback lists and the grace periods they wait for are the step
//! table's ([`crate::rcu::callbacks`]).

use alloc::vec::Vec;

use hotkern_cpuhp::CpuId;

use crate::kthread::Role;
use crate::ledger::Item;
use crate::rcu::callbacks::{Callback, GracePeriodDriver};
use crate::steps::StepKernel;
use crate::tick::Hz;

/// Work items a worker runs per turn, so that its CPU comes back to its
/// loop (for calls, the tick and its other threads) between batches.
pub const WORK_PER_TURN: usize = 16;

/// A kernel whose per-CPU threads run the shared bodies: what the bodies
/// need beyond the step table's [`StepKernel`] (timer bases, workqueue
/// pools, kernel threads, run queues, interrupts off).
pub trait KthreadKernel: StepKernel {
    /// Whether the worker runs the CPU's task slices, before its work
    /// items: bare metal runs tasks inside `kworker`; the machine's CPU
    /// loop runs them itself (`CpuLoop::run_task`).
    const TASKS_IN_WORKER: bool = false;

    /// The platform's clock in nanoseconds, as timer deadlines count it.
    fn now_ns(&self) -> u64;

    /// The tick rate: timers are due at the last tick.
    fn hz(&self) -> Hz;

    /// Runs `job` on `cpu`: the work item, timer or RCU callback (`item`)
    /// numbered `id`.
    fn run_job(&self, cpu: CpuId, item: Item, id: u64, job: Self::Job);

    /// Runs a bounded number of task slices from `cpu`'s run queue; called
    /// by the worker only where [`KthreadKernel::TASKS_IN_WORKER`].
    fn run_task_slices(&self, cpu: CpuId) {
        let _ = cpu;
    }
}

/// Whether `cpu`'s thread `role` has work at clock reading `now_ns`
/// (Linux's `thread_should_run`): timers due at the last tick, tasks
/// (where the worker runs them) or work items, ready RCU callbacks.
pub fn should_run<K: KthreadKernel>(kernel: &K, cpu: CpuId, role: Role, now_ns: u64) -> bool {
    let index = cpu.index();
    match role {
        Role::Softirq => kernel
            .timers()
            .has_due(index, kernel.hz().last_tick(now_ns)),
        Role::Worker => {
            (K::TASKS_IN_WORKER && kernel.queue_state(cpu).0 > 0)
                || kernel.workqueue().has_work(index)
        }
        Role::RcuCallbacks => kernel
            .rcu_callbacks()
            .has_ready(index, kernel.rcu().completed()),
    }
}

/// One turn of `cpu`'s thread `role` (Linux's `thread_fn`), run by the
/// thread on its CPU.
pub fn run<K: KthreadKernel>(kernel: &K, cpu: CpuId, role: Role) {
    match role {
        Role::Softirq => run_timers(kernel, cpu),
        Role::Worker => run_work(kernel, cpu),
        Role::RcuCallbacks => {
            run_rcu_callbacks(kernel, cpu);
        }
    }
}

/// Switches to each of `cpu`'s unparked threads that [`should_run`] at
/// `now_ns`, for one turn each; returns whether any ran. Called by `cpu`'s
/// loop.
pub fn run_ready<K: KthreadKernel>(kernel: &K, cpu: CpuId, now_ns: u64) -> bool {
    kernel
        .kthreads()
        .run_ready(cpu.index(), |role| should_run(kernel, cpu, role, now_ns))
}

/// Runs `cpu`'s RCU callbacks whose grace period ended, oldest grace
/// period first; returns how many ran. The `rcuc` thread's turn, and what
/// a CPU that has no loop to switch to it (bare metal's controller) calls
/// itself. A job runs as the platform runs its work items; the kernel's
/// own clean-up is called.
pub fn run_rcu_callbacks<K: KthreadKernel>(kernel: &K, cpu: CpuId) -> usize {
    let lists = kernel.rcu_callbacks();
    let completed = kernel.rcu().completed();
    let ready: Vec<Callback<K::Job>> =
        kernel.without_interrupts(|| lists.take_ready(cpu.index(), completed));
    let count = ready.len();
    for callback in ready {
        match callback {
            Callback::Job { id, job } => kernel.run_job(cpu, Item::RcuCallback, id, job),
            Callback::Free(free) => free(),
        }
    }
    count
}

/// `ksoftirqd`'s turn: every timer due at the last tick, earliest first.
fn run_timers<K: KthreadKernel>(kernel: &K, cpu: CpuId) {
    let tick = kernel.hz().last_tick(kernel.now_ns());
    let due = kernel.without_interrupts(|| kernel.timers().take_due(cpu.index(), tick));
    for timer in due {
        kernel.run_job(cpu, Item::Timer, timer.id, timer.job);
    }
}

/// `kworker`'s turn: task slices where it runs them, then a bounded batch
/// of work items.
fn run_work<K: KthreadKernel>(kernel: &K, cpu: CpuId) {
    if K::TASKS_IN_WORKER {
        kernel.run_task_slices(cpu);
    }
    for _ in 0..WORK_PER_TURN {
        let Some(work) = kernel.without_interrupts(|| kernel.workqueue().next(cpu.index())) else {
            break;
        };
        kernel.run_job(cpu, Item::Work, work.id, work.job);
    }
}

#[cfg(test)]
mod tests;
