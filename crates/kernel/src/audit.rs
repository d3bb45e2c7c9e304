//! Bookkeeping the invariant checks read: which per-CPU resources exist,
//! how many were ever created and destroyed, and every rule the kernel saw
//! broken while it ran.

use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use hotkern_cpuhp::CpuId;

use crate::cpuset::cpu_id;
use crate::kthread::Role;
use crate::sync::Mutex;

/// A kind of per-CPU resource a subsystem creates for a CPU and destroys later.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Resource {
    /// A per-CPU kernel thread (`ksoftirqd/N`, `kworker/N`, `rcuc/N`).
    Kthread(Role),
    /// A per-CPU page cache filled from physical memory.
    PageCache,
    /// The per-CPU sysfs directory and its attribute nodes.
    SysfsNodes,
    /// The per-CPU timer base.
    TimerBase,
    /// The per-CPU workqueue worker pool.
    WorkerPool,
    /// The per-CPU RCU callback list.
    RcuData,
    /// The per-CPU event log (the trace buffer of the platform).
    EventLog,
    /// The per-CPU statistics counters.
    Vmstat,
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Resource::Kthread(role) => write!(f, "kthread {}", role.name()),
            Resource::PageCache => f.write_str("page cache"),
            Resource::SysfsNodes => f.write_str("sysfs nodes"),
            Resource::TimerBase => f.write_str("timer base"),
            Resource::WorkerPool => f.write_str("worker pool"),
            Resource::RcuData => f.write_str("rcu data"),
            Resource::EventLog => f.write_str("event log"),
            Resource::Vmstat => f.write_str("vmstat counters"),
        }
    }
}

/// A broken invariant the kernel observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Violation {
    /// A resource was created for a CPU that already had one.
    DoubleCreate {
        /// The kind of resource.
        resource: Resource,
        /// The CPU it belongs to.
        cpu: CpuId,
    },
    /// A resource was destroyed that did not exist.
    DoubleFree {
        /// The kind of resource.
        resource: Resource,
        /// The CPU it belonged to.
        cpu: CpuId,
    },
    /// A resource outlived the kernel.
    Leak {
        /// The kind of resource.
        resource: Resource,
        /// The CPU it belongs to.
        cpu: CpuId,
    },
    /// Something ran on a vCPU that was not online.
    RanOffline {
        /// What ran: a task, a work item, a timer, RCU callbacks.
        what: &'static str,
        /// The vCPU it ran on.
        cpu: CpuId,
    },
    /// A task or deferred item completed more than once.
    RanTwice {
        /// What kind of item.
        what: &'static str,
        /// Its ledger id.
        id: u64,
    },
    /// A mask disagreed with the vCPUs' own state.
    MaskMismatch {
        /// The mask or per-CPU state that disagreed.
        mask: &'static str,
        /// The vCPU it disagreed about.
        cpu: CpuId,
    },
    /// A task or job panicked (it counts as completed; its vCPU went on).
    Panicked {
        /// What kind of item.
        what: &'static str,
        /// Its ledger id.
        id: u64,
    },
    /// A page frame went back to the pool twice, or was never returned.
    PageAccounting {
        /// What the counts were.
        detail: String,
    },
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::DoubleCreate { resource, cpu } => {
                write!(f, "{resource} of {cpu} created twice")
            }
            Violation::DoubleFree { resource, cpu } => {
                write!(f, "{resource} of {cpu} destroyed but not alive")
            }
            Violation::Leak { resource, cpu } => write!(f, "{resource} of {cpu} leaked"),
            Violation::RanOffline { what, cpu } => write!(f, "{what} ran on offline {cpu}"),
            Violation::RanTwice { what, id } => write!(f, "{what} {id} ran twice"),
            Violation::MaskMismatch { mask, cpu } => {
                write!(f, "{mask} mask disagrees with {cpu}'s state")
            }
            Violation::Panicked { what, id } => write!(f, "{what} {id} panicked"),
            Violation::PageAccounting { detail } => write!(f, "page accounting: {detail}"),
        }
    }
}

/// Creation and destruction counts of one resource kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Times a resource of this kind was created.
    pub created: u64,
    /// Times one was destroyed.
    pub destroyed: u64,
}

#[derive(Default)]
struct Books {
    live: BTreeMap<(Resource, CpuId), ()>,
    counts: BTreeMap<Resource, Counts>,
    violations: Vec<Violation>,
}

/// The kernel's books: live resources, counts, violations.
///
/// ```
/// use hotkern_kernel::audit::{Audit, Resource, Violation};
///
/// let audit = Audit::default();
/// audit.created(Resource::TimerBase, 0);
/// assert!(audit.is_live(Resource::TimerBase, 0));
/// audit.destroyed(Resource::TimerBase, 0);
/// audit.destroyed(Resource::TimerBase, 0);
/// assert!(matches!(audit.violations()[..], [Violation::DoubleFree { .. }]));
/// ```
#[derive(Default)]
pub struct Audit {
    books: Mutex<Books>,
}

impl Audit {
    /// Records that `resource` now exists for `cpu`.
    pub fn created(&self, resource: Resource, cpu: usize) {
        let cpu = cpu_id(cpu);
        let mut books = self.books.lock();
        books.counts.entry(resource).or_default().created += 1;
        if books.live.insert((resource, cpu), ()).is_some() {
            books
                .violations
                .push(Violation::DoubleCreate { resource, cpu });
        }
    }

    /// Records that `resource` of `cpu` is gone.
    pub fn destroyed(&self, resource: Resource, cpu: usize) {
        let cpu = cpu_id(cpu);
        let mut books = self.books.lock();
        books.counts.entry(resource).or_default().destroyed += 1;
        if books.live.remove(&(resource, cpu)).is_none() {
            books
                .violations
                .push(Violation::DoubleFree { resource, cpu });
        }
    }

    /// Whether `resource` of `cpu` exists now.
    pub fn is_live(&self, resource: Resource, cpu: usize) -> bool {
        self.books
            .lock()
            .live
            .contains_key(&(resource, cpu_id(cpu)))
    }

    /// Every live resource.
    pub fn live(&self) -> Vec<(Resource, CpuId)> {
        self.books.lock().live.keys().copied().collect()
    }

    /// Creation and destruction counts per kind.
    pub fn counts(&self) -> BTreeMap<Resource, Counts> {
        self.books.lock().counts.clone()
    }

    /// Records a broken invariant.
    pub fn violation(&self, violation: Violation) {
        self.books.lock().violations.push(violation);
    }

    /// Every broken invariant seen so far.
    pub fn violations(&self) -> Vec<Violation> {
        self.books.lock().violations.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn double_create_and_double_free_are_caught() {
        let audit = Audit::default();
        audit.created(Resource::PageCache, 1);
        audit.created(Resource::PageCache, 1);
        audit.destroyed(Resource::PageCache, 1);
        audit.destroyed(Resource::PageCache, 1);
        assert_eq!(
            audit.violations(),
            [
                Violation::DoubleCreate {
                    resource: Resource::PageCache,
                    cpu: CpuId(1)
                },
                Violation::DoubleFree {
                    resource: Resource::PageCache,
                    cpu: CpuId(1)
                }
            ]
        );
        let counts = audit.counts()[&Resource::PageCache];
        assert_eq!((counts.created, counts.destroyed), (2, 2));
        assert!(audit.live().is_empty());
    }
}
