//! Slabs of page descriptors. Each slab is one heap allocation whose space
//! an [`Extent`] hands out to segments; a slab whose extent becomes unused is
//! released (NetBSD keeps them forever).

use alloc::alloc::{alloc, dealloc, Layout};
use alloc::vec::Vec;
use core::ptr::NonNull;

use crate::error::PhysmemError;
use crate::extent::Extent;
use crate::page::Page;
use crate::types::Pfn;

/// One allocation of descriptors and the extent carving it.
pub(crate) struct Slab<P> {
    base: NonNull<P>,
    capacity: u64,
    pub(crate) extent: Extent,
    /// Whether the heap holds the descriptors (else the caller's memory,
    /// Linux's `memmap_on_memory`: never freed here, never shared).
    pub(crate) owned: bool,
    /// Live segments whose descriptors are here, for a slab in the
    /// caller's memory: the frames holding them may go only with the last.
    pub(crate) pieces: u64,
}

// SAFETY: a slab owns its descriptors as a `Box<[P]>` would: moving it
// moves `P`s.
unsafe impl<P: Send> Send for Slab<P> {}
// SAFETY: as for `Box<[P]>`, shared access reads `P`s only; the one write
// through `&self`, `init`, is an `unsafe fn` whose caller guarantees no
// one else reaches the range.
unsafe impl<P: Sync> Sync for Slab<P> {}

impl<P: Page> Slab<P> {
    /// A slab of `capacity` uninitialised descriptors, all free.
    pub(crate) fn new(capacity: u64) -> Result<Self, PhysmemError> {
        let count = usize::try_from(capacity).map_err(|_| PhysmemError::DescriptorAllocation)?;
        let layout = Layout::array::<P>(count).map_err(|_| PhysmemError::DescriptorAllocation)?;
        let base = if layout.size() == 0 {
            NonNull::dangling()
        } else {
            // SAFETY: the layout has a non-zero size.
            NonNull::new(unsafe { alloc(layout) }.cast::<P>())
                .ok_or(PhysmemError::DescriptorAllocation)?
        };
        Ok(Slab {
            base,
            capacity,
            extent: Extent::new(capacity),
            owned: true,
            pieces: 0,
        })
    }

    /// A slab of `capacity` descriptors in the caller's memory at `base`.
    fn on_memory(base: NonNull<P>, capacity: u64) -> Self {
        Slab {
            base,
            capacity,
            extent: Extent::new(capacity),
            owned: false,
            pieces: 1,
        }
    }

    /// Descriptors the slab holds room for.
    pub(crate) fn capacity(&self) -> u64 {
        self.capacity
    }

    /// Pointer to descriptor `index`. Computing it is safe whatever the
    /// index (hence `wrapping_add`); whoever dereferences it vouches that
    /// it is in bounds.
    pub(crate) fn at(&self, index: u64) -> *mut P {
        debug_assert!(index <= self.capacity);
        self.base.as_ptr().wrapping_add(index as usize)
    }

    /// Initialises descriptors `[first, first + count)` for frames from `pfn`.
    ///
    /// # Safety
    /// The range must be allocated from the extent and not initialised.
    pub(crate) unsafe fn init(&self, first: u64, count: u64, pfn: Pfn) {
        for i in 0..count {
            // SAFETY: in bounds and uninitialised, per the contract.
            unsafe { self.at(first + i).write(P::new(Pfn(pfn.0 + i).phys_addr())) };
        }
    }

    /// Drops descriptors `[first, first + count)` and returns their space.
    ///
    /// # Safety
    /// The range must be initialised and no reader may still reach it.
    pub(crate) unsafe fn release(&mut self, first: u64, count: u64) {
        for i in 0..count {
            // SAFETY: initialised and unreachable, per the contract.
            unsafe { core::ptr::drop_in_place(self.at(first + i)) };
        }
        // The range was allocated, so freeing only fails if the free-region
        // list cannot grow; the space then stays unusable rather than wrong.
        let _ = self.extent.free(first, count);
    }
}

impl<P> Drop for Slab<P> {
    fn drop(&mut self) {
        if !self.owned {
            return;
        }
        if let Ok(layout) = Layout::array::<P>(self.capacity as usize) {
            if layout.size() != 0 {
                // SAFETY: allocated in `new` with this layout; descriptors
                // were dropped by `release` or by the owner's teardown.
                unsafe { dealloc(self.base.as_ptr().cast(), layout) };
            }
        }
    }
}

/// All slabs; ids are indices and stay put while the slab lives.
pub(crate) struct Slabs<P> {
    slabs: Vec<Option<Slab<P>>>,
    /// Ids of slabs with free space, sorted, so that a plug does not visit
    /// full ones.
    with_space: Vec<u32>,
    /// Ids of freed slabs, reused before the vector grows.
    free_ids: Vec<u32>,
}

impl<P: Page> Slabs<P> {
    pub(crate) const fn new() -> Self {
        Slabs {
            slabs: Vec::new(),
            with_space: Vec::new(),
            free_ids: Vec::new(),
        }
    }

    /// Whether slab `id` is in the caller's memory.
    pub(crate) fn on_memory(&self, id: u32) -> bool {
        matches!(self.slabs.get(id as usize), Some(Some(slab)) if !slab.owned)
    }

    /// Counts `delta` more live segments on slab `id` (a cut of one of its
    /// segments, or one's removal).
    pub(crate) fn add_pieces(&mut self, id: u32, delta: i64) {
        if let Some(Some(slab)) = self.slabs.get_mut(id as usize) {
            slab.pieces = slab.pieces.saturating_add_signed(delta);
        }
    }

    pub(crate) fn get(&self, id: u32) -> &Slab<P> {
        self.slabs[id as usize]
            .as_ref()
            .expect("a live segment's slab is live")
    }

    /// Number of live slabs.
    pub(crate) fn live(&self) -> usize {
        self.slabs.iter().filter(|s| s.is_some()).count()
    }

    /// Descriptor space for `count` pages: reuses free space in an existing
    /// slab first, else allocates a slab of exactly `count`.
    /// Returns (slab id, first index). Nothing changes on failure.
    pub(crate) fn alloc(&mut self, count: u64) -> Result<(u32, u64), PhysmemError> {
        for (at, &id) in self.with_space.iter().enumerate() {
            let Some(Some(slab)) = self.slabs.get_mut(id as usize) else {
                continue;
            };
            if let Ok(first) = slab.extent.alloc(count) {
                if slab.extent.free_units() == 0 {
                    self.with_space.remove(at);
                }
                return Ok((id, first));
            }
        }
        self.add(Slab::new(count)?, count)
    }

    /// Descriptor space for `count` pages in the caller's memory at `base`,
    /// a slab of its own that no other segment shares. Returns (slab id,
    /// first index). Nothing changes on failure.
    pub(crate) fn alloc_on_memory(
        &mut self,
        base: NonNull<P>,
        count: u64,
    ) -> Result<(u32, u64), PhysmemError> {
        self.add(Slab::on_memory(base, count), count)
    }

    /// Whether a live slab's descriptors are in the caller's memory at
    /// `base`.
    pub(crate) fn holds_memory(&self, base: *const u8) -> bool {
        self.slabs
            .iter()
            .flatten()
            .any(|slab| !slab.owned && slab.base.as_ptr().cast::<u8>().cast_const() == base)
    }

    /// Takes `slab` into the list with `count` of it allocated.
    fn add(&mut self, mut slab: Slab<P>, count: u64) -> Result<(u32, u64), PhysmemError> {
        // Room for every id that can exist, so that `settle` never allocates.
        let ids = self.slabs.len() + 1;
        self.slabs
            .try_reserve(1)
            .map_err(|_| PhysmemError::DescriptorAllocation)?;
        for list in [&mut self.free_ids, &mut self.with_space] {
            list.try_reserve(ids.saturating_sub(list.len()))
                .map_err(|_| PhysmemError::DescriptorAllocation)?;
        }
        let first = slab
            .extent
            .alloc(count)
            .map_err(|_| PhysmemError::DescriptorAllocation)?;
        let id = match self.free_ids.pop() {
            Some(id) => {
                let id = id as usize;
                self.slabs[id] = Some(slab);
                id
            }
            None => {
                self.slabs.push(Some(slab));
                self.slabs.len() - 1
            }
        };
        Ok((id as u32, first))
    }

    /// Drops descriptors and returns their space; frees the slab if unused.
    ///
    /// # Safety
    /// As [`Slab::release`].
    pub(crate) unsafe fn release(&mut self, id: u32, first: u64, count: u64) {
        let Some(Some(slab)) = self.slabs.get_mut(id as usize) else {
            return;
        };
        // SAFETY: forwarded contract.
        unsafe { slab.release(first, count) };
        self.settle(id);
    }

    /// Takes back space from [`alloc`](Self::alloc) whose descriptors were
    /// never initialised, because the write that wanted them failed: the
    /// slabs are as before it (a slab made for it is freed again).
    pub(crate) fn cancel(&mut self, id: u32, first: u64, count: u64) {
        let Some(Some(slab)) = self.slabs.get_mut(id as usize) else {
            return;
        };
        // Undoing an allocation needs no new free region: it either grows
        // the region it was cut from or puts back the one it used up, whose
        // room the region list still has.
        let _ = slab.extent.free(first, count);
        self.settle(id);
    }

    /// Room in slab `id` to free one more range without allocating, so that
    /// reclaiming an unplugged range cannot fail for want of memory.
    pub(crate) fn reserve_free(&mut self, id: u32) -> Result<(), PhysmemError> {
        match self.slabs.get_mut(id as usize) {
            Some(Some(slab)) => slab
                .extent
                .reserve(1)
                .map_err(|_| PhysmemError::OutOfMemory),
            _ => Ok(()),
        }
    }

    /// Lists or frees slab `id` after space went back to it. Allocates
    /// nothing: `alloc` keeps `with_space` and `free_ids` with room for
    /// every slab id.
    fn settle(&mut self, id: u32) {
        let Some(Some(slab)) = self.slabs.get(id as usize) else {
            return;
        };
        let listed = self.with_space.binary_search(&id);
        if slab.extent.is_unused() {
            self.slabs[id as usize] = None;
            if let Ok(at) = listed {
                self.with_space.remove(at);
            }
            self.free_ids.push(id);
        } else if let (Err(at), true) = (listed, slab.owned) {
            // A slab in the caller's memory is never listed: another
            // segment's descriptors must not land in frames that go with
            // this one.
            self.with_space.insert(at, id);
        }
    }
}
