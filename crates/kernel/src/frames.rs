//! The kernel's pool of free page frames, the memory the per-CPU page
//! caches draw from. The memory is registered with [`hotkern_physmem`], as a
//! kernel plugs RAM: every frame has a page descriptor that physmem creates,
//! and every frame that moves in or out of the pool is looked up by PFN
//! (`PHYS_TO_VM_PAGE`) and its descriptor's state flipped atomically, so a
//! frame given back twice, or one no segment holds, is caught rather than
//! duplicated.

use alloc::vec::Vec;
use core::fmt;
use core::ptr::NonNull;

use hotkern_physmem::{Page, PageCount, Pfn, PhysAddr, Physmem, PhysmemError};

use crate::sync::{AtomicBool, Mutex, Ordering};

/// The pool's page descriptor (its `struct vm_page`).
pub struct FramePage {
    phys_addr: PhysAddr,
    /// In the free pool (not in a CPU cache, not held by a user).
    free: AtomicBool,
}

impl Page for FramePage {
    fn new(phys_addr: PhysAddr) -> Self {
        FramePage {
            phys_addr,
            free: AtomicBool::new(true),
        }
    }
}

impl fmt::Debug for FramePage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FramePage")
            .field("phys_addr", &self.phys_addr)
            .field("free", &self.free.load(Ordering::Relaxed))
            .finish()
    }
}

/// How many page frames a [`FramePool`] has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameCounts {
    /// Frames free in the shared pool (not in a CPU's page cache, not held
    /// by a task).
    pub free: PageCount,
    /// Frames plugged: the memory the kernel booted with and every hot-add.
    pub total: PageCount,
}

struct Inner {
    /// Free frames, taken from the end.
    free: Vec<Pfn>,
    total: u64,
    bad_returns: u64,
}

/// Free page frames of the memory plugged into the kernel.
///
/// ```
/// use hotkern_kernel::frames::FramePool;
/// use hotkern_physmem::{PageCount, Pfn};
///
/// let pool = FramePool::new(Pfn(256), PageCount(64))?;
/// let frames = pool.take(2);
/// assert_eq!(frames, [Pfn(257), Pfn(256)], "low frames first");
/// pool.give_back(&frames);
/// pool.give_back(&frames[..1]);
/// assert_eq!((pool.free_frames(), pool.bad_returns()), (64, 1), "caught, not duplicated");
/// # Ok::<(), hotkern_physmem::PhysmemError>(())
/// ```
pub struct FramePool {
    memory: Physmem<FramePage>,
    inner: Mutex<Inner>,
}

impl FramePool {
    /// A pool holding every frame of `first..first + frames`, plugged into
    /// physmem as one segment.
    pub fn new(first: Pfn, frames: PageCount) -> Result<Self, PhysmemError> {
        let pool = FramePool {
            memory: Physmem::initialized(),
            inner: Mutex::new(Inner {
                free: Vec::new(),
                total: 0,
                bad_returns: 0,
            }),
        };
        pool.plug(first, frames)?;
        Ok(pool)
    }

    /// Plugs `first..first + frames` (memory hot-add) and frees its frames
    /// into the pool. Refused, changing nothing, if it overlaps memory
    /// already plugged.
    pub fn plug(&self, first: Pfn, frames: PageCount) -> Result<(), PhysmemError> {
        let mut inner = self.inner.lock();
        self.memory.plug(first, frames)?;
        // Hand out low frames first.
        inner
            .free
            .extend((first.0..(first + frames).0).rev().map(Pfn));
        inner.total += frames.0;
        Ok(())
    }

    /// Plugs `first..first + frames` into physmem as a segment of its own
    /// *without* freeing its frames into the pool: memory another
    /// allocator hands out (a memory device's block, whose frames go to
    /// [`crate::blockframes::BlockFrames`]). Its descriptors say free, so
    /// a frame of it given back to the pool is refused and counted.
    ///
    /// ```
    /// use hotkern_kernel::frames::FramePool;
    /// use hotkern_physmem::{PageCount, Pfn};
    ///
    /// let pool = FramePool::new(Pfn(0), PageCount(16))?;
    /// pool.plug_unpooled(Pfn(64), PageCount(8))?;
    /// assert!(pool.holds(Pfn(70)) && pool.total_frames() == 16, "plugged, not pooled");
    /// pool.give_back(&[Pfn(70)]);
    /// assert_eq!(pool.bad_returns(), 1);
    /// pool.unplug_unpooled(Pfn(64), PageCount(8))?;
    /// assert!(!pool.holds(Pfn(70)));
    /// # Ok::<(), hotkern_physmem::PhysmemError>(())
    /// ```
    pub fn plug_unpooled(&self, first: Pfn, frames: PageCount) -> Result<(), PhysmemError> {
        self.memory.plug(first, frames).map(|_| ())
    }

    /// Frames at the front of a block of `frames` that its own
    /// descriptors fill ([`FramePool::plug_unpooled_on_memory`]).
    ///
    /// ```
    /// use hotkern_kernel::frames::FramePool;
    /// use hotkern_physmem::PageCount;
    ///
    /// assert!(FramePool::descriptor_frames(PageCount(512)).0 >= 1);
    /// ```
    pub fn descriptor_frames(frames: PageCount) -> PageCount {
        Physmem::<FramePage>::descriptor_frames(frames)
    }

    /// [`FramePool::plug_unpooled`] with the frames' descriptors in
    /// `memory`, the block's own first frames (physmem's
    /// `plug_on_memory`, Linux's `memmap_on_memory`): the plug takes no
    /// heap for them. One segment, unplugged whole.
    ///
    /// # Safety
    ///
    /// As physmem's `plug_on_memory`: `memory` is valid for writes of
    /// [`FramePool::descriptor_frames`] frames and used by nothing else
    /// until [`FramePool::released`] says the pool let it go.
    pub unsafe fn plug_unpooled_on_memory(
        &self,
        first: Pfn,
        frames: PageCount,
        memory: NonNull<u8>,
    ) -> Result<(), PhysmemError> {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.memory.plug_on_memory(first, frames, memory) }.map(|_| ())
    }

    /// Reclaims what no reader holds any more, then whether `memory`
    /// (given to [`FramePool::plug_unpooled_on_memory`]) is free to reuse.
    pub fn released(&self, memory: NonNull<u8>) -> bool {
        self.memory.reclaim();
        !self.memory.holds_memory(memory)
    }

    /// Unplugs what [`FramePool::plug_unpooled`] plugged (or part of it,
    /// within one segment). Refused, changing nothing, for frames of no
    /// segment.
    pub fn unplug_unpooled(&self, first: Pfn, frames: PageCount) -> Result<(), PhysmemError> {
        self.memory.unplug(first, frames)
    }

    /// Whether physmem's descriptor of `frame` names it: false for a
    /// frame no segment holds, or whose descriptor something else wrote
    /// over (descriptors on a block's own frames that another user was
    /// handed by mistake).
    ///
    /// ```
    /// use hotkern_kernel::frames::FramePool;
    /// use hotkern_physmem::{PageCount, Pfn};
    ///
    /// let pool = FramePool::new(Pfn(0), PageCount(16))?;
    /// assert!(pool.describes(Pfn(15)) && !pool.describes(Pfn(16)));
    /// # Ok::<(), hotkern_physmem::PhysmemError>(())
    /// ```
    pub fn describes(&self, frame: Pfn) -> bool {
        let guard = self.memory.read();
        guard
            .page(frame)
            .is_some_and(|page| page.phys_addr == frame.phys_addr())
    }

    /// Whether a physmem segment holds `frame` (a lookup, as
    /// `PHYS_TO_VM_PAGE` does).
    pub fn holds(&self, frame: Pfn) -> bool {
        self.memory.read().find(frame).is_some()
    }

    /// Takes up to `count` frames.
    pub fn take(&self, count: usize) -> Vec<Pfn> {
        let mut inner = self.inner.lock();
        let at = inner.free.len().saturating_sub(count);
        let taken = inner.free.split_off(at);
        let memory = self.memory.read();
        for &frame in &taken {
            if let Some(page) = memory.page(frame) {
                page.free.store(false, Ordering::Release);
            }
        }
        taken
    }

    /// Gives frames back; a frame that is already free or in no segment is
    /// refused and counted.
    pub fn give_back(&self, frames: &[Pfn]) {
        let mut inner = self.inner.lock();
        let memory = self.memory.read();
        for &frame in frames {
            let returned = memory
                .page(frame)
                .is_some_and(|page| !page.free.swap(true, Ordering::AcqRel));
            if returned {
                inner.free.push(frame);
            } else {
                inner.bad_returns += 1;
            }
        }
    }

    /// Frames free in the pool.
    pub fn free_frames(&self) -> u64 {
        self.inner.lock().free.len() as u64
    }

    /// Frames plugged.
    pub fn total_frames(&self) -> u64 {
        self.inner.lock().total
    }

    /// Free and plugged frames, read together.
    pub fn counts(&self) -> FrameCounts {
        let inner = self.inner.lock();
        FrameCounts {
            free: PageCount(inner.free.len() as u64),
            total: PageCount(inner.total),
        }
    }

    /// Frames given back twice or from outside the plugged memory.
    pub fn bad_returns(&self) -> u64 {
        self.inner.lock().bad_returns
    }

    /// Memory segments plugged.
    pub fn segments(&self) -> usize {
        self.memory.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn double_and_foreign_returns_are_refused() {
        let pool = FramePool::new(Pfn(100), PageCount(70)).unwrap();
        let taken = pool.take(3);
        assert_eq!(taken.len(), 3);
        assert_eq!(pool.free_frames(), 67);
        pool.give_back(&taken);
        pool.give_back(&taken[..1]);
        pool.give_back(&[Pfn(99), Pfn(170)]);
        assert_eq!(pool.free_frames(), 70);
        assert_eq!(pool.bad_returns(), 3);
        assert_eq!(pool.take(100).len(), 70);
        assert!(pool.take(1).is_empty());
    }

    #[test]
    fn hot_added_memory_joins_the_pool_and_overlaps_are_refused() {
        let pool = FramePool::new(Pfn(0), PageCount(16)).unwrap();
        assert!(pool.plug(Pfn(8), PageCount(16)).is_err());
        assert_eq!((pool.total_frames(), pool.segments()), (16, 1));
        pool.plug(Pfn(1000), PageCount(4)).unwrap();
        assert_eq!((pool.total_frames(), pool.segments()), (20, 2));
        let all = pool.take(20);
        assert!(all.contains(&Pfn(1003)) && all.contains(&Pfn(0)));
        pool.give_back(&all);
        assert_eq!((pool.free_frames(), pool.bad_returns()), (20, 0));
    }
}
