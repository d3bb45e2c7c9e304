//! Per-CPU statistics (Linux's per-CPU vmstat and run-queue counters).
//!
//! Each CPU updates its own counters; any CPU reads any CPU's through an
//! RCU-protected pointer without a lock (load balancing reads every CPU's
//! `nr_running`). So retiring a CPU's counters takes a grace period before
//! they can be freed, and the values are folded into kernel-wide totals.
//! The grace period is the caller's (`retire` takes the platform's
//! `synchronize_rcu`), so both platforms share the counters and the fold.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::ptr;
use core::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

use hotkern_cpuhp::CpuSet;

use crate::sync::Mutex;

/// One CPU's counters.
#[derive(Default)]
pub struct CpuStats {
    /// Tasks waiting in the CPU's run queue, as the CPU last saw.
    pub nr_running: AtomicU64,
    /// Task slices run.
    pub slices: AtomicU64,
    /// Page frames allocated through the CPU's cache.
    pub pages_allocated: AtomicU64,
    /// Page frames freed through it.
    pub pages_freed: AtomicU64,
}

/// Kernel-wide sums of counters folded from retired CPUs.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Totals {
    /// Task slices run.
    pub slices: u64,
    /// Page frames allocated through per-CPU caches.
    pub pages_allocated: u64,
    /// Page frames freed through them.
    pub pages_freed: u64,
}

impl Totals {
    fn add(&mut self, stats: &CpuStats) {
        self.slices += stats.slices.load(Ordering::Relaxed);
        self.pages_allocated += stats.pages_allocated.load(Ordering::Relaxed);
        self.pages_freed += stats.pages_freed.load(Ordering::Relaxed);
    }
}

/// Every CPU's counters, created by its `mm:vmstat` step and retired after
/// a grace period.
///
/// ```
/// use core::sync::atomic::Ordering;
/// use hotkern_cpuhp::{CpuId, CpuSet};
/// use hotkern_kernel::vmstat::Vmstat;
///
/// let stats = Vmstat::new(2);
/// assert!(stats.create(1));
/// stats.with(1, |s| s.slices.fetch_add(3, Ordering::Relaxed));
/// let mut waited = false;
/// let one = CpuSet::single(CpuId(1));
/// assert_eq!(stats.retire(one, || waited = true), one);
/// assert!(waited, "freed only after a grace period");
/// assert_eq!(stats.sum().slices, 3, "folded, not lost");
/// ```
pub struct Vmstat {
    per_cpu: Box<[AtomicPtr<CpuStats>]>,
    folded: Mutex<Totals>,
}

impl Vmstat {
    /// No counters yet on any of `cpus` CPUs.
    pub fn new(cpus: usize) -> Self {
        Vmstat {
            per_cpu: (0..cpus).map(|_| AtomicPtr::new(ptr::null_mut())).collect(),
            folded: Mutex::new(Totals::default()),
        }
    }

    /// Publishes fresh counters for `cpu`; false if it has some.
    pub fn create(&self, cpu: usize) -> bool {
        let fresh = Box::into_raw(Box::default());
        match self.per_cpu[cpu].compare_exchange(
            ptr::null_mut(),
            fresh,
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => true,
            Err(_) => {
                // SAFETY: `fresh` was never published.
                drop(unsafe { Box::from_raw(fresh) });
                false
            }
        }
    }

    /// Whether `cpu` has counters.
    pub fn exists(&self, cpu: usize) -> bool {
        !self.per_cpu[cpu].load(Ordering::Acquire).is_null()
    }

    /// Runs `read` on `cpu`'s counters, if any. Only for code running on a
    /// CPU (between two quiescent states) or on the hotplug path.
    pub fn with<R>(&self, cpu: usize, read: impl FnOnce(&CpuStats) -> R) -> Option<R> {
        let stats = self.per_cpu.get(cpu)?.load(Ordering::Acquire);
        // SAFETY: a published pointer is freed only after a grace period
        // that began after it was unpublished; the caller is a CPU between
        // two quiescent states, or the hotplug path that alone retires.
        unsafe { stats.as_ref() }.map(read)
    }

    /// Unpublishes the counters of `cpus`, waits one grace period for the
    /// readers (`synchronize`, called once for all of them and only if
    /// some had counters), folds them into the totals and frees them.
    /// Returns the CPUs that had counters.
    pub fn retire(&self, cpus: CpuSet, synchronize: impl FnOnce()) -> CpuSet {
        let mut retired = Vec::new();
        let mut had = CpuSet::EMPTY;
        for cpu in cpus.iter() {
            let old = self.per_cpu[cpu.index()].swap(ptr::null_mut(), Ordering::AcqRel);
            if !old.is_null() {
                retired.push(old);
                had.insert(cpu);
            }
        }
        if retired.is_empty() {
            return had;
        }
        // Held across the grace period and the frees: `sum` callers that
        // are no CPU are excluded by this lock instead of by RCU.
        let mut totals = self.folded.lock();
        synchronize();
        for old in retired {
            // SAFETY: unpublished before a full grace period; no reader is left.
            let stats = unsafe { Box::from_raw(old) };
            totals.add(&stats);
        }
        had
    }

    /// Kernel-wide totals: the folded ones plus every live CPU's. Holds
    /// the fold lock, which `retire` holds while it frees, so any thread may
    /// call it.
    pub fn sum(&self) -> Totals {
        let folded = self.folded.lock();
        let mut totals = *folded;
        for cpu in 0..self.per_cpu.len() {
            self.with(cpu, |stats| totals.add(stats));
        }
        drop(folded);
        totals
    }
}

impl Drop for Vmstat {
    fn drop(&mut self) {
        for slot in self.per_cpu.iter() {
            let old = slot.swap(ptr::null_mut(), Ordering::AcqRel);
            if !old.is_null() {
                // SAFETY: dropping the kernel: no CPU runs any more.
                drop(unsafe { Box::from_raw(old) });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hotkern_cpuhp::CpuId;

    #[test]
    fn retired_counters_are_folded_not_lost() {
        let stats = Vmstat::new(2);
        assert!(stats.create(0) && stats.create(1) && !stats.create(1));
        stats.with(1, |s| s.slices.fetch_add(5, Ordering::Relaxed));
        stats.with(0, |s| s.pages_freed.fetch_add(2, Ordering::Relaxed));
        let one = CpuSet::single(CpuId(1));
        let mut grace_periods = 0;
        assert_eq!(stats.retire(one, || grace_periods += 1), one);
        assert!(!stats.exists(1));
        assert_eq!(stats.retire(one, || grace_periods += 1), CpuSet::EMPTY);
        assert_eq!(grace_periods, 1, "nothing to free, no grace period");
        let totals = stats.sum();
        assert_eq!((totals.slices, totals.pages_freed), (5, 2));
    }
}
