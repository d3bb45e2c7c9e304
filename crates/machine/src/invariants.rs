//! Checks that the machine's masks and per-CPU resources agree with what
//! each vCPU really is. Run with no operation in progress and no deferred
//! work pending.

use crate::audit::{Resource, Violation};
use crate::cpumask::CpuMask;
use crate::kernel::{Kernel, Life};
use crate::kthread::Role;

/// Resources every online CPU must have.
const ONLINE_NEEDS: [Resource; 9] = [
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

/// Every disagreement between `engine_online` (what the engine believes),
/// the kernel's masks, and each vCPU's state. With `frees_everything`
/// (only the classic engine ever ran), an offline CPU must hold nothing.
pub(crate) fn check(k: &Kernel, engine_online: CpuMask, frees_everything: bool) -> Vec<Violation> {
    let mut found = Vec::new();
    let online = k.online_mask();
    let active = k.active_mask();
    let mut mismatch = |mask: &'static str, cpu: usize| {
        found.push(Violation::MaskMismatch { mask, cpu });
    };
    for cpu in 0..k.cpus {
        let up = engine_online.contains(cpu);
        if online.contains(cpu) != up {
            mismatch("online", cpu);
        }
        if (k.life(cpu) == Life::Alive) != up {
            mismatch("power", cpu);
        }
        if active.contains(cpu) != up {
            mismatch("active", cpu);
        }
        if k.vcpus[cpu].runqueue.lock().is_open() != up {
            mismatch("runqueue", cpu);
        }
        if k.rcu.is_tracked(cpu) != up {
            mismatch("rcu", cpu);
        }
        if k.timers.is_enabled(cpu) != up {
            mismatch("timers", cpu);
        }
        if k.workqueue.is_bound(cpu) != up {
            mismatch("workqueue", cpu);
        }
        let visible = k
            .sysfs
            .read(&format!("devices/system/cpu/cpu{cpu}/online"), online)
            .is_ok();
        if visible != up {
            mismatch("sysfs", cpu);
        }
        for role in Role::ALL {
            let runnable = k.kthreads[cpu][role.index()]
                .lock()
                .as_ref()
                .is_some_and(|t| !t.is_parked());
            if runnable != up {
                mismatch("kthread", cpu);
            }
        }
        if up {
            if !k.vmstat.exists(cpu) {
                mismatch("vmstat", cpu);
            }
            for resource in ONLINE_NEEDS {
                if !k.audit.is_live(resource, cpu) {
                    mismatch("resources", cpu);
                }
            }
        } else {
            if k.pages.cached(cpu) != 0 {
                mismatch("page cache drained", cpu);
            }
            if k.timers.pending(cpu) != 0
                || k.rcu.has_ready(cpu)
                || k.vcpus[cpu].runqueue.lock().len() != 0
            {
                mismatch("work left on an offline cpu", cpu);
            }
            if frees_everything && k.audit.live().iter().any(|(_, owner)| *owner == cpu) {
                mismatch("resources freed", cpu);
            }
        }
    }
    if k.domains.built_over() != active {
        found.push(Violation::MaskMismatch {
            mask: "domains",
            cpu: 0,
        });
    }
    let pool = &k.pages.pool;
    let cached: u64 = (0..k.cpus).map(|cpu| k.pages.cached(cpu) as u64).sum();
    let held = k.pages.held();
    if pool.bad_returns() != 0 {
        found.push(Violation::PageAccounting {
            detail: format!("{} frames given back twice or foreign", pool.bad_returns()),
        });
    }
    if pool.free_frames() as i64 + cached as i64 + held != pool.total_frames() as i64 {
        found.push(Violation::PageAccounting {
            detail: format!(
                "free {} + cached {cached} + held {held} != total {}",
                pool.free_frames(),
                pool.total_frames()
            ),
        });
    }
    found
}
