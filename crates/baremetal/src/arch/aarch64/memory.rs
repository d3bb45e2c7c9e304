//! Physical memory bring-up on arm64: the device tree's RAM into physmem,
//! then a heap on frames physmem gives back, then physmem's page
//! descriptors in that heap — x86-64's order (NetBSD's `uvm_page_physload`,
//! `uvm_pageboot_alloc`, `uvm_page_init`), fed from the `/memory` node
//! instead of the PVH memory map:
//!
//! 1. every whole frame of RAM the tree names, less the tree itself, its
//!    `/memreserve/` entries and the kernel image, goes to
//!    [`Physmem::physload`](hotkern_physmem::Physmem::physload) as one boot segment per range
//!    ([`FREELIST_FIRST4G`] below, [`FREELIST_DEFAULT`] above, split
//!    where the boot map ends); as on
//!    x86-64, RAM beyond the boot map is tracked but not mapped until a
//!    plug maps it ([`map_range`]);
//! 2. the heap's frames are stolen from the front of the largest segment
//!    the boot map covers, one at a time, with [`Physmem::physunload`](hotkern_physmem::Physmem::physunload);
//! 3. [`Physmem::init_pages`](hotkern_physmem::Physmem::init_pages) makes the descriptors in that heap.

use core::fmt;
use core::mem::size_of;

use hotkern_physmem::{BootRange, FreeList, Pfn, PhysmemError};

pub use crate::arch::frames::{KernelPage, Layout, FRAME_LIMIT, PHYSMEM};

use crate::arch::boot::{self, IDENTITY_MAP_END};
use crate::arch::boot_info::{BootInfo, RegionKind};
use crate::arch::cpu::MAX_CPUS;
use crate::arch::heap;
use crate::arch::ranges::{FrameRanges, PAGE_SIZE};
use crate::arch::timer;

// The names the drivers above reach the page tables by, as on x86-64.
#[allow(unused_imports)]
pub use crate::arch::direct::{
    directories_made, flush_tlb, huge_pages, is_mapped, map_range, prepare_map, unmap_large,
    unmap_range, MapError,
};

/// Frames above 4 GiB (x86-64's and NetBSD's `VM_FREELIST_DEFAULT`).
pub const FREELIST_DEFAULT: FreeList = FreeList::DEFAULT;
/// Frames the boot identity map covers (below 2 GiB here; the name is
/// x86-64's, where the map ends at 4 GiB).
pub const FREELIST_FIRST4G: FreeList = FreeList(1);

/// Heap bytes beyond the descriptors: x86-64's figure (physmem's index,
/// the self test's plugs, a disk load, each CPU's trace ring twice).
const HEAP_SLACK: u64 = (12 << 20) + MAX_CPUS as u64 * (256 << 10);
/// From this much RAM on, half of it goes to the heap instead.
const LARGE_RAM: u64 = 512 << 20;

/// Why memory could not be brought up.
#[derive(Debug, Clone, Copy)]
pub enum MemoryError {
    /// The tree names no usable RAM.
    NoRam,
    /// `physload` refused a range.
    Physload(u64, u64, PhysmemError),
    /// No segment inside the boot map can hold the heap.
    NoRoomForHeap {
        /// Frames the heap needs.
        needed: u64,
        /// Frames in the largest candidate segment.
        largest: u64,
    },
    /// `physunload` refused, or did not return the next frame in order.
    Steal(Option<PhysmemError>),
    /// `init_pages` failed.
    InitPages(PhysmemError),
}

impl fmt::Display for MemoryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemoryError::NoRam => write!(f, "the device tree names no usable RAM"),
            MemoryError::Physload(start, end, error) => {
                write!(f, "physload of frames [{start:#x}, {end:#x}): {error}")
            }
            MemoryError::NoRoomForHeap { needed, largest } => write!(
                f,
                "the heap needs {needed} frames, the largest segment in the boot map has {largest}"
            ),
            MemoryError::Steal(Some(error)) => write!(f, "stealing heap frames: {error}"),
            MemoryError::Steal(None) => write!(f, "stolen heap frames are not contiguous"),
            MemoryError::InitPages(error) => write!(f, "init_pages: {error}"),
        }
    }
}

impl core::error::Error for MemoryError {}

/// The frames the boot information says are RAM: the tree's `/memory`,
/// less what it reserves and the tree itself (x86-64's rule: where the map
/// overlaps itself, reserved wins).
fn ram_frames(info: &BootInfo) -> FrameRanges {
    let mut ram = FrameRanges::new();
    for region in info.regions().iter().filter(|r| r.kind == RegionKind::Ram) {
        ram.add_bytes(region.start, region.end);
    }
    ram.remove_bytes(FRAME_LIMIT * PAGE_SIZE, u64::MAX);
    ram
}

/// Runs the three steps of the module documentation.
pub fn bring_up(info: &BootInfo) -> Result<Layout, MemoryError> {
    let ram = ram_frames(info);
    let (kernel_start, kernel_end) = boot::kernel_image();
    let mut loaded = ram.clone();
    for region in info.regions().iter().filter(|r| r.kind != RegionKind::Ram) {
        loaded.remove_bytes(region.start, region.end);
    }
    loaded.remove_bytes(kernel_start, kernel_end);
    loaded.split_at(IDENTITY_MAP_END / PAGE_SIZE);
    if loaded.len() == 0 {
        return Err(MemoryError::NoRam);
    }
    let started = timer::now();
    let mut heap_home = None;
    let mut largest = 0;
    for (start, end) in loaded.iter() {
        // The boot map's frames apart (x86-64 splits at its own end,
        // 4 GiB): allocations that must be written come from them.
        let list = if end <= IDENTITY_MAP_END / PAGE_SIZE {
            FREELIST_FIRST4G
        } else {
            FREELIST_DEFAULT
        };
        let handle = PHYSMEM
            .physload(
                BootRange {
                    start: Pfn(start),
                    end: Pfn(end),
                    avail_start: Pfn(start),
                    avail_end: Pfn(end),
                },
                list,
            )
            .map_err(|error| MemoryError::Physload(start, end, error))?;
        if end <= IDENTITY_MAP_END / PAGE_SIZE && end - start > largest {
            largest = end - start;
            heap_home = Some((handle, start, list));
        }
    }
    let physload_us = timer::micros_since(started);

    let started = timer::now();
    let frames = loaded.frames();
    let descriptors = frames * size_of::<KernelPage>() as u64;
    let loaded_bytes = frames * PAGE_SIZE;
    // Half of RAM beyond the boot map's one GiB would not fit in it: at
    // most half of the segment the heap comes from.
    let slack = if loaded_bytes >= LARGE_RAM - (16 << 20) {
        (loaded_bytes / 2).min(largest * PAGE_SIZE / 2)
    } else {
        HEAP_SLACK
    };
    let needed = (descriptors + descriptors / 4 + slack).div_ceil(PAGE_SIZE);
    let Some((handle, first, list)) = heap_home.filter(|_| needed < largest) else {
        return Err(MemoryError::NoRoomForHeap { needed, largest });
    };
    for index in 0..needed {
        let pfn = PHYSMEM
            .physunload(handle, list)
            .map_err(|error| MemoryError::Steal(Some(error)))?;
        if pfn.0 != first + index {
            return Err(MemoryError::Steal(None));
        }
    }
    let heap = (first, first + needed);
    // SAFETY: the frames are RAM from the device tree inside the boot
    // map's write-back blocks, outside the tree, its reservations and the
    // kernel, and physmem no longer has them.
    unsafe { heap::init(heap.0 * PAGE_SIZE, (needed * PAGE_SIZE) as usize) };
    let heap_us = timer::micros_since(started);

    let started = timer::now();
    PHYSMEM.init_pages().map_err(MemoryError::InitPages)?;
    let init_us = timer::micros_since(started);

    let mut managed = loaded.clone();
    managed.remove(heap.0, heap.1);
    Ok(Layout {
        ram,
        loaded,
        managed,
        kernel: (kernel_start / PAGE_SIZE, kernel_end.div_ceil(PAGE_SIZE)),
        heap,
        micros: [physload_us, heap_us, init_us],
    })
}
