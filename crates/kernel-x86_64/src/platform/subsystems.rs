//! The shared core's mechanisms this kernel keeps one instance of — the
//! shared [`Subsystems`] (timer bases, workqueue pools, RCU callback
//! lists, counters, scheduling domains, every CPU's kernel threads, the
//! limbo, the online and active masks, the audit): what the step table
//! creates and frees per CPU, and what the CPU loop, the scheduler and the
//! hotplug lock read, below all three.
//!
//! The masks are Linux's `cpu_online_mask` and `cpu_active_mask`, written
//! by the scheduler's boot and the hotplug steps; read before the
//! scheduler's boot (which needs the heap), they are empty.

use alloc::boxed::Box;

use hotkern_kernel::audit::Audit;
use hotkern_kernel::kthread::Role;
use hotkern_kernel::smpboot;
use hotkern_kernel::subsystems::Subsystems;

use hotkern_cpuhp::{CpuId, CpuSet};

use crate::arch::cpu::MAX_CPUS;
use crate::arch::kthread::Kthread;
use crate::platform::task::Task;

/// What a work item, timer or RCU callback runs.
pub type Job = Box<dyn FnOnce() + Send>;

/// This kernel as the shared core sees it: a handle on the mechanisms
/// kept here. Its `StepKernel` and `KthreadKernel` impls are in
/// [`crate::platform::steps`], above the scheduler they call, which reads
/// the masks kept here.
pub struct Steps;

/// The shared mechanisms (made once the heap exists).
static SUBSYSTEMS: spin::Once<Subsystems<Job, Task, Kthread>> = spin::Once::new();

/// The shared mechanisms, made at the first call (which must come after
/// the heap's).
pub fn subsystems() -> &'static Subsystems<Job, Task, Kthread> {
    SUBSYSTEMS.call_once(|| Subsystems::new(MAX_CPUS))
}

/// The shared mechanisms if made: what a CPU's loop, which starts before
/// the heap exists, asks for.
pub fn get() -> Option<&'static Subsystems<Job, Task, Kthread>> {
    SUBSYSTEMS.get()
}

/// Every per-CPU resource's creations and destructions.
pub fn audit() -> &'static Audit {
    &subsystems().audit
}

/// The online mask; empty until the scheduler's boot.
pub fn online_mask() -> CpuSet {
    SUBSYSTEMS.get().map_or(CpuSet::EMPTY, |s| s.online.load())
}

/// The active mask; empty until the scheduler's boot.
pub fn active_mask() -> CpuSet {
    SUBSYSTEMS.get().map_or(CpuSet::EMPTY, |s| s.active.load())
}

/// RCU callbacks queued on `cpu`; none before the shared mechanisms exist.
pub fn rcu_pending(cpu: CpuId) -> usize {
    SUBSYSTEMS
        .get()
        .map_or(0, |s| s.rcu_callbacks.pending(cpu.index()))
}

/// RCU callbacks no CPU's list took, waiting in the limbo.
pub fn rcu_waiting() -> usize {
    SUBSYSTEMS.get().map_or(0, |s| s.limbo.callbacks())
}

/// Whether `cpu` has its thread `role`.
pub fn has_thread(cpu: CpuId, role: Role) -> bool {
    SUBSYSTEMS
        .get()
        .is_some_and(|s| s.kthreads.exists(cpu.index(), role))
}

/// A slice of a task ran on `cpu`: its counters count it.
pub fn count_slice(cpu: CpuId) {
    subsystems().vmstat.with(cpu.index(), |stats| {
        stats
            .slices
            .fetch_add(1, core::sync::atomic::Ordering::Relaxed)
    });
}

/// Runs `cpu`'s RCU callbacks whose grace period ended: its `rcuc`
/// thread's work ([`smpboot::run_rcu_callbacks`]), done by the controller
/// itself for CPU 0, which has no idle loop. Returns how many ran.
pub fn run_rcu_callbacks(cpu: CpuId) -> usize {
    smpboot::run_rcu_callbacks(&Steps, cpu)
}
