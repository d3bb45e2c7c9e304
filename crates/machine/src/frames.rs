//! The machine's pool of free page frames, the memory the per-CPU page
//! caches draw from. It knows which frames are free, so a frame given back
//! twice or one it never handed out is caught rather than duplicated.

use parking_lot::Mutex;

struct Inner {
    /// Free frames, taken from the end.
    free: Vec<u64>,
    /// One bit per frame of the range: set while the frame is free.
    is_free: Vec<u64>,
    bad_returns: u64,
}

/// Free page frames of one physical range.
pub(crate) struct FramePool {
    first: u64,
    frames: u64,
    inner: Mutex<Inner>,
}

impl FramePool {
    /// A pool holding every frame of `first..first + frames`.
    pub(crate) fn new(first: u64, frames: u64) -> Self {
        let words = frames.div_ceil(64) as usize;
        let mut is_free = vec![u64::MAX; words];
        if frames % 64 != 0 {
            if let Some(last) = is_free.last_mut() {
                *last = (1u64 << (frames % 64)) - 1;
            }
        }
        // Hand out low frames first.
        let free = (first..first + frames).rev().collect();
        FramePool {
            first,
            frames,
            inner: Mutex::new(Inner {
                free,
                is_free,
                bad_returns: 0,
            }),
        }
    }

    /// Takes up to `count` frames.
    pub(crate) fn take(&self, count: usize) -> Vec<u64> {
        let mut inner = self.inner.lock();
        let at = inner.free.len().saturating_sub(count);
        let taken = inner.free.split_off(at);
        for &frame in &taken {
            let bit = frame - self.first;
            inner.is_free[(bit / 64) as usize] &= !(1 << (bit % 64));
        }
        taken
    }

    /// Gives frames back; a frame that is already free or outside the
    /// range is refused and counted.
    pub(crate) fn give_back(&self, frames: &[u64]) {
        let mut inner = self.inner.lock();
        for &frame in frames {
            if frame < self.first || frame >= self.first + self.frames {
                inner.bad_returns += 1;
                continue;
            }
            let bit = frame - self.first;
            let (word, mask) = ((bit / 64) as usize, 1u64 << (bit % 64));
            if inner.is_free[word] & mask != 0 {
                inner.bad_returns += 1;
                continue;
            }
            inner.is_free[word] |= mask;
            inner.free.push(frame);
        }
    }

    /// Frames free in the pool.
    pub(crate) fn free_frames(&self) -> u64 {
        self.inner.lock().free.len() as u64
    }

    /// Frames in the range.
    pub(crate) fn total_frames(&self) -> u64 {
        self.frames
    }

    /// Frames given back twice or from outside the range.
    pub(crate) fn bad_returns(&self) -> u64 {
        self.inner.lock().bad_returns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn double_and_foreign_returns_are_refused() {
        let pool = FramePool::new(100, 70);
        let taken = pool.take(3);
        assert_eq!(taken.len(), 3);
        assert_eq!(pool.free_frames(), 67);
        pool.give_back(&taken);
        pool.give_back(&taken[..1]);
        pool.give_back(&[99, 170]);
        assert_eq!(pool.free_frames(), 70);
        assert_eq!(pool.bad_returns(), 3);
        assert_eq!(pool.take(100).len(), 70);
        assert!(pool.take(1).is_empty());
    }
}
