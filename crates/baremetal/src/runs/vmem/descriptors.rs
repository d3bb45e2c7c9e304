//! Where the plugged blocks' page descriptors are, and what the resizes
//! cost the heap.
//!
//! The driver plugs each run of blocks with its descriptors on the run's
//! own first frames (physmem's `plug_on_memory`, Linux's
//! `memmap_on_memory`), so a grow takes no heap for them: before that, a
//! 256 MiB guest's 12.6 MiB heap ran out of descriptor room at 4352 MiB
//! plugged. The check here reads physmem back: every plugged block's
//! first and last descriptor lie in its run's first frames. The heap figures say what the
//! resizes still take (physmem's index sections and segment records).

use core::mem::size_of;
use core::ops::Range;

use hotkern_kernel::movable::MovableFrames;
use hotkern_physmem::Pfn;

use crate::arch::heap;
use crate::arch::memory::{KernelPage, PHYSMEM};
use crate::arch::ranges::PAGE_SIZE;

/// The heap around the resizes.
#[derive(Debug, Default, Clone, Copy)]
pub struct HeapUse {
    /// Bytes in use just before the first resize (the allocator's
    /// bitmaps and owner table made already).
    pub before: u64,
    /// The most in use during the resizes, above `before`.
    pub peak_rise: u64,
    /// Bytes in use after the last resize, above `before`.
    pub after_rise: u64,
    /// Of `before`, the allocator's bitmaps and per-block counts.
    pub bitmaps: u64,
    /// Of `before`, the owner table: the slots' directory (a pointer per
    /// 4096 frames), the chunks of slots made so far (64 KiB each), and
    /// the reverse map when it is on the heap (4 bytes a frame; with the
    /// bitmaps on the blocks it is there too, and not counted).
    pub owner_table: u64,
}

/// Starts counting: the heap's high-water mark restarts from what is in
/// use now.
pub fn start(hot: &MovableFrames) -> HeapUse {
    HeapUse {
        before: heap::reset_peak() as u64,
        bitmaps: hot.blocks().heap_bytes(),
        owner_table: hot.owner_table_bytes(),
        ..HeapUse::default()
    }
}

impl HeapUse {
    /// Starts one resize's count: the high-water mark so far is kept in
    /// `peak_rise` and restarts from what is in use, which is returned.
    pub fn resize_start(&mut self) -> u64 {
        self.fold();
        heap::reset_peak() as u64
    }

    /// The most in use since [`resize_start`](Self::resize_start)
    /// returned `start`, above it.
    pub fn resize_peak(&self, start: u64) -> u64 {
        let (_, _, peak) = heap::usage();
        (peak as u64).saturating_sub(start)
    }

    fn fold(&mut self) {
        let (_, _, peak) = heap::usage();
        self.peak_rise = self
            .peak_rise
            .max((peak as u64).saturating_sub(self.before));
    }

    /// Reads the high-water mark since [`start`].
    pub fn finish(&mut self) {
        self.fold();
        let (_, used, _) = heap::usage();
        self.after_rise = (used as u64).saturating_sub(self.before);
    }
}

/// For a region whose descriptors go on the heap (small enough that the
/// driver keeps them there): allocates room for `frames` frames'
/// descriptors and a quarter more, writes one word in each page of it
/// and frees it again, so that the host populates those heap pages now
/// rather than during the resizes (the heap is first-fit: physmem's slabs
/// land there). Returns the bytes touched.
pub fn touch_heap_room(frames: u64) -> u64 {
    let descriptors = frames.saturating_mul(size_of::<KernelPage>() as u64);
    let bytes = descriptors.saturating_add(descriptors / 4) as usize;
    let mut room: alloc::vec::Vec<u64> = alloc::vec::Vec::new();
    if room.try_reserve_exact(bytes / 8).is_err() {
        return 0;
    }
    let base = room.as_mut_ptr();
    for word in (0..bytes / 8).step_by((PAGE_SIZE / 8) as usize) {
        // SAFETY: within the capacity just reserved; nothing reads it.
        unsafe { base.add(word).write_volatile(0) };
    }
    bytes as u64
}

/// Of the `blocks` given as (frame range, home frame range), those whose
/// first or last frame has its descriptor outside its home: the first
/// frames of the block that holds its run's descriptors.
pub fn off_block(blocks: impl Iterator<Item = (Range<u64>, Range<u64>)>) -> u64 {
    let guard = PHYSMEM.read();
    let at_home = |home: &Range<u64>, pfn: u64| {
        let home = home.start * PAGE_SIZE..home.end * PAGE_SIZE;
        guard.page(Pfn(pfn)).is_some_and(|page| {
            let address = page as *const KernelPage as u64;
            home.contains(&address)
                && home.contains(&(address + size_of::<KernelPage>() as u64 - 1))
        })
    };
    blocks
        .filter(|(frames, _)| !frames.is_empty())
        .filter(|(frames, home)| !at_home(home, frames.start) || !at_home(home, frames.end - 1))
        .count() as u64
}
