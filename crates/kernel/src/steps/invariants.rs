//! What must hold after every hotplug operation, on both platforms: the
//! masks and each CPU's per-CPU resources agree with what the engine says
//! the CPU is. Linux checks pieces of this where they break
//! (`cpuhp_invoke_callback`'s warnings, `sched_cpu_dying`'s
//! `BUG_ON(rq->nr_running != 1)`, `rcutree_dead_cpu`); here the whole of
//! it is one check, written once over [`StepKernel`], which the user-mode
//! machine runs from its tests and the bare-metal kernel after each of
//! its timed operations.
//!
//! Run with no operation in progress and no deferred callback pending
//! (after the engine's `flush_deferred`): bolt's deferred teardowns leave
//! a CPU's resources half-kept until they ran.

use alloc::vec::Vec;

use hotkern_cpuhp::{CpuId, CpuSet};

use super::StepKernel;
use crate::audit::{Resource, Violation};
use crate::cpuset::cpu_id;
use crate::kthread::{Role, Thread};

/// What the audit must name live for every online CPU: what the step
/// table's startups create.
pub const ONLINE_NEEDS: [Resource; 9] = [
    Resource::Kthread(Role::Softirq),
    Resource::Kthread(Role::Worker),
    Resource::Kthread(Role::RcuCallbacks),
    Resource::PageCache,
    Resource::SysfsNodes,
    Resource::TimerBase,
    Resource::WorkerPool,
    Resource::RcuData,
    Resource::EventLog,
];

/// Every disagreement between `engine_online` (the CPUs the engine calls
/// online), the kernel's masks, and each of the first `cpus` CPUs' state,
/// after the audit's own violations. Each disagreement is a
/// [`Violation::MaskMismatch`] naming what disagreed:
///
/// - for every CPU, whether it is in (or has) each of these must be
///   whether the engine calls it online: `online`, `active` (the masks),
///   `power` (its lifecycle says alive), `runqueue` (open), `rcu` (grace
///   periods wait for it), `timers` (base enabled), `workqueue` (pool
///   bound), `page cache` (enabled), `kthread` (each role's thread exists
///   and is unparked); and `kthread books`: a thread exists exactly when
///   the audit names it live;
/// - an online CPU has its counters (`vmstat`), its RCU callback list
///   (`rcu data`) and every resource of [`ONLINE_NEEDS`] (`resources`);
/// - an offline CPU's page cache is empty (`page cache drained`), it
///   holds no task, timer or RCU callback (`work left on an offline
///   cpu`), and with `frees_everything` (only the classic engine ever ran)
///   the audit names nothing of it live (`resources freed`);
/// - the scheduling domains span the active mask (`domains`, named for
///   CPU 0).
///
/// Empty when all hold.
pub fn check<K: StepKernel>(
    kernel: &K,
    engine_online: CpuSet,
    cpus: usize,
    frees_everything: bool,
) -> Vec<Violation> {
    let audit = kernel.audit();
    let mut found = audit.violations();
    let online = kernel.online_mask();
    let active = kernel.active_mask();
    let live = if frees_everything {
        audit.live()
    } else {
        Vec::new()
    };
    for cpu in 0..cpus {
        let id = cpu_id(cpu);
        let up = engine_online.contains(id);
        let mut mismatch = |mask: &'static str| {
            found.push(Violation::MaskMismatch { mask, cpu: id });
        };
        let (queued, open) = kernel.queue_state(id);
        let callbacks = kernel.rcu_queued(cpu);
        let cache = kernel.pages();
        let states = [
            ("online", online.contains(id)),
            ("power", kernel.is_powered(id)),
            ("active", active.contains(id)),
            ("runqueue", open),
            ("rcu", kernel.rcu_is_online(cpu)),
            ("timers", kernel.timers().is_enabled(cpu)),
            ("workqueue", kernel.workqueue().is_bound(cpu)),
            ("page cache", cache.is_some_and(|p| p.is_enabled(cpu))),
        ];
        for (mask, state) in states {
            if state != up {
                mismatch(mask);
            }
        }
        for role in Role::ALL {
            let thread = kernel.kthreads().get(cpu, role);
            if thread.as_ref().is_some_and(|t| !t.is_parked()) != up {
                mismatch("kthread");
            }
            if thread.is_some() != audit.is_live(Resource::Kthread(role), cpu) {
                mismatch("kthread books");
            }
        }
        if up {
            if !kernel.vmstat().exists(cpu) {
                mismatch("vmstat");
            }
            if callbacks.is_none() {
                mismatch("rcu data");
            }
            for resource in ONLINE_NEEDS {
                if !audit.is_live(resource, cpu) {
                    mismatch("resources");
                }
            }
        } else {
            if cache.is_some_and(|p| p.cached(cpu) != 0) {
                mismatch("page cache drained");
            }
            if queued + kernel.timers().pending(cpu) + callbacks.unwrap_or(0) != 0 {
                mismatch("work left on an offline cpu");
            }
            if live.iter().any(|(_, owner)| owner.index() == cpu) {
                mismatch("resources freed");
            }
        }
    }
    if kernel.domains().built_over() != active {
        found.push(Violation::MaskMismatch {
            mask: "domains",
            cpu: CpuId(0),
        });
    }
    found
}
