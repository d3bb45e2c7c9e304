//! Per-CPU workqueue pools: work queued on a CPU runs on that CPU's
//! `kworker`; when the CPU goes offline its pool is unbound and the pending
//! work moves to a CPU that stays.

use std::collections::VecDeque;

use parking_lot::Mutex;

use crate::task::Job;

pub(crate) struct Work {
    pub(crate) id: u64,
    pub(crate) job: Job,
}

#[derive(Default)]
struct Pool {
    items: VecDeque<Work>,
    /// Accepts and runs work only while bound to its online CPU.
    bound: bool,
}

pub(crate) struct Workqueue {
    pools: Box<[Mutex<Option<Pool>>]>,
}

impl Workqueue {
    pub(crate) fn new(cpus: usize) -> Self {
        Workqueue {
            pools: (0..cpus).map(|_| Mutex::new(None)).collect(),
        }
    }

    /// Creates `cpu`'s (unbound) pool; false if it exists.
    pub(crate) fn create(&self, cpu: usize) -> bool {
        let mut pool = self.pools[cpu].lock();
        if pool.is_some() {
            return false;
        }
        *pool = Some(Pool::default());
        true
    }

    /// Frees `cpu`'s pool; returns work it still held, or `None` if there was no pool.
    pub(crate) fn free(&self, cpu: usize) -> Option<Vec<Work>> {
        self.pools[cpu]
            .lock()
            .take()
            .map(|pool| pool.items.into_iter().collect())
    }

    /// Binds `cpu`'s pool to its CPU; false if there is no pool.
    pub(crate) fn bind(&self, cpu: usize) -> bool {
        match self.pools[cpu].lock().as_mut() {
            Some(pool) => {
                pool.bound = true;
                true
            }
            None => false,
        }
    }

    /// Unbinds `cpu`'s pool and takes its pending work; `None` if no pool.
    pub(crate) fn unbind(&self, cpu: usize) -> Option<Vec<Work>> {
        self.pools[cpu].lock().as_mut().map(|pool| {
            pool.bound = false;
            pool.items.drain(..).collect()
        })
    }

    pub(crate) fn is_bound(&self, cpu: usize) -> bool {
        self.pools[cpu].lock().as_ref().is_some_and(|p| p.bound)
    }

    /// Queues `work` on `cpu`; gives it back if that pool is not bound.
    pub(crate) fn queue(&self, cpu: usize, work: Work) -> Result<(), Work> {
        match self.pools[cpu].lock().as_mut() {
            Some(pool) if pool.bound => {
                pool.items.push_back(work);
                Ok(())
            }
            _ => Err(work),
        }
    }

    /// Whether `cpu` has work to run.
    pub(crate) fn has_work(&self, cpu: usize) -> bool {
        self.pools[cpu]
            .lock()
            .as_ref()
            .is_some_and(|p| p.bound && !p.items.is_empty())
    }

    /// Takes the next item of `cpu`'s pool.
    pub(crate) fn next(&self, cpu: usize) -> Option<Work> {
        self.pools[cpu]
            .lock()
            .as_mut()
            .filter(|p| p.bound)
            .and_then(|p| p.items.pop_front())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn work(id: u64) -> Work {
        Work {
            id,
            job: Box::new(|_| {}),
        }
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
