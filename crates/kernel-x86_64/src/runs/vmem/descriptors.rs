//! Heap room for the page descriptors of the whole virtio-mem region,
//! touched once before the first resize.
//!
//! physmem carves each plugged run's descriptors (16 bytes a frame, 512
//! KiB per 128 MiB) from a slab it allocates on the kernel heap. Under
//! QEMU the heap's pages beyond what the boot used have never been
//! written, so the host populates each on its first write (a host page
//! fault for every 4 KiB): measured under TCG, allocating and first
//! touching a 128 MiB run's descriptor room took 0.9–1.1 ms against
//! 60–140 µs to initialise the descriptors in it. Writing the room once
//! before the device is followed, then giving it back, moves that cost
//! out of the resizes: the heap is first-fit, so the slabs and indexes
//! physmem allocates next come from the same, now populated, addresses.
//! This is the project's rule of allocating before changing anything,
//! applied to the host's memory as well as the guest's.

use alloc::vec::Vec;
use core::mem::size_of;
use core::ops::Range;

use hotkern_physmem::Pfn;

use crate::arch::memory::{KernelPage, PHYSMEM};
use crate::arch::ranges::PAGE_SIZE;
use crate::arch::tsc;

/// Room beyond the descriptors themselves, for physmem's indexes and the
/// allocator's bitmaps that interleave with the slabs: a quarter more.
const SLACK_DIVISOR: u64 = 4;

/// The room touched: its address range and how long touching it took.
#[derive(Debug, Default, Clone)]
pub struct Room {
    /// The heap addresses written, empty if the heap had no such room.
    pub range: Range<u64>,
    /// Nanoseconds spent allocating and writing it.
    pub ns: u64,
}

/// Allocates room for `frames` frames' descriptors and then some, writes
/// one word in each page of it, and frees it again.
pub fn touch(frames: u64) -> Room {
    let started = tsc::nanos();
    let descriptors = frames.saturating_mul(size_of::<KernelPage>() as u64);
    let bytes = descriptors.saturating_add(descriptors / SLACK_DIVISOR) as usize;
    let mut room: Vec<u64> = Vec::new();
    if room.try_reserve_exact(bytes / 8).is_err() {
        return Room::default();
    }
    let base = room.as_mut_ptr();
    for word in (0..bytes / 8).step_by((PAGE_SIZE / 8) as usize) {
        // SAFETY: within the capacity just reserved; nothing reads it.
        unsafe { base.add(word).write_volatile(0) };
    }
    let start = base as u64;
    drop(room);
    Room {
        range: start..start + bytes as u64,
        ns: tsc::nanos() - started,
    }
}

/// Of the `blocks` given as frame ranges, those whose first or last frame
/// has its descriptor outside `room`: a slab physmem allocated where the
/// heap had not been touched before the resizes.
pub fn outside(room: &Range<u64>, blocks: impl Iterator<Item = Range<u64>>) -> u64 {
    let guard = PHYSMEM.read();
    let within = |pfn: u64| {
        guard
            .page(Pfn(pfn))
            .is_some_and(|page| room.contains(&(page as *const KernelPage as u64)))
    };
    blocks
        .filter(|frames| !frames.is_empty())
        .filter(|frames| !within(frames.start) || !within(frames.end - 1))
        .count() as u64
}
