//! Which blocks hold which runs' page descriptors. A grow plugs a run of
//! blocks (up to [`RUN_BYTES`](super::RUN_BYTES)) as one physmem segment
//! whose descriptors live in the run's first frames (physmem's
//! `plug_on_memory`, Linux's `memmap_on_memory`), so physmem's heap grows
//! by one segment per run rather than one per block. A shrink may take any
//! block of a run, but the run's first block, the *holder*, only with the
//! last of its run: Linux likewise removes a memory block's vmemmap pages
//! after the pages they describe.

use alloc::vec::Vec;
use core::ptr::NonNull;

use hotkern_kernel::blockframes::{BlockFrames, Online};
use hotkern_physmem::{PageCount, Pfn, Physmem};

use super::{Device, NO_HOLDER};
use crate::arch::memory::{KernelPage, PHYSMEM};
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

    /// Hands the run of `count` blocks from `first` to the allocator, its
    /// first block keeping `held` frames back for the run's descriptors,
    /// and records the run's holder; false if the allocator refused.
    pub(super) fn add_run(&mut self, first: usize, count: usize, held: u64) -> bool {
        let holder = if held == 0 { NO_HOLDER } else { first as u32 };
        self.holder[first..first + count].fill(holder);
        self.held_frames[first] = held as u16;
        (first..first + count).all(|block| self.hand_over(block))
    }

    /// Frames a holder keeps after its descriptors for its run's
    /// allocator bitmaps, per-block counts and reverse map
    /// (`BlockFrames::with_maps_on_blocks`): 2,200 bytes a 2 MiB block,
    /// 35 frames for a run of 64.
    fn map_frames(&self) -> u64 {
        let words = BlockFrames::map_words(self.frames()) as u64;
        (self.run_blocks() * words * 8).div_ceil(PAGE_SIZE)
    }

    /// Hands `block` (plugged, in physmem) to the allocator. For a region
    /// with its descriptors on its runs, the block's bitmaps go on its
    /// holder, after the run's descriptors, and the holder keeps both
    /// back; a block plugged on its own (after a failed shrink put it
    /// back with heap descriptors) keeps its bitmaps in its first frames.
    pub(super) fn hand_over(&self, block: usize) -> bool {
        let blocks = self.hot.blocks();
        if !self.descriptors_on_block {
            return blocks.add_blocks_reserving(block, 1, Online::Movable, 0);
        }
        let words = BlockFrames::map_words(self.frames()) as u64;
        let (at, reserved) = match self.holder[block] {
            NO_HOLDER => (self.block_address(block), (words * 8).div_ceil(PAGE_SIZE)),
            holder => {
                let holder = holder as usize;
                let held = u64::from(self.held_frames[holder]);
                let maps = self.block_address(holder)
                    + held * PAGE_SIZE
                    + (block - holder) as u64 * words * 8;
                let reserved = if holder == block {
                    held + self.map_frames()
                } else {
                    0
                };
                (maps, reserved)
            }
        };
        let maps = NonNull::new(at as *mut u64).unwrap_or(NonNull::dangling());
        // SAFETY: the holder's (or the block's own) reserved frames, mapped
        // while the holder is plugged, which a shrink unplugs only after
        // every block of its run was taken back; nothing else uses them.
        unsafe { blocks.add_blocks_with_maps(block, 1, Online::Movable, reserved, maps) }
    }

    /// Whether the frame `pfn` starts a block that holds its run's
    /// descriptors.
    pub(super) fn holds_descriptors(&self, pfn: u64) -> bool {
        let Some(offset) = (pfn * PAGE_SIZE).checked_sub(self.addr) else {
            return false;
        };
        let index = (offset / self.block) as usize;
        offset % self.block == 0 && self.holder.get(index) == Some(&(index as u32))
    }

    /// Drops from `taken` (sorted) the holders whose runs keep a plugged
    /// block outside it, handing them back to the allocator with their
    /// descriptor frames kept. Returns how many were kept.
    pub(super) fn keep_holders(&mut self, taken: &mut Vec<usize>) -> usize {
        let before = taken.len();
        let holder = &self.holder;
        let plugged = &self.plugged;
        let staying = |first: usize, list: &[usize]| {
            (first..holder.len())
                .take_while(|&index| holder[index] == first as u32)
                .any(|index| plugged[index] && list.binary_search(&index).is_err())
        };
        let keep: Vec<usize> = taken
            .iter()
            .copied()
            .filter(|&index| holder[index] == index as u32 && staying(index, taken))
            .collect();
        for &index in &keep {
            self.hand_over(index);
        }
        taken.retain(|index| keep.binary_search(index).is_err());
        before - taken.len()
    }

    /// Plugs back `pieces` (frame, count) that a failed shrink unplugged:
    /// each on its own first frames once physmem let the old descriptors
    /// go, else (or when descriptors are kept on the heap) on the heap.
    pub(super) fn replug(&mut self, pieces: &[(u64, u64)]) {
        let holders = pieces
            .iter()
            .filter(|&&(pfn, _)| self.holds_descriptors(pfn))
            .map(|&(pfn, _)| pfn * PAGE_SIZE);
        let on_memory = self.descriptors_on_block && self.release_descriptors(holders).is_ok();
        for &(pfn, frames) in pieces {
            let first = ((pfn * PAGE_SIZE - self.addr) / self.block) as usize;
            let count = (frames / self.frames()) as usize;
            let held = Physmem::<KernelPage>::descriptor_frames(PageCount(frames)).0;
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
            let holder = if replugged { first as u32 } else { NO_HOLDER };
            self.holder[first..first + count].fill(holder);
            self.held_frames[first..first + count].fill(0);
            self.held_frames[first] = if replugged { held as u16 } else { 0 };
        }
    }
}
