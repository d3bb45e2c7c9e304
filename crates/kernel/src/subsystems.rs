//! The per-CPU mechanisms every kernel keeps one instance of, in one
//! place: the audit, the timer bases, the workqueue pools, the RCU
//! callback lists, the counters, the scheduling domains, the kernel
//! threads' slots, the limbo and the online and active masks.
//!
//! Both platforms held the same set, the machine as fields of its kernel
//! and the bare-metal kernel as `static`s, and each handed it to the step
//! table through the same one-line accessors. Now a platform holds one
//! [`Subsystems`] (a field; a `static` made once the heap exists) and
//! [`StepKernel`](crate::steps::StepKernel) reads it through its one
//! required accessor, `subsystems`; the accessors for each piece are
//! provided.
//!
//! What stays outside is what is the platform's own: its run queues (the
//! shared [`Scheduler`](crate::tasks::Scheduler) over the platform's task
//! body, and how a slice runs), its page pool (bare metal makes it
//! after the heap, from the memory map), its trace buffers and sysfs
//! model, and whatever drives its grace periods (the machine's `rcu_gp`
//! thread, the bare-metal controller), which the RCU callback lists are
//! shared with ([`crate::rcu::callbacks`]).

use alloc::sync::Arc;

use crate::audit::Audit;
use crate::cpuset::AtomicCpuSet;
use crate::hotplug_read::HotplugReadSide;
use crate::kthread::{Kthreads, Thread};
use crate::placement::Limbo;
use crate::rcu::callbacks::Lists;
use crate::sched::Domains;
use crate::timer::Timers;
use crate::vmstat::Vmstat;
use crate::workqueue::Workqueue;

/// One kernel's shared mechanisms, for jobs `J` (what a work item or timer
/// runs), tasks `T` and kernel threads `Th`.
///
/// ```
/// use hotkern_cpuhp::CpuId;
/// use hotkern_kernel::kthread::{Role, Thread};
/// use hotkern_kernel::subsystems::Subsystems;
///
/// /// A thread that is only a flag.
/// struct Stub(std::sync::atomic::AtomicBool);
/// impl Thread for Stub {
///     fn run(&self) -> bool { false }
///     fn park(&self) {}
///     fn unpark(&self) {}
///     fn is_parked(&self) -> bool { true }
/// }
///
/// let kernel: Subsystems<(), (), Stub> = Subsystems::new(2);
/// kernel.online.set(CpuId(1), true);
/// assert!(kernel.online.contains(CpuId(1)) && kernel.active.load().is_empty());
/// assert!(!kernel.kthreads.exists(1, Role::Worker));
/// assert!(kernel.timers.create(1) && kernel.workqueue.create(1));
/// ```
pub struct Subsystems<J, T, Th> {
    /// The books of per-CPU resources the steps create and destroy, and
    /// every rule seen broken.
    pub audit: Audit,
    /// The per-CPU timer bases.
    pub timers: Timers<J>,
    /// The per-CPU workqueue pools.
    pub workqueue: Workqueue<J>,
    /// The per-CPU RCU callback lists: shared with the thread that drives
    /// grace periods where there is one (the machine's `rcu_gp` thread
    /// rings the CPUs holding callbacks as each grace period ends).
    pub rcu_callbacks: Arc<Lists<J>>,
    /// The per-CPU counters.
    pub vmstat: Vmstat,
    /// The scheduling domains.
    pub domains: Domains,
    /// Every CPU's kernel threads.
    pub kthreads: Kthreads<Th>,
    /// Tasks, work items, timers and RCU callbacks no CPU could take.
    pub limbo: Limbo<J, T>,
    /// Linux's `cpu_online_mask`: where anything may run.
    pub online: AtomicCpuSet,
    /// Linux's `cpu_active_mask`: where new and migrating tasks may go.
    pub active: AtomicCpuSet,
    /// The hotplug lock's atomic read side: placing something on a CPU
    /// picked from the online mask happens inside it, so that a CPU can
    /// go down without a stop-machine ([`HotplugReadSide`]).
    pub hotplug_read: HotplugReadSide,
}

impl<J, T, Th: Thread> Subsystems<J, T, Th> {
    /// Every mechanism empty, for CPUs `0..cpus`: no timer base, pool,
    /// callback list, counters or thread on any CPU, both masks empty.
    pub fn new(cpus: usize) -> Self {
        Subsystems {
            audit: Audit::default(),
            timers: Timers::new(cpus),
            workqueue: Workqueue::new(cpus),
            rcu_callbacks: Arc::new(Lists::new(cpus)),
            vmstat: Vmstat::new(cpus),
            domains: Domains::default(),
            kthreads: Kthreads::new(cpus),
            limbo: Limbo::new(),
            online: AtomicCpuSet::default(),
            active: AtomicCpuSet::default(),
            hotplug_read: HotplugReadSide::new(cpus),
        }
    }
}
