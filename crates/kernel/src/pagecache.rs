//! Per-CPU page caches (Linux's per-CPU page lists): a CPU allocates and
//! frees page frames through its own cache without touching the shared
//! pool, refills it a batch at a time, and returns a batch when it grows past
//! its high mark. A CPU going offline drains its cache back to the pool.

use alloc::vec::Vec;

use hotkern_physmem::Pfn;

use crate::frames::FramePool;
use crate::percpu::PerCpu;
use crate::sync::{AtomicI64, Ordering};

/// Frames moved between a cache and the pool at once (Linux's default `batch`).
pub const BATCH: usize = 63;
/// A cache holding more than this returns a batch to the pool.
pub const HIGH: usize = 6 * BATCH;

/// One CPU's cache. A kept cache (Bolt) stays allocated while its CPU is
/// offline but is disabled: it is used only between its step's startup
/// and teardown, so it holds nothing when the step is down.
struct Cache {
    frames: Vec<Pfn>,
    enabled: bool,
}

/// Every CPU's page cache over one [`FramePool`].
///
/// ```
/// use hotkern_kernel::frames::FramePool;
/// use hotkern_kernel::pagecache::{PageCaches, BATCH};
/// use hotkern_physmem::{PageCount, Pfn};
///
/// let caches = PageCaches::new(2, FramePool::new(Pfn(0), PageCount(1024))?);
/// caches.create(1);
/// let frame = caches.alloc(1).expect("memory");
/// assert_eq!(caches.cached(1), BATCH - 1, "a batch came in, one went out");
/// caches.free_frame(1, frame);
/// assert_eq!(caches.drain(1), BATCH, "offline: all back to the pool");
/// # Ok::<(), hotkern_physmem::PhysmemError>(())
/// ```
pub struct PageCaches {
    caches: PerCpu<Cache>,
    pool: FramePool,
    /// Frames handed out and not yet freed.
    held: AtomicI64,
}

impl PageCaches {
    /// No cache yet on any of `cpus` CPUs; frames come from `pool`.
    pub fn new(cpus: usize, pool: FramePool) -> Self {
        PageCaches {
            caches: PerCpu::new(cpus),
            pool,
            held: AtomicI64::new(0),
        }
    }

    /// Enables `cpu`'s cache, creating it unless it was kept, and fills it
    /// with a batch of frames so the CPU's first allocations do not go to
    /// the shared pool; returns whether it was created.
    pub fn create(&self, cpu: usize) -> bool {
        let mut cache = self.caches.lock(cpu);
        let created = cache.is_none();
        let cache = cache.get_or_insert_with(|| Cache {
            frames: Vec::with_capacity(HIGH + BATCH),
            enabled: false,
        });
        if !cache.enabled {
            cache.enabled = true;
            if cache.frames.is_empty() {
                cache.frames.extend(self.pool.take(BATCH));
            }
        }
        created
    }

    /// The shared pool the caches draw from.
    pub fn pool(&self) -> &FramePool {
        &self.pool
    }

    /// Whether `cpu`'s cache is in use.
    pub fn is_enabled(&self, cpu: usize) -> bool {
        self.caches.with(cpu, |c| c.enabled).unwrap_or(false)
    }

    /// Disables `cpu`'s cache and returns its frames to the pool, keeping
    /// the (empty) cache; the number of frames returned.
    pub fn drain(&self, cpu: usize) -> usize {
        let mut cache = self.caches.lock(cpu);
        let Some(cache) = cache.as_mut() else {
            return 0;
        };
        cache.enabled = false;
        let count = cache.frames.len();
        self.pool.give_back(&cache.frames);
        cache.frames.clear();
        count
    }

    /// Frees `cpu`'s cache after draining it; false if there was none.
    pub fn free(&self, cpu: usize) -> bool {
        let Some(cache) = self.caches.free(cpu) else {
            return false;
        };
        self.pool.give_back(&cache.frames);
        true
    }

    /// Takes a frame through `cpu`'s cache.
    pub fn alloc(&self, cpu: usize) -> Option<Pfn> {
        // Every path holds the CPU's cache lock while frames move, so that
        // `accounting` (which holds every cache lock) sees no frame in flight.
        let mut cache = self.caches.lock(cpu);
        let frame = match cache.as_mut().filter(|c| c.enabled) {
            Some(cache) => {
                if cache.frames.is_empty() {
                    cache.frames.extend(self.pool.take(BATCH));
                }
                cache.frames.pop()
            }
            None => self.pool.take(1).pop(),
        };
        if frame.is_some() {
            self.held.fetch_add(1, Ordering::Relaxed);
        }
        frame
    }

    /// Returns a frame through `cpu`'s cache.
    pub fn free_frame(&self, cpu: usize, frame: Pfn) {
        let mut cache = self.caches.lock(cpu);
        self.held.fetch_sub(1, Ordering::Relaxed);
        match cache.as_mut().filter(|c| c.enabled) {
            Some(cache) => {
                cache.frames.push(frame);
                if cache.frames.len() > HIGH {
                    let spill = cache.frames.split_off(cache.frames.len() - BATCH);
                    self.pool.give_back(&spill);
                }
            }
            None => self.pool.give_back(&[frame]),
        }
    }

    /// (free in the pool, sitting in caches, held by users), read at one
    /// instant: every cache lock is held while counting.
    pub fn accounting(&self) -> (u64, u64, i64) {
        let caches: Vec<_> = self.caches.lock_all().collect();
        let cached = caches
            .iter()
            .map(|c| c.as_ref().map_or(0, |c| c.frames.len() as u64))
            .sum();
        let free = self.pool.free_frames();
        let held = self.held.load(Ordering::Relaxed);
        drop(caches);
        (free, cached, held)
    }

    /// Frames sitting in `cpu`'s cache.
    pub fn cached(&self, cpu: usize) -> usize {
        self.caches.with(cpu, |c| c.frames.len()).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cache_refills_by_batch_spills_past_high_and_drains_to_the_pool() {
        let pool = FramePool::new(Pfn(0), hotkern_physmem::PageCount(1024)).unwrap();
        let caches = PageCaches::new(2, pool);
        let frame = caches.alloc(0).unwrap();
        assert_eq!(
            caches.accounting(),
            (1023, 0, 1),
            "no cache: straight from the pool"
        );
        caches.free_frame(0, frame);
        assert!(caches.create(0) && !caches.create(0));
        assert_eq!(caches.cached(0), BATCH, "filled with a batch");
        let frame = caches.alloc(0).unwrap();
        assert_eq!(caches.cached(0), BATCH - 1);
        caches.free_frame(0, frame);
        let held: Vec<Pfn> = (0..HIGH + 10).filter_map(|_| caches.alloc(1)).collect();
        for frame in held {
            caches.free_frame(0, frame);
        }
        assert!(
            caches.cached(0) <= HIGH,
            "spilled a batch past the high mark"
        );
        let (free, cached, users) = caches.accounting();
        assert_eq!((free + cached, users), (1024, 0));
        assert_eq!(caches.drain(0), cached as usize);
        assert!(!caches.is_enabled(0) && caches.cached(0) == 0);
        assert!(caches.free(0) && !caches.free(0));
        assert_eq!(caches.pool.free_frames(), 1024);
        assert_eq!(caches.pool.bad_returns(), 0);
    }
}
