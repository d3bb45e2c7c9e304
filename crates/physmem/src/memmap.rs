//! Descriptors on the plugged memory itself, Linux's `memmap_on_memory`
//! (`mhp_supports_memmap_on_memory` in `mm/memory_hotplug.c`, the
//! `vmemmap` pages at the start of a `memory_block`): a hot-added block's
//! page descriptors live in its own first frames, so growing needs no heap
//! for them, however much is plugged.
//!
//! The frames that hold the descriptors stay in the segment (a lookup of
//! them finds their descriptors, as Linux's vmemmap pages have struct
//! pages) but outside its avail range, so no page allocator hands them
//! out. Their slab is the plug's alone: no other plug carves
//! descriptors from it (those would vanish with this block). One plug may
//! span many blocks (a 128 MiB run keeps all its descriptors in its first
//! 64 frames, and takes one segment's heap, not 64): any part of it may be
//! unplugged first, its descriptors staying in the slab, but the part with
//! the descriptor frames goes last, whole, with the plug's last segment
//! ([`PhysmemError::DescriptorsOnMemory`]), as Linux removes a
//! memmap_on_memory block's vmemmap pages after its other pages.

use core::mem::{align_of, size_of};
use core::ptr::{self, NonNull};

use lock_api::RawMutex;

use crate::error::PhysmemError;
use crate::page::Page;
use crate::physmem::{checked_end, Physmem};
use crate::table::Record;
use crate::types::{FreeList, PageCount, Pfn, SegmentHandle, PAGE_SIZE};

impl<P: Page, R: RawMutex, const BOOT: usize> Physmem<P, R, BOOT> {
    /// Frames at the front of a block of `npages` that its own descriptors
    /// fill.
    ///
    /// ```
    /// use hotkern_physmem::{BasicPage, PageCount, Physmem};
    ///
    /// // 8-byte descriptors: 512 of them to a 4 KiB frame.
    /// let frames = Physmem::<BasicPage>::descriptor_frames(PageCount(32768));
    /// assert_eq!(frames, PageCount(64));
    /// ```
    pub fn descriptor_frames(npages: PageCount) -> PageCount {
        let bytes = npages.0.saturating_mul(size_of::<P>() as u64);
        PageCount(bytes.div_ceil(PAGE_SIZE))
    }

    /// Plugs `npages` frames from `pfn` as [`plug`](Self::plug) does, but
    /// with their descriptors in `memory`: the block's own first
    /// [`descriptor_frames`](Self::descriptor_frames) frames, as the kernel
    /// addresses them. Those frames are left out of the avail range. The
    /// descriptors are made here, not on first use, so the plug takes no
    /// heap for them.
    ///
    /// Refused, changing nothing, before [`init_pages`](Self::init_pages)
    /// ([`PhysmemError::NotInitialized`]), for a block its descriptors
    /// would fill ([`PhysmemError::BlockTooSmall`]), for memory not
    /// aligned for `P` ([`PhysmemError::MisalignedDescriptors`]), and for
    /// the reasons `plug` has.
    ///
    /// # Safety
    ///
    /// `memory` must be valid for writes of `descriptor_frames(npages)`
    /// frames and used by nothing else from this call until
    /// [`holds_memory`](Self::holds_memory) says physmem let it go (after
    /// the segment's unplug and a [`reclaim`](Self::reclaim) that no
    /// reader held up), or until the `Physmem` is dropped.
    ///
    /// ```
    /// use core::ptr::NonNull;
    /// use hotkern_physmem::{BasicPage, PageCount, Pfn, Physmem};
    ///
    /// // Stands in for the first frame of the block at frame 0x1000.
    /// let mut first_frame = vec![0u64; 512];
    /// let mem: Physmem<BasicPage> = Physmem::initialized();
    /// mem.plug(Pfn(0x100), PageCount(8))?; // not the last segment
    /// let memory = NonNull::new(first_frame.as_mut_ptr().cast()).unwrap();
    /// // SAFETY: the buffer outlives the segment and nothing else uses it.
    /// let handle = unsafe { mem.plug_on_memory(Pfn(0x1000), PageCount(512), memory)? };
    /// assert_eq!(mem.segment_info(handle)?.avail_start, Pfn(0x1001));
    /// mem.unplug(Pfn(0x1000), PageCount(512))?;
    /// mem.reclaim();
    /// assert!(!mem.holds_memory(memory));
    /// # Ok::<(), hotkern_physmem::PhysmemError>(())
    /// ```
    pub unsafe fn plug_on_memory(
        &self,
        pfn: Pfn,
        npages: PageCount,
        memory: NonNull<u8>,
    ) -> Result<SegmentHandle, PhysmemError> {
        let end = checked_end(pfn, npages)?;
        let descriptor_frames = Self::descriptor_frames(npages);
        if descriptor_frames.0 >= npages.0 {
            return Err(PhysmemError::BlockTooSmall {
                npages,
                descriptor_frames,
            });
        }
        if memory.as_ptr() as usize % align_of::<P>() != 0 {
            return Err(PhysmemError::MisalignedDescriptors);
        }
        let mut writer = self.writer.lock();
        if !writer.initialized {
            return Err(PhysmemError::NotInitialized);
        }
        let record = Record {
            start: pfn.0,
            end: end.0,
            avail_start: pfn.0 + descriptor_frames.0,
            avail_end: end.0,
            free_list: FreeList::DEFAULT,
            start_hint: 0,
            slab: 0,
            first: 0,
            deferred: ptr::null(),
        };
        self.insert(&mut writer, record, Some(memory.cast()))
    }

    /// Whether a live segment's descriptors are still in `memory` (given to
    /// [`plug_on_memory`](Self::plug_on_memory)): false once the segment
    /// was unplugged and a [`reclaim`](Self::reclaim) found no reader
    /// that could still reach them. Only then may the memory go.
    pub fn holds_memory(&self, memory: NonNull<u8>) -> bool {
        self.writer
            .lock()
            .slabs
            .holds_memory(memory.as_ptr().cast_const())
    }
}

#[cfg(test)]
mod tests {
    use alloc::vec;
    use alloc::vec::Vec;

    use crate::{BasicPage, PageCount, Pfn, Physmem, PhysmemError};

    use super::*;

    /// Stand-ins for a block's first frames, aligned for descriptors.
    fn frames(count: u64) -> Vec<u64> {
        vec![0u64; (count * PAGE_SIZE / 8) as usize]
    }

    fn at(buffer: &mut [u64]) -> NonNull<u8> {
        NonNull::new(buffer.as_mut_ptr().cast()).unwrap()
    }

    #[test]
    fn descriptors_live_in_the_given_frames_which_are_never_available() {
        let npages = PageCount(4096);
        let needed = Physmem::<BasicPage>::descriptor_frames(npages);
        assert_eq!(
            needed,
            PageCount(4096 * size_of::<BasicPage>() as u64 / PAGE_SIZE)
        );
        // Declared before `mem`, so it outlives it.
        let mut buffer = frames(needed.0);
        let mem: Physmem<BasicPage> = Physmem::initialized();
        mem.plug(Pfn(0x100), PageCount(8)).unwrap();
        let range = buffer.as_ptr_range();
        let slabs = mem.slab_count();
        // SAFETY: the buffer outlives `mem`'s use of it (unplugged below).
        let handle = unsafe { mem.plug_on_memory(Pfn(0x10000), npages, at(&mut buffer)) }.unwrap();
        let info = mem.segment_info(handle).unwrap();
        assert_eq!(info.start, Pfn(0x10000));
        assert_eq!(info.avail_start, Pfn(0x10000 + needed.0));
        assert_eq!(info.avail_end, Pfn(0x10000 + 4096));
        assert_eq!(mem.slab_count(), slabs + 1);
        let guard = mem.read();
        for pfn in [0x10000, 0x10000 + needed.0, 0x10000 + 4095] {
            let page = guard.page(Pfn(pfn)).unwrap();
            assert_eq!(page.phys_addr, Pfn(pfn).phys_addr());
            let address = ptr::from_ref(page).cast::<u64>();
            assert!(
                range.contains(&address),
                "descriptor of {pfn:#x} off the block"
            );
        }
        drop(guard);
        mem.unplug(Pfn(0x10000), npages).unwrap();
        mem.reclaim();
    }

    #[test]
    fn the_descriptor_frames_go_last_and_whole() {
        let npages = PageCount(1024);
        let mut buffer = frames(Physmem::<BasicPage>::descriptor_frames(npages).0);
        let memory = at(&mut buffer);
        let mem: Physmem<BasicPage> = Physmem::initialized();
        mem.plug(Pfn(0x100), PageCount(8)).unwrap();
        // SAFETY: the buffer outlives `mem`'s use of it.
        unsafe { mem.plug_on_memory(Pfn(0x2000), npages, memory) }.unwrap();
        // A middle part and the back go first: the descriptor frames (the
        // first two) stay, and with them the other pieces' descriptors.
        mem.unplug(Pfn(0x2000 + 256), PageCount(256)).unwrap();
        mem.unplug(Pfn(0x2000 + 768), PageCount(256)).unwrap();
        mem.reclaim();
        assert!(mem.holds_memory(memory));
        assert!(mem.read().page(Pfn(0x2000 + 767)).is_some());
        // The front piece, holding the descriptors of the piece at 512, is
        // refused while that piece is plugged, whole or in part.
        let refused = Err(PhysmemError::DescriptorsOnMemory {
            start: Pfn(0x2000),
            end: Pfn(0x2000 + 256),
        });
        assert_eq!(mem.unplug(Pfn(0x2000), PageCount(256)), refused);
        assert_eq!(mem.unplug(Pfn(0x2000 + 1), PageCount(1)), refused);
        assert!(mem.read().page(Pfn(0x2000 + 1)).is_some());
        // Past the descriptor frames, the front piece may be cut.
        mem.unplug(Pfn(0x2000 + 2), PageCount(254)).unwrap();
        mem.unplug(Pfn(0x2000 + 512), PageCount(256)).unwrap();
        mem.unplug(Pfn(0x2000), PageCount(2)).unwrap();
        mem.reclaim();
        assert!(!mem.holds_memory(memory));
    }

    #[test]
    fn unplugging_the_block_gives_the_memory_back() {
        let npages = PageCount(1024);
        let mut buffer = frames(Physmem::<BasicPage>::descriptor_frames(npages).0);
        let memory = at(&mut buffer);
        let mem: Physmem<BasicPage> = Physmem::initialized();
        mem.plug(Pfn(0x100), PageCount(8)).unwrap();
        let slabs = mem.slab_count();
        // SAFETY: as above.
        unsafe { mem.plug_on_memory(Pfn(0x2000), npages, memory) }.unwrap();
        assert!(mem.holds_memory(memory));
        assert!(mem.read().page(Pfn(0x2000 + 1023)).is_some());
        // A reader still inside keeps the descriptors until it leaves.
        let guard = mem.read();
        mem.unplug(Pfn(0x2000), npages).unwrap();
        mem.reclaim();
        assert!(mem.holds_memory(memory));
        drop(guard);
        mem.reclaim();
        assert!(!mem.holds_memory(memory));
        assert_eq!(mem.slab_count(), slabs);
        // The same frames host the block's descriptors when it comes back.
        // SAFETY: physmem let the buffer go.
        unsafe { mem.plug_on_memory(Pfn(0x2000), npages, memory) }.unwrap();
        assert!(mem.holds_memory(memory));
    }

    #[test]
    fn other_plugs_never_take_descriptor_space_from_the_block() {
        let npages = PageCount(2048);
        let mut buffer = frames(Physmem::<BasicPage>::descriptor_frames(npages).0);
        let mem: Physmem<BasicPage> = Physmem::initialized();
        let range = buffer.as_ptr_range();
        // SAFETY: as above.
        unsafe { mem.plug_on_memory(Pfn(0x4000), npages, at(&mut buffer)) }.unwrap();
        mem.plug(Pfn(0x100), PageCount(8)).unwrap();
        let guard = mem.read();
        let page = guard.page(Pfn(0x100)).unwrap();
        assert!(!range.contains(&ptr::from_ref(page).cast::<u64>()));
    }

    #[test]
    fn a_block_its_descriptors_would_fill_is_refused_and_nothing_changes() {
        let mut buffer = frames(1);
        let mem: Physmem<BasicPage> = Physmem::initialized();
        let segments = mem.read().segments().count();
        // One frame's descriptor needs a whole frame of the block.
        // SAFETY: refused before any use of the buffer.
        let refused = unsafe { mem.plug_on_memory(Pfn(0x300), PageCount(1), at(&mut buffer)) };
        assert_eq!(
            refused,
            Err(PhysmemError::BlockTooSmall {
                npages: PageCount(1),
                descriptor_frames: PageCount(1)
            })
        );
        assert_eq!(mem.read().segments().count(), segments);
        assert!(mem.read().page(Pfn(0x300)).is_none());
    }

    #[test]
    fn misaligned_memory_and_a_plug_before_page_init_are_refused() {
        let mut buffer = frames(2);
        let mem: Physmem<BasicPage> = Physmem::initialized();
        let odd = NonNull::new(buffer.as_mut_ptr().cast::<u8>().wrapping_add(1)).unwrap();
        // SAFETY: refused before any use of the buffer.
        let misaligned = unsafe { mem.plug_on_memory(Pfn(0x500), PageCount(64), odd) };
        assert_eq!(misaligned, Err(PhysmemError::MisalignedDescriptors));
        let boot: Physmem<BasicPage> = Physmem::new();
        // SAFETY: as above.
        let early = unsafe { boot.plug_on_memory(Pfn(0x500), PageCount(64), at(&mut buffer)) };
        assert_eq!(early, Err(PhysmemError::NotInitialized));
        assert!(!mem.holds_memory(at(&mut buffer)));
    }
}
