//! Per-CPU workqueue pools: work queued on a CPU runs on that CPU's
//! `kworker`; when the CPU goes offline its pool is unbound and the pending
//! work moves to a CPU that stays.

use alloc::collections::VecDeque;
use alloc::vec::Vec;

use crate::percpu::PerCpu;

/// A work item: a job `J` and its ledger id.
pub struct Work<J> {
    /// Its ledger id.
    pub id: u64,
    /// What runs.
    pub job: J,
}

struct Pool<J> {
    items: VecDeque<Work<J>>,
    /// Accepts and runs work only while bound to its online CPU.
    bound: bool,
}

/// Every CPU's worker pool, each created and freed by the CPU's hotplug
/// steps and bound only while the CPU is online.
///
/// ```
/// use hotkern_kernel::workqueue::{Work, Workqueue};
///
/// let queue = Workqueue::new(1);
/// queue.create(0);
/// assert!(queue.queue(0, Work { id: 0, job: "flush" }).is_err(), "not bound");
/// queue.bind(0);
/// assert!(queue.queue(0, Work { id: 0, job: "flush" }).is_ok());
/// assert_eq!(queue.next(0).map(|w| w.job), Some("flush"));
/// ```
pub struct Workqueue<J> {
    pools: PerCpu<Pool<J>>,
}

impl<J> Workqueue<J> {
    /// No pool yet on any of `cpus` CPUs.
    pub fn new(cpus: usize) -> Self {
        Workqueue {
            pools: PerCpu::new(cpus),
        }
    }

    /// Creates `cpu`'s (unbound) pool; false if it exists.
    pub fn create(&self, cpu: usize) -> bool {
        self.pools.create(cpu, || Pool {
            items: VecDeque::new(),
            bound: false,
        })
    }

    /// Frees `cpu`'s pool; returns work it still held, or `None` if there was no pool.
    pub fn free(&self, cpu: usize) -> Option<Vec<Work<J>>> {
        self.pools
            .free(cpu)
            .map(|pool| pool.items.into_iter().collect())
    }

    /// Binds `cpu`'s pool to its CPU; false if there is no pool.
    pub fn bind(&self, cpu: usize) -> bool {
        self.pools.with(cpu, |pool| pool.bound = true).is_some()
    }

    /// Unbinds `cpu`'s pool and takes its pending work; `None` if no pool.
    pub fn unbind(&self, cpu: usize) -> Option<Vec<Work<J>>> {
        self.pools.with(cpu, |pool| {
            pool.bound = false;
            pool.items.drain(..).collect()
        })
    }

    /// Whether `cpu`'s pool takes and runs work.
    pub fn is_bound(&self, cpu: usize) -> bool {
        self.pools.with(cpu, |p| p.bound).unwrap_or(false)
    }

    /// Queues `work` on `cpu`; gives it back if that pool is not bound.
    pub fn queue(&self, cpu: usize, work: Work<J>) -> Result<(), Work<J>> {
        match self.pools.lock(cpu).as_mut() {
            Some(pool) if pool.bound => {
                pool.items.push_back(work);
                Ok(())
            }
            _ => Err(work),
        }
    }

    /// Whether `cpu` has work to run.
    pub fn has_work(&self, cpu: usize) -> bool {
        self.pools
            .with(cpu, |p| p.bound && !p.items.is_empty())
            .unwrap_or(false)
    }

    /// Takes the next item of `cpu`'s pool.
    pub fn next(&self, cpu: usize) -> Option<Work<J>> {
        self.pools
            .with(cpu, |p| if p.bound { p.items.pop_front() } else { None })
            .flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn work(id: u64) -> Work<()> {
        Work { id, job: () }
    }

    #[test]
    fn only_a_bound_pool_takes_work_and_unbinding_hands_it_over() {
        let queue = Workqueue::new(2);
        assert!(queue.queue(0, work(1)).is_err(), "no pool yet");
        assert!(queue.create(0) && !queue.create(0));
        assert!(queue.queue(0, work(1)).is_err(), "not bound yet");
        assert!(queue.bind(0) && !queue.bind(1));
        assert!(queue.queue(0, work(1)).is_ok() && queue.queue(0, work(2)).is_ok());
        assert!(queue.has_work(0) && queue.is_bound(0));
        assert_eq!(queue.next(0).map(|w| w.id), Some(1));
        let handed: Vec<u64> = queue.unbind(0).unwrap().iter().map(|w| w.id).collect();
        assert_eq!(handed, [2]);
        assert!(!queue.has_work(0) && !queue.is_bound(0));
        assert!(queue.queue(0, work(3)).is_err(), "unbound refuses");
        assert_eq!(queue.free(0).map(|left| left.len()), Some(0));
        assert!(queue.free(0).is_none());
    }
}
