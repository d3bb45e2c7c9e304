//! Per-CPU page caches (Linux's per-CPU page lists): a CPU allocates and
//! frees page frames through its own cache without touching the shared
//! pool, refills it a batch at a time, and returns a batch when it grows past
//! its high mark. A CPU going offline drains its cache back to the pool.

use std::sync::atomic::{AtomicI64, Ordering};

use parking_lot::Mutex;

use crate::frames::FramePool;

/// Frames moved between a cache and the pool at once (Linux's default `batch`).
pub(crate) const BATCH: usize = 63;
/// A cache holding more than this returns a batch to the pool.
pub(crate) const HIGH: usize = 6 * BATCH;

pub(crate) struct PageCaches {
    caches: Box<[Mutex<Option<Vec<u64>>>]>,
    pub(crate) pool: FramePool,
    /// Frames handed out and not yet freed.
    held: AtomicI64,
}

impl PageCaches {
    pub(crate) fn new(cpus: usize, pool: FramePool) -> Self {
        PageCaches {
            caches: (0..cpus).map(|_| Mutex::new(None)).collect(),
            pool,
            held: AtomicI64::new(0),
        }
    }

    /// Creates `cpu`'s empty cache; false if it exists.
    pub(crate) fn create(&self, cpu: usize) -> bool {
        let mut cache = self.caches[cpu].lock();
        if cache.is_some() {
            return false;
        }
        *cache = Some(Vec::with_capacity(HIGH + BATCH));
        true
    }

    pub(crate) fn exists(&self, cpu: usize) -> bool {
        self.caches[cpu].lock().is_some()
    }

    /// Returns every frame of `cpu`'s cache to the pool, keeping the
    /// (empty) cache; the number of frames returned.
    pub(crate) fn drain(&self, cpu: usize) -> usize {
        let mut cache = self.caches[cpu].lock();
        let Some(frames) = cache.as_mut() else {
            return 0;
        };
        let count = frames.len();
        self.pool.give_back(frames);
        frames.clear();
        count
    }

    /// Frees `cpu`'s cache after draining it; false if there was none.
    pub(crate) fn free(&self, cpu: usize) -> bool {
        let Some(frames) = self.caches[cpu].lock().take() else {
            return false;
        };
        self.pool.give_back(&frames);
        true
    }

    /// Takes a frame through `cpu`'s cache.
    pub(crate) fn alloc(&self, cpu: usize) -> Option<u64> {
        let mut cache = self.caches[cpu].lock();
        let frame = match cache.as_mut() {
            Some(frames) => {
                if frames.is_empty() {
                    frames.extend(self.pool.take(BATCH));
                }
                frames.pop()
            }
            None => {
                drop(cache);
                self.pool.take(1).pop()
            }
        };
        if frame.is_some() {
            self.held.fetch_add(1, Ordering::Relaxed);
        }
        frame
    }

    /// Frames handed out and not freed yet.
    pub(crate) fn held(&self) -> i64 {
        self.held.load(Ordering::Relaxed)
    }

    /// Returns a frame through `cpu`'s cache.
    pub(crate) fn free_frame(&self, cpu: usize, frame: u64) {
        self.held.fetch_sub(1, Ordering::Relaxed);
        let mut cache = self.caches[cpu].lock();
        match cache.as_mut() {
            Some(frames) => {
                frames.push(frame);
                if frames.len() > HIGH {
                    let spill = frames.split_off(frames.len() - BATCH);
                    self.pool.give_back(&spill);
                }
            }
            None => {
                drop(cache);
                self.pool.give_back(&[frame]);
            }
        }
    }

    /// Frames sitting in `cpu`'s cache.
    pub(crate) fn cached(&self, cpu: usize) -> usize {
        self.caches[cpu].lock().as_ref().map_or(0, Vec::len)
    }
}
