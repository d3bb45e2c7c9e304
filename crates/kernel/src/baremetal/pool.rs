//! The task pool's frames on a bare-metal kernel: real frames
//! hot-unplugged from the kernel's own physmem into a [`FramePool`] (its
//! own physmem, one descriptor per frame, a frame given back twice
//! caught), with per-CPU page caches in front of it — the same code the
//! user-mode machine's tasks allocate through. The `mm:pagecache` hotplug
//! step creates, drains and frees each CPU's cache.

use core::fmt;

use hotkern_physmem::{Page, PageCount, Pfn, Physmem, PhysmemError};
use lock_api::RawMutex;

use super::{Arch, Kernel};
use crate::frames::FramePool;

/// Why the task pool could not be set up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PoolError {
    /// No segment below the limit holds the pool's frames (and as many
    /// again for the kernel).
    NoRoom {
        /// Frames asked for.
        frames: u64,
    },
    /// physmem refused the unplug or the pool's plug.
    Physmem(PhysmemError),
}

impl fmt::Display for PoolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PoolError::NoRoom { frames } => {
                write!(
                    f,
                    "no segment below the direct map's end holds {frames} frames"
                )
            }
            PoolError::Physmem(error) => write!(f, "physmem: {error}"),
        }
    }
}

impl core::error::Error for PoolError {}

impl<A: Arch> Kernel<A> {
    /// Takes the top `frames` frames of the largest segment of `physmem`
    /// that ends at or below `below` (memory the tasks can write through
    /// the boot's mapping) out of it — a hot-unplug, then reclaim once no
    /// reader holds them — and makes the task pool and its per-CPU caches
    /// over them. Nothing changes when no segment has room.
    pub fn take_task_pool<P: Page, R: RawMutex, const BOOT: usize>(
        physmem: &Physmem<P, R, BOOT>,
        below: Pfn,
        frames: u64,
    ) -> Result<(), PoolError> {
        let first = {
            let guard = physmem.read_on(A::current_cpu().index());
            let segment = guard
                .segments()
                .filter(|s| s.end() <= below && s.len().0 > 2 * frames)
                .max_by_key(|s| s.len().0)
                .ok_or(PoolError::NoRoom { frames })?;
            segment.end().0 - frames
        };
        physmem
            .unplug(Pfn(first), PageCount(frames))
            .map_err(PoolError::Physmem)?;
        physmem.reclaim();
        let pool = FramePool::new(Pfn(first), PageCount(frames)).map_err(PoolError::Physmem)?;
        Self::set_pages(pool);
        Ok(())
    }
}
