//! Scheduler structures: per-CPU run queues and the scheduling domains load
//! balancing reads.

use alloc::boxed::Box;
use alloc::collections::VecDeque;
use alloc::vec::Vec;
use core::ptr;

use hotkern_cpuhp::CpuSet;

use crate::cpuset::{cpu_id, MAX_CPUS};
use crate::sync::{AtomicPtr, AtomicU64, Mutex, Ordering};

/// CPUs per domain (a "node"); balancing stays inside a node when it can.
pub const NODE_CPUS: usize = 8;

/// One CPU's run queue of tasks `T`. It takes tasks only while its CPU is
/// active.
///
/// ```
/// use hotkern_kernel::sched::RunQueue;
///
/// let mut queue = RunQueue::default();
/// assert_eq!(queue.push("task"), Err("task"), "closed until its CPU is active");
/// queue.open();
/// assert_eq!(queue.push("task"), Ok(()));
/// assert_eq!(queue.close(), ["task"]);
/// ```
pub struct RunQueue<T> {
    tasks: VecDeque<T>,
    accepting: bool,
}

impl<T> Default for RunQueue<T> {
    /// An empty, closed queue.
    fn default() -> Self {
        RunQueue {
            tasks: VecDeque::new(),
            accepting: false,
        }
    }
}

impl<T> RunQueue<T> {
    /// Queues `task`, or gives it back if the queue is closed.
    pub fn push(&mut self, task: T) -> Result<(), T> {
        if self.accepting {
            self.tasks.push_back(task);
            Ok(())
        } else {
            Err(task)
        }
    }

    /// Takes the task queued first.
    pub fn pop(&mut self) -> Option<T> {
        self.tasks.pop_front()
    }

    /// Tasks queued.
    pub fn len(&self) -> usize {
        self.tasks.len()
    }

    /// Whether no task is queued.
    pub fn is_empty(&self) -> bool {
        self.tasks.is_empty()
    }

    /// Whether the queue takes tasks.
    pub fn is_open(&self) -> bool {
        self.accepting
    }

    /// Starts taking tasks.
    pub fn open(&mut self) {
        self.accepting = true;
    }

    /// Stops taking tasks and hands over the queued ones.
    pub fn close(&mut self) -> Vec<T> {
        self.accepting = false;
        self.tasks.drain(..).collect()
    }
}

/// The domains of one rebuild: the active CPUs of each node.
struct DomainSet {
    nodes: Vec<CpuSet>,
    all: CpuSet,
}

/// Scheduling domains, published for lock-free readers on CPUs and
/// rebuilt whenever the active set changes, after Linux's RCU-protected
/// `sched_domain`s: a rebuild hands back the old set as [`Retired`], which
/// its owner frees once a grace period has passed.
///
/// ```
/// use hotkern_cpuhp::{CpuId, CpuSet};
/// use hotkern_kernel::sched::Domains;
///
/// let domains = Domains::default();
/// let old = domains.add(CpuSet::range(0, 12));
/// // SAFETY: no reader has run yet, so none can hold the old set.
/// unsafe { old.free() };
/// assert_eq!(domains.span_of(9), CpuSet::range(8, 12), "CPU 9's node");
/// ```
#[derive(Default)]
pub struct Domains {
    current: AtomicPtr<DomainSet>,
    /// The CPUs the domains span; changed and rebuilt under this lock, so
    /// targets of a bulk operation rebuilding at once do not lose updates.
    members: Mutex<CpuSet>,
    /// Rebuilds done.
    rebuilds: AtomicU64,
}

/// A retired domain set, freed once no reader can hold it.
#[must_use = "a retired set leaks unless freed after a grace period"]
pub struct Retired(*mut DomainSet);

// SAFETY: the set is plain data, freed once, by whoever holds this.
unsafe impl Send for Retired {}

impl Retired {
    /// Frees the set.
    ///
    /// # Safety
    ///
    /// No reader may still hold it: a full grace period has passed since
    /// the rebuild that retired it, and [`Domains::span_of`] and
    /// [`Domains::built_over`] are called only between quiescent states.
    pub unsafe fn free(self) {
        if !self.0.is_null() {
            // SAFETY: unpublished before a full grace period (the caller's
            // promise), and taken out of `Domains` exactly once.
            drop(unsafe { Box::from_raw(self.0) });
        }
    }
}

impl Domains {
    /// Adds `cpus` to the domains and rebuilds them; returns the old set,
    /// which the caller frees after a grace period.
    pub fn add(&self, cpus: CpuSet) -> Retired {
        let mut members = self.members.lock();
        *members = members.union(&cpus);
        self.rebuild(*members)
    }

    /// Removes `cpus` from the domains and rebuilds them (see [`Self::add`]).
    pub fn remove(&self, cpus: CpuSet) -> Retired {
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
    /// CPU if its node has none. Readers run on a CPU, between quiescent
    /// states (see [`Retired::free`]).
    pub fn span_of(&self, cpu: usize) -> CpuSet {
        let set = self.current.load(Ordering::Acquire);
        // SAFETY: sets are freed only a grace period after being replaced,
        // and callers are CPUs between quiescent states.
        let Some(set) = (unsafe { set.as_ref() }) else {
            return CpuSet::single(cpu_id(cpu));
        };
        match set.nodes.get(cpu / NODE_CPUS) {
            Some(node) if !node.is_empty() => *node,
            _ => set.all,
        }
    }

    /// The active set the current domains were built over.
    pub fn built_over(&self) -> CpuSet {
        let set = self.current.load(Ordering::Acquire);
        // SAFETY: as in `span_of`; called on the hotplug path.
        unsafe { set.as_ref() }.map_or(CpuSet::EMPTY, |s| s.all)
    }

    /// Rebuilds done so far.
    pub fn rebuilds(&self) -> u64 {
        self.rebuilds.load(Ordering::Relaxed)
    }
}

impl Drop for Domains {
    fn drop(&mut self) {
        let last = Retired(self.current.swap(ptr::null_mut(), Ordering::AcqRel));
        // SAFETY: `&mut self`: no reader can hold the set any more.
        unsafe { last.free() };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_run_queue_refuses_tasks_and_hands_over_its_queue() {
        let mut queue = RunQueue::default();
        assert!(queue.push(1u64).is_err());
        queue.open();
        assert!(queue.push(1).is_ok() && queue.push(2).is_ok());
        assert_eq!(queue.pop(), Some(1));
        let handed = queue.close();
        assert_eq!(handed, [2]);
        assert!(!queue.is_open() && queue.is_empty());
        assert_eq!(queue.len(), 0);
        assert_eq!(queue.push(3).err(), Some(3));
    }

    #[test]
    fn domains_span_a_node_and_track_membership() {
        let domains = Domains::default();
        assert_eq!(
            domains.span_of(3),
            CpuSet::single(cpu_id(3)),
            "no domains yet"
        );
        // SAFETY: no reader runs concurrently.
        unsafe { domains.add(CpuSet::range(0, 12)).free() };
        assert_eq!(domains.span_of(3), CpuSet::range(0, 8));
        assert_eq!(domains.span_of(9), CpuSet::range(8, 12));
        // SAFETY: no reader runs concurrently.
        unsafe { domains.remove(CpuSet::range(8, 12)).free() };
        assert_eq!(
            domains.span_of(9),
            CpuSet::range(0, 8),
            "empty node: every active CPU"
        );
        assert_eq!(domains.built_over(), CpuSet::range(0, 8));
        assert_eq!(domains.rebuilds(), 2);
    }
}
