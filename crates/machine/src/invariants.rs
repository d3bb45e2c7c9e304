//! Checks that the machine's masks and per-CPU resources agree with what
//! each vCPU really is. Run with no operation in progress and no deferred
//! work pending. What both platforms check is the shared kernel's
//! ([`hotkern_kernel::steps::invariants`]); what only the machine has is
//! checked here after it: its sysfs map answers for exactly the online
//! vCPUs, and its page pool's frame accounting (the bare-metal kernel
//! checks its pool's once, at the end of its run).

use hotkern_cpuhp::CpuSet;
use hotkern_kernel::audit::{Resource, Violation};
use hotkern_kernel::cpuset::cpu_id;
use hotkern_kernel::kthread::{Role, Thread};
use hotkern_kernel::steps::{invariants, StepKernel};

use crate::kernel::Kernel;
use hotkern_kernel::power::Life;

/// Every disagreement between `engine_online` (what the engine believes),
/// the kernel's masks, and each vCPU's state, the audit's violations
/// first. With `frees_everything` (only the classic engine ever ran), an
/// offline CPU must hold nothing.
pub(crate) fn check(k: &Kernel, engine_online: CpuSet, frees_everything: bool) -> Vec<Violation> {
    let mut found = invariants::check(k, engine_online, k.cpus, frees_everything);
    let online = k.online_mask();
    for cpu in 0..k.cpus {
        let visible = k
            .sysfs
            .read(&format!("devices/system/cpu/cpu{cpu}/online"), online)
            .is_ok();
        if visible != engine_online.contains(cpu_id(cpu)) {
            found.push(Violation::MaskMismatch {
                mask: "sysfs",
                cpu: cpu_id(cpu),
            });
        }
    }
    let pool = k.pages.pool();
    let (free, cached, held) = k.pages.accounting();
    if pool.bad_returns() != 0 {
        found.push(Violation::PageAccounting {
            detail: format!("{} frames given back twice or foreign", pool.bad_returns()),
        });
    }
    if free as i64 + cached as i64 + held != pool.total_frames() as i64 {
        found.push(Violation::PageAccounting {
            detail: format!(
                "free {free} + cached {cached} + held {held} != total {}",
                pool.total_frames()
            ),
        });
    }
    found
}

/// Where one vCPU and each of its subsystems stand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuState {
    /// In the online mask.
    pub online: bool,
    /// In the active mask.
    pub active: bool,
    /// Its thread runs the scheduler loop.
    pub powered: bool,
    /// Its run queue takes tasks.
    pub runqueue_open: bool,
    /// Grace periods wait for it.
    pub rcu_tracked: bool,
    /// Its timer base fires.
    pub timers_enabled: bool,
    /// Its worker pool is bound.
    pub workqueue_bound: bool,
    /// Its sysfs nodes are visible.
    pub sysfs_visible: bool,
    /// Each kernel thread: `None` if absent, else whether it is parked.
    pub kthreads: Vec<Option<bool>>,
    /// Per-CPU resources alive for it.
    pub resources: Vec<Resource>,
}

/// A snapshot of the machine's hotplug-relevant state, to compare before
/// and after an operation that was rolled back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MachineState {
    /// Each vCPU's state.
    pub cpus: Vec<CpuState>,
    /// The CPUs the scheduling domains span.
    pub domains: CpuSet,
}

pub(crate) fn snapshot(k: &Kernel) -> MachineState {
    let online = k.online_mask();
    let active = k.active_mask();
    let live = k.audit().live();
    let cpus = (0..k.cpus)
        .map(|cpu| CpuState {
            online: online.contains(cpu_id(cpu)),
            active: active.contains(cpu_id(cpu)),
            powered: k.life(cpu) == Life::Alive,
            runqueue_open: k.tasks.queue_state(cpu_id(cpu)).1,
            rcu_tracked: k.rcu.is_tracked(cpu),
            timers_enabled: k.timers().is_enabled(cpu),
            workqueue_bound: k.workqueue().is_bound(cpu),
            sysfs_visible: k
                .sysfs
                .read(&format!("devices/system/cpu/cpu{cpu}/online"), online)
                .is_ok(),
            kthreads: Role::ALL
                .into_iter()
                .map(|role| k.kthreads().get(cpu, role).map(|t| t.is_parked()))
                .collect(),
            resources: live
                .iter()
                .filter(|(_, owner)| owner.index() == cpu)
                .map(|(resource, _)| *resource)
                .collect(),
        })
        .collect();
    MachineState {
        cpus,
        domains: k.domains().built_over(),
    }
}
