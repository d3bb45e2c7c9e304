//! Which blocks hold which runs' page descriptors, as the shared core's
//! `hotkern_kernel::runs` lays them out. A grow plugs a run of
//! blocks (up to [`RUN_BYTES`](super::RUN_BYTES)) as one physmem segment
//! whose descriptors live in the run's first frames (physmem's
//! `plug_on_memory`, Linux's `memmap_on_memory`), so physmem's heap grows
//! by one segment per run rather than one per block. A shrink may take any
//! block of a run, but the run's first block, the *holder*, only with the
//! last of its run: Linux likewise removes a memory block's vmemmap pages
//! after the pages they describe.

use alloc::vec::Vec;
use core::ptr::NonNull;

use hotkern_kernel::blockframes::Online;
use hotkern_physmem::{PageCount, Pfn};

use super::Device;
use crate::arch::memory::PHYSMEM;
use crate::arch::ranges::PAGE_SIZE;

impl Device {
    /// Frees what physmem's last write retired. For a region with its
    /// descriptors on its runs (one too large for the heap), waits a
    /// little for readers that still hold it: each write publishes a new
    /// index, and a resize that left the old ones to pile up while a
    /// reader on another CPU kept an epoch open could need several times
    /// the heap of one. A reader's section is a lookup, so the wait is
    /// short; one that never ends only leaves the heap as it was. A
    /// region small enough for heap descriptors does not wait: its
    /// indexes are small, and the default boot's shrink would pay for
    /// the wait (a vCPU the host preempts mid-lookup) in its physmem time.
    pub(super) fn settle(&self) {
        if !self.descriptors_on_block {
            PHYSMEM.reclaim();
            return;
        }
        for _ in 0..1u32 << 12 {
            PHYSMEM.reclaim();
            if PHYSMEM.pending_reclaim() == 0 {
                return;
            }
            core::hint::spin_loop();
        }
    }

    /// Records the run of `count` blocks from `first` as plugged (the
    /// shared core's [`Runs`](hotkern_kernel::runs::Runs): with its descriptors on `first` when the
    /// region keeps them on its blocks) and hands it to the allocator;
    /// false if the allocator refused.
    pub(super) fn add_run(&mut self, first: usize, count: usize) -> bool {
        let on_memory = self.descriptors_on_block;
        if self.runs.plugged(first, count, on_memory).is_err() {
            return false;
        }
        (first..first + count).all(|block| self.hand_over(block))
    }

    /// Hands `block` (plugged, in physmem) to the allocator. For a region
    /// with its descriptors on its runs, the block's bitmaps go where the
    /// runs layout puts them ([`Runs::maps`](hotkern_kernel::runs::Runs::maps): on its holder after the
    /// run's descriptors, or on its own first frame for a block plugged
    /// back with heap descriptors), at the holder's address: `map_range`
    /// maps plugged blocks at their physical address.
    pub(super) fn hand_over(&self, block: usize) -> bool {
        let blocks = self.hot.blocks();
        if !self.descriptors_on_block {
            return blocks.add_blocks_reserving(block, 1, Online::Movable, 0);
        }
        let place = self.runs.maps(block);
        let at = self.block_address(place.block) + place.offset;
        let maps = NonNull::new(at as *mut u64).unwrap_or(NonNull::dangling());
        // SAFETY: the holder's (or the block's own) reserved frames, mapped
        // while the holder is plugged, which a shrink unplugs only after
        // every block of its run was taken back; nothing else uses them.
        unsafe { blocks.add_blocks_with_maps(block, 1, Online::Movable, place.reserved, maps) }
    }

    /// Whether the frame `pfn` starts a block that holds its run's
    /// descriptors.
    pub(super) fn holds_descriptors(&self, pfn: u64) -> bool {
        let Some(offset) = (pfn * PAGE_SIZE).checked_sub(self.addr) else {
            return false;
        };
        offset % self.block == 0 && self.runs.is_holder((offset / self.block) as usize)
    }

    /// Drops from `taken` (sorted) the holders whose runs keep a plugged
    /// block outside it ([`Runs::keep_holders`](hotkern_kernel::runs::Runs::keep_holders)), handing them back to the
    /// allocator with their descriptor frames kept. Returns how many were
    /// kept.
    pub(super) fn keep_holders(&mut self, taken: &mut Vec<usize>) -> usize {
        let kept = self.runs.keep_holders(taken);
        for &index in &kept {
            self.hand_over(index);
        }
        kept.len()
    }

    /// Plugs back `pieces` (frame, count) that a failed shrink unplugged:
    /// each on its own first frames once physmem let the old descriptors
    /// go (or on the heap when the region keeps its descriptors there, or
    /// when physmem refuses the plug on memory).
    pub(super) fn replug(&mut self, pieces: &[(u64, u64)]) {
        let holders = pieces
            .iter()
            .filter(|&&(pfn, _)| self.holds_descriptors(pfn))
            .map(|&(pfn, _)| pfn * PAGE_SIZE);
        self.release_descriptors(holders);
        let on_memory = self.descriptors_on_block;
        for &(pfn, frames) in pieces {
            let first = ((pfn * PAGE_SIZE - self.addr) / self.block) as usize;
            let count = (frames / self.frames()) as usize;
            let address = pfn * PAGE_SIZE;
            // SAFETY: as in `plug_run`: the piece is plugged and mapped,
            // its blocks are out of the allocator, and physmem let go of
            // any descriptors on it.
            let replugged = on_memory
                && unsafe {
                    PHYSMEM.plug_on_memory(
                        Pfn(pfn),
                        PageCount(frames),
                        Self::descriptor_memory(address),
                    )
                }
                .is_ok();
            if !replugged {
                let _ = PHYSMEM.plug(Pfn(pfn), PageCount(frames));
            }
            if self.descriptors_on_block {
                // A piece is cut from one segment, so never longer than a run.
                let recorded = self.runs.plugged(first, count, replugged);
                debug_assert!(recorded.is_ok(), "{recorded:?}");
            }
        }
    }
}
