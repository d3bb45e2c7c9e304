//! Per-CPU RCU callback lists (Linux's `rcu_segcblist`, without its
//! segments): each callback waits on the CPU that queued it for the grace
//! period it needs, and runs on that CPU once that grace period ended. The
//! `rcu:data` hotplug step creates a CPU's list, and when the CPU dies
//! hands its callbacks to a live CPU (Linux's `rcutree_migrate_callbacks`)
//! and frees the list.
//!
//! The grace periods are the caller's: a callback carries the value of
//! `GracePeriods::snapshot` it was queued with, and is ready once
//! `GracePeriods::completed` reaches it.

use alloc::collections::VecDeque;
use alloc::vec::Vec;

use crate::percpu::PerCpu;
use crate::sync::{AtomicUsize, Ordering};

/// Every CPU's list of callbacks `C`, each with the grace period it waits
/// for.
///
/// ```
/// use hotkern_kernel::cblist::CallbackLists;
///
/// let lists = CallbackLists::new(2);
/// assert!(lists.create(0) && lists.create(1));
/// assert!(lists.call(1, 5, "free the old domains").is_ok());
/// assert!(!lists.has_ready(1, 4), "grace period 5 has not ended");
/// assert_eq!(lists.migrate(1, 0), 1, "cpu 1 died: its callback moves");
/// assert!(lists.free(1));
/// assert_eq!(lists.take_ready(0, 5), ["free the old domains"]);
/// ```
pub struct CallbackLists<C> {
    lists: PerCpu<VecDeque<(u64, C)>>,
    /// Callbacks queued on each CPU, read without its lock.
    pending: alloc::boxed::Box<[AtomicUsize]>,
}

impl<C> CallbackLists<C> {
    /// No list yet on any of `cpus` CPUs.
    pub fn new(cpus: usize) -> Self {
        CallbackLists {
            lists: PerCpu::new(cpus),
            pending: (0..cpus).map(|_| AtomicUsize::new(0)).collect(),
        }
    }

    /// Creates `cpu`'s list; false if it has one.
    pub fn create(&self, cpu: usize) -> bool {
        self.lists.create(cpu, VecDeque::new)
    }

    /// Whether `cpu` has a list.
    pub fn exists(&self, cpu: usize) -> bool {
        self.lists.lock(cpu).is_some()
    }

    /// Frees `cpu`'s list; false (and nothing changes) if it has none or
    /// it still holds callbacks.
    pub fn free(&self, cpu: usize) -> bool {
        let mut list = self.lists.lock(cpu);
        if list.as_ref().is_none_or(|l| !l.is_empty()) {
            return false;
        }
        *list = None;
        true
    }

    /// Queues `callback` on `cpu` to run once grace period `gp` ended;
    /// gives it back if `cpu` has no list.
    pub fn call(&self, cpu: usize, gp: u64, callback: C) -> Result<(), C> {
        let mut list = self.lists.lock(cpu);
        let Some(list) = list.as_mut() else {
            return Err(callback);
        };
        // Callers' snapshots only grow, but a migrated list may hold later
        // ones: keep the list in grace-period order.
        let at = list.partition_point(|(waits, _)| *waits <= gp);
        list.insert(at, (gp, callback));
        self.pending[cpu].fetch_add(1, Ordering::SeqCst);
        Ok(())
    }

    /// Hands `cpu`'s callbacks to `heir`, their grace periods unchanged;
    /// returns how many moved (none if either has no list).
    pub fn migrate(&self, cpu: usize, heir: usize) -> usize {
        if cpu == heir {
            return 0;
        }
        let moved: Vec<(u64, C)> = match self.lists.lock(cpu).as_mut() {
            Some(list) if self.lists.lock(heir).is_some() => list.drain(..).collect(),
            _ => return 0,
        };
        let count = moved.len();
        self.pending[cpu].fetch_sub(count, Ordering::SeqCst);
        for (gp, callback) in moved {
            if let Err(callback) = self.call(heir, gp, callback) {
                // The heir lost its list meanwhile: put it back.
                let _ = self.call(cpu, gp, callback);
            }
        }
        count
    }

    /// Whether `cpu` has a callback whose grace period is at or before
    /// `completed`.
    pub fn has_ready(&self, cpu: usize, completed: u64) -> bool {
        if self.pending[cpu].load(Ordering::SeqCst) == 0 {
            return false;
        }
        let list = self.lists.lock(cpu);
        list.as_ref()
            .and_then(|list| list.front())
            .is_some_and(|(gp, _)| *gp <= completed)
    }

    /// Takes `cpu`'s callbacks whose grace period is at or before
    /// `completed`, oldest first.
    pub fn take_ready(&self, cpu: usize, completed: u64) -> Vec<C> {
        let mut ready = Vec::new();
        if let Some(list) = self.lists.lock(cpu).as_mut() {
            while list.front().is_some_and(|(gp, _)| *gp <= completed) {
                ready.extend(list.pop_front().map(|(_, callback)| callback));
            }
        }
        self.pending[cpu].fetch_sub(ready.len(), Ordering::SeqCst);
        ready
    }

    /// Frees `cpu`'s list whatever it holds, and returns what it held
    /// (`None`: it had no list): for a kernel that stops.
    pub fn take_all(&self, cpu: usize) -> Option<Vec<C>> {
        let list = self.lists.lock(cpu).take()?;
        self.pending[cpu].fetch_sub(list.len(), Ordering::SeqCst);
        Some(list.into_iter().map(|(_, callback)| callback).collect())
    }

    /// Callbacks queued on `cpu` (none on a CPU beyond the lists').
    pub fn pending(&self, cpu: usize) -> usize {
        self.pending
            .get(cpu)
            .map_or(0, |pending| pending.load(Ordering::SeqCst))
    }

    /// The number of CPUs the lists were made for.
    pub fn cpus(&self) -> usize {
        self.pending.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;

    #[test]
    fn callbacks_run_in_grace_period_order_and_survive_migration() {
        let lists = CallbackLists::new(3);
        assert!(lists.create(0) && lists.create(1) && !lists.create(1));
        lists.call(0, 2, 'a').unwrap();
        lists.call(1, 1, 'b').unwrap();
        lists.call(1, 3, 'c').unwrap();
        assert!(!lists.free(1), "a list holding callbacks is not freed");
        assert_eq!(lists.migrate(1, 2), 0, "cpu 2 has no list");
        assert_eq!(lists.migrate(1, 0), 2);
        assert_eq!((lists.pending(0), lists.pending(1)), (3, 0));
        assert!(lists.free(1));
        assert_eq!(lists.call(1, 4, 'd'), Err('d'));
        assert_eq!(lists.take_ready(0, 2), ['b', 'a']);
        assert!(!lists.has_ready(0, 2) && lists.has_ready(0, 3));
        assert_eq!(lists.take_ready(0, 3), ['c']);
        assert_eq!(lists.pending(0), 0);
        lists.call(0, 9, 'e').unwrap();
        assert_eq!(lists.take_all(0), Some(vec!['e']));
        assert_eq!((lists.take_all(0), lists.pending(0)), (None, 0));
        assert_eq!((lists.cpus(), lists.pending(7)), (3, 0));
    }
}
