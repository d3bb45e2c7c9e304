//! Scheduler structures: per-CPU run queues and the scheduling domains load
//! balancing reads.

use std::collections::VecDeque;
use std::ptr;
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

use hotkern_cpuhp::CpuSet;
use hotkern_kernel::cpuset::{cpu_id, MAX_CPUS};
use parking_lot::Mutex;

use crate::task::Task;

/// CPUs per domain (a "node"); balancing stays inside a node when it can.
pub(crate) const NODE_CPUS: usize = 8;

/// One CPU's run queue. It takes tasks only while its CPU is active.
#[derive(Default)]
pub(crate) struct RunQueue {
    tasks: VecDeque<Task>,
    accepting: bool,
}

impl RunQueue {
    /// Queues `task`, or gives it back if the queue is closed.
    pub(crate) fn push(&mut self, task: Task) -> Result<(), Task> {
        if self.accepting {
            self.tasks.push_back(task);
            Ok(())
        } else {
            Err(task)
        }
    }

    pub(crate) fn pop(&mut self) -> Option<Task> {
        self.tasks.pop_front()
    }

    pub(crate) fn len(&self) -> usize {
        self.tasks.len()
    }

    pub(crate) fn is_open(&self) -> bool {
        self.accepting
    }

    /// Starts taking tasks.
    pub(crate) fn open(&mut self) {
        self.accepting = true;
    }

    /// Stops taking tasks and hands over the queued ones.
    pub(crate) fn close(&mut self) -> Vec<Task> {
        self.accepting = false;
        self.tasks.drain(..).collect()
    }
}

/// The domains of one rebuild: the active CPUs of each node.
struct DomainSet {
    nodes: Vec<CpuSet>,
    all: CpuSet,
}

/// Scheduling domains, published for lock-free readers on vCPUs and
/// rebuilt whenever the active set changes.
#[derive(Default)]
pub(crate) struct Domains {
    current: AtomicPtr<DomainSet>,
    /// The CPUs the domains span; changed and rebuilt under this lock, so
    /// targets of a bulk operation rebuilding at once do not lose updates.
    members: Mutex<CpuSet>,
    /// Rebuilds done, for tests.
    pub(crate) rebuilds: AtomicU64,
}

/// A retired domain set, freed once no reader can hold it.
pub(crate) struct Retired(*mut DomainSet);

// SAFETY: the set is plain data, freed once, by whoever holds this.
unsafe impl Send for Retired {}

impl Retired {
    /// Frees the set; call only after a grace period.
    pub(crate) fn free(self) {
        if !self.0.is_null() {
            // SAFETY: unpublished before a full grace period.
            drop(unsafe { Box::from_raw(self.0) });
        }
    }
}

impl Domains {
    /// Adds `cpus` to the domains and rebuilds them; returns the old set,
    /// which the caller frees after a grace period.
    pub(crate) fn add(&self, cpus: CpuSet) -> Retired {
        let mut members = self.members.lock();
        *members = members.union(&cpus);
        self.rebuild(*members)
    }

    /// Removes `cpus` from the domains and rebuilds them (see [`Self::add`]).
    pub(crate) fn remove(&self, cpus: CpuSet) -> Retired {
        let mut members = self.members.lock();
        *members = members.difference(&cpus);
        self.rebuild(*members)
    }

    fn rebuild(&self, active: CpuSet) -> Retired {
        let nodes = (0..MAX_CPUS)
            .step_by(NODE_CPUS)
            .map(|first| {
                CpuSet::range(first as u32, (first + NODE_CPUS) as u32).intersection(&active)
            })
            .collect();
        let fresh = Box::into_raw(Box::new(DomainSet { nodes, all: active }));
        self.rebuilds.fetch_add(1, Ordering::Relaxed);
        Retired(self.current.swap(fresh, Ordering::AcqRel))
    }

    /// The CPUs `cpu` balances over: its node's active CPUs, or every active
    /// CPU if its node has none. Readers run on a vCPU.
    pub(crate) fn span_of(&self, cpu: usize) -> CpuSet {
        let set = self.current.load(Ordering::Acquire);
        // SAFETY: sets are freed only a grace period after being replaced,
        // and callers are vCPUs between quiescent states.
        let Some(set) = (unsafe { set.as_ref() }) else {
            return CpuSet::single(cpu_id(cpu));
        };
        match set.nodes.get(cpu / NODE_CPUS) {
            Some(node) if !node.is_empty() => *node,
            _ => set.all,
        }
    }

    /// The active set the current domains were built over.
    pub(crate) fn built_over(&self) -> CpuSet {
        let set = self.current.load(Ordering::Acquire);
        // SAFETY: as in `span_of`; called on the hotplug path.
        unsafe { set.as_ref() }.map_or(CpuSet::EMPTY, |s| s.all)
    }
}

impl Drop for Domains {
    fn drop(&mut self) {
        Retired(self.current.swap(ptr::null_mut(), Ordering::AcqRel)).free();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn task(id: u64) -> Task {
        Task {
            id,
            body: Box::new(|_| crate::task::TaskStatus::Done),
        }
    }

    #[test]
    fn a_closed_run_queue_refuses_tasks_and_hands_over_its_queue() {
        let mut queue = RunQueue::default();
        assert!(queue.push(task(1)).is_err());
        queue.open();
        assert!(queue.push(task(1)).is_ok() && queue.push(task(2)).is_ok());
        assert_eq!(queue.pop().map(|t| t.id), Some(1));
        let handed: Vec<u64> = queue.close().iter().map(|t| t.id).collect();
        assert_eq!(handed, [2]);
        assert!(!queue.is_open() && queue.len() == 0);
        assert_eq!(queue.push(task(3)).map_err(|t| t.id).err(), Some(3));
    }

    #[test]
    fn domains_span_a_node_and_track_membership() {
        let domains = Domains::default();
        assert_eq!(
            domains.span_of(3),
            CpuSet::single(cpu_id(3)),
            "no domains yet"
        );
        domains.add(CpuSet::range(0, 12)).free();
        assert_eq!(domains.span_of(3), CpuSet::range(0, 8));
        assert_eq!(domains.span_of(9), CpuSet::range(8, 12));
        domains.remove(CpuSet::range(8, 12)).free();
        assert_eq!(
            domains.span_of(9),
            CpuSet::range(0, 8),
            "empty node: every active CPU"
        );
        assert_eq!(domains.built_over(), CpuSet::range(0, 8));
        assert_eq!(domains.rebuilds.load(Ordering::Relaxed), 2);
    }
}
