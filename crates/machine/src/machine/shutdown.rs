//! Stopping a machine: every thread joined, every per-CPU resource
//! freed, and what was left over reported.

use std::collections::BTreeMap;

use hotkern_cpuhp::CpuSet;
use hotkern_kernel::audit::{Counts, Resource, Violation};
use hotkern_kernel::kthread::Role;
use hotkern_kernel::ledger::{Item, Tally};
use hotkern_kernel::steps::StepKernel;

use crate::kernel::Kernel;

/// What [`Machine::shutdown`](crate::Machine::shutdown) found.
#[derive(Debug, Clone)]
pub struct ShutdownReport {
    /// Tasks, work items, timers and RCU callbacks: issued, completed, lost.
    pub tallies: Vec<(Item, Tally)>,
    /// Every broken invariant, including resources leaked at the end.
    pub violations: Vec<Violation>,
    /// Creations and destructions per kind of per-CPU resource.
    pub counts: BTreeMap<Resource, Counts>,
}

impl ShutdownReport {
    /// Whether everything completed exactly once and nothing broke.
    pub fn is_clean(&self) -> bool {
        self.violations.is_empty()
            && self
                .tallies
                .iter()
                .all(|(_, t)| t.outstanding == 0 && t.completed_twice == 0)
    }
}

/// Frees whatever per-CPU resource is left once every vCPU has stopped:
/// an online CPU's full set, and what Bolt kept for offline ones.
pub(super) fn release_everything(k: &Kernel) {
    // No vCPU runs: grace periods must not wait for any.
    for cpu in 0..k.cpus {
        k.rcu.set_tracked(cpu, false);
    }
    // Every thread is told first, then each is joined as it is removed:
    // they exit in parallel.
    let mut threads = Vec::new();
    for cpu in 0..k.cpus {
        for role in Role::ALL {
            if k.kthreads().request_stop(cpu, role) {
                threads.push((cpu, role));
            }
        }
    }
    for (cpu, role) in threads {
        if k.kthreads().remove(cpu, role) {
            k.audit().destroyed(Resource::Kthread(role), cpu);
        }
    }
    let all = CpuSet::range(0, k.cpus as u32);
    for cpu in 0..k.cpus {
        if k.pages.free(cpu) {
            k.audit().destroyed(Resource::PageCache, cpu);
        }
        if k.events.retire(cpu, false) {
            k.audit().destroyed(Resource::EventLog, cpu);
        }
        if k.workqueue().free(cpu).is_some() {
            k.audit().destroyed(Resource::WorkerPool, cpu);
        }
        if k.timers().free(cpu).is_some() {
            k.audit().destroyed(Resource::TimerBase, cpu);
        }
        // Callbacks left are counted as outstanding by the ledger.
        if k.rcu_callbacks().take_all(cpu).is_some() {
            k.audit().destroyed(Resource::RcuData, cpu);
        }
    }
    for cpu in k.sysfs.remove(all).iter() {
        k.audit().destroyed(Resource::SysfsNodes, cpu.index());
    }
    for cpu in k.vmstat().retire(all, || k.rcu.synchronize()).iter() {
        k.audit().destroyed(Resource::Vmstat, cpu.index());
    }
}
