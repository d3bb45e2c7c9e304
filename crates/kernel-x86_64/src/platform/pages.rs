//! Page frames for the tasks (which touch them, `runs/tasks.rs`): real frames hot-unplugged from the kernel's
//! physmem into a frame pool, with per-CPU page caches in front of it —
//! the shared core's `FramePool` (its own physmem, one descriptor per
//! frame, a frame given back twice caught) and `PageCaches` (Linux's
//! per-CPU page lists), the same code the user-mode machine's tasks
//! allocate through. The `mm:pagecache` hotplug step creates, drains and
//! frees each CPU's cache.

use hotkern_kernel::frames::FramePool;
use hotkern_physmem::{PageCount, Pfn};

use crate::arch::cpu;
use crate::arch::memory::PHYSMEM;
use crate::arch::ranges::PAGE_SIZE;
use crate::platform::Kernel;

/// Frames the pool takes: 4 MiB.
pub const POOL_FRAMES: u64 = 1024;
/// The first frame above the boot identity map: pool frames must be
/// below it, since tasks write to them.
const IDENTITY_MAPPED: u64 = (4 << 30) / PAGE_SIZE;

/// Why the pool could not be set up.
#[derive(Debug)]
pub enum PagesError {
    /// No segment below 4 GiB holds the pool's frames.
    NoRoom,
    /// physmem refused the unplug or the pool's plug.
    Physmem(hotkern_physmem::PhysmemError),
}

impl core::fmt::Display for PagesError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            PagesError::NoRoom => write!(f, "no segment below 4 GiB holds {POOL_FRAMES} frames"),
            PagesError::Physmem(error) => write!(f, "physmem: {error}"),
        }
    }
}

impl core::error::Error for PagesError {}

/// Takes the top [`POOL_FRAMES`] frames of the largest identity-mapped
/// segment out of the kernel's physmem (a hot-unplug, then reclaim once no
/// reader holds them) and makes the pool and the caches over them.
pub fn init() -> Result<(), PagesError> {
    let first = {
        let guard = PHYSMEM.read_on(cpu::current().id() as usize);
        let segment = guard
            .segments()
            .filter(|s| s.end().0 <= IDENTITY_MAPPED && s.len().0 > 2 * POOL_FRAMES)
            .max_by_key(|s| s.len().0)
            .ok_or(PagesError::NoRoom)?;
        segment.end().0 - POOL_FRAMES
    };
    PHYSMEM
        .unplug(Pfn(first), PageCount(POOL_FRAMES))
        .map_err(PagesError::Physmem)?;
    PHYSMEM.reclaim();
    let pool = FramePool::new(Pfn(first), PageCount(POOL_FRAMES)).map_err(PagesError::Physmem)?;
    Kernel::set_pages(pool);
    Ok(())
}
