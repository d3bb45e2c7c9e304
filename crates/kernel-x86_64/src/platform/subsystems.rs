//! The shared core's mechanisms this kernel keeps one instance of — timer
//! bases, workqueue pools, counters, scheduling domains, RCU callback
//! lists, the audit — and every CPU's kernel threads: what the step table
//! creates and frees per CPU, and what the CPU loop, the scheduler and the
//! hotplug lock read, below all three.

use alloc::boxed::Box;

use hotkern_kernel::audit::Audit;
use hotkern_kernel::cblist::CallbackLists;
use hotkern_kernel::cpuset::cpu_id;
use hotkern_kernel::kthread::{Kthreads, Role};
use hotkern_kernel::placement::place;
use hotkern_kernel::sched::Domains;
use hotkern_kernel::timer::Timers;
use hotkern_kernel::vmstat::Vmstat;
use hotkern_kernel::workqueue::Workqueue;

use hotkern_cpuhp::CpuId;

use crate::arch::cpu::{self, MAX_CPUS};
use crate::arch::instructions;
use crate::arch::kthread::Kthread;
use crate::arch::smp;
use crate::platform::failures;
use crate::platform::masks;
use crate::platform::rcu;

/// What a work item, timer or RCU callback runs.
pub type Job = Box<dyn FnOnce() + Send>;

/// The shared mechanisms the steps create and free per CPU (made once the
/// heap exists).
pub struct Subsystems {
    /// Every per-CPU resource's creations and destructions.
    pub audit: Audit,
    /// The per-CPU timer bases.
    pub timers: Timers<Job>,
    /// The per-CPU workqueue pools.
    pub workqueue: Workqueue<Job>,
    /// The per-CPU counters.
    pub vmstat: Vmstat,
    /// The scheduling domains.
    pub domains: Domains,
    /// The per-CPU RCU callback lists.
    pub callbacks: CallbackLists<Job>,
}

static SUBSYSTEMS: spin::Once<Subsystems> = spin::Once::new();

pub fn subsystems() -> &'static Subsystems {
    SUBSYSTEMS.call_once(|| Subsystems {
        audit: Audit::default(),
        timers: Timers::new(MAX_CPUS),
        workqueue: Workqueue::new(MAX_CPUS),
        vmstat: Vmstat::new(MAX_CPUS),
        domains: Domains::default(),
        callbacks: CallbackLists::new(MAX_CPUS),
    })
}

/// Every per-CPU resource's creations and destructions.
pub fn audit() -> &'static Audit {
    &subsystems().audit
}

/// The per-CPU counters.
pub fn vmstat() -> &'static Vmstat {
    &subsystems().vmstat
}

/// The scheduling domains.
pub fn domains() -> &'static Domains {
    &subsystems().domains
}

/// The per-CPU timer bases and workqueue pools.
pub fn timers_and_work() -> (&'static Timers<Job>, &'static Workqueue<Job>) {
    let s = subsystems();
    (&s.timers, &s.workqueue)
}

/// RCU callbacks queued on `cpu`.
pub fn rcu_pending(cpu: CpuId) -> usize {
    subsystems().callbacks.pending(cpu.index())
}

/// Every CPU's kernel threads.
pub static THREADS: spin::Once<Kthreads<Kthread>> = spin::Once::new();

pub fn threads() -> &'static Kthreads<Kthread> {
    THREADS.call_once(|| Kthreads::new(MAX_CPUS))
}

/// Whether `cpu` has its thread `role`.
pub fn has_thread(cpu: CpuId, role: Role) -> bool {
    THREADS
        .get()
        .is_some_and(|threads| threads.exists(cpu.index(), role))
}

/// A slice of a task ran on `cpu`: its counters count it.
pub fn count_slice(cpu: CpuId) {
    vmstat().with(cpu.index(), |stats| {
        stats
            .slices
            .fetch_add(1, core::sync::atomic::Ordering::Relaxed)
    });
}

/// Runs `cpu`'s RCU callbacks whose grace period ended: its `rcuc`
/// thread's work, done by the controller itself for CPU 0, which has no
/// idle loop. Returns how many ran.
pub fn run_rcu_callbacks(cpu: CpuId) -> usize {
    let lists = &subsystems().callbacks;
    let ready =
        instructions::without_interrupts(|| lists.take_ready(cpu.index(), rcu::grace_periods()));
    let count = ready.len();
    for callback in ready {
        callback();
    }
    count
}

/// Waits for a normal grace period; a stall is a failure the run reports.
pub fn synchronize_rcu() {
    if let Err(stall) = rcu::synchronize(rcu::Kind::Normal, rcu::GRACE_TIMEOUT_US) {
        failures::platform_failed(format_args!("{stall}"));
    }
}

/// Queues `free` on the calling CPU's RCU callback list, as `call_rcu`
/// does, or on another online CPU's; with no list anywhere, waits for a
/// grace period and frees now.
pub fn call_rcu(free: Job) {
    let lists = &subsystems().callbacks;
    let gp = rcu::snapshot();
    let me = cpu::current_id().unwrap_or(CpuId(0)).index();
    let taken = place(me, masks::online_mask(), free, |cpu, free| {
        instructions::without_interrupts(|| lists.call(cpu, gp, free))
    });
    match taken {
        Ok(cpu) => smp::wake(cpu_id(cpu)),
        Err(free) => {
            synchronize_rcu();
            free();
        }
    }
}
