//! Physical memory bring-up, one sequence for every architecture: the
//! boot RAM into physmem, then a heap on frames physmem gives back, then
//! physmem's page descriptors in that heap. NetBSD's order
//! (`uvm_page_physload` at boot, `uvm_pageboot_alloc` stealing pages,
//! then `uvm_page_init`), which is what `uvm_physseg` was designed for:
//!
//! 1. every frame of the architecture's [`Plan::loaded`] goes to
//!    [`Physmem::physload`](hotkern_physmem::Physmem::physload) as one
//!    boot segment per range ([`FREELIST_FIRST4G`] for those the boot
//!    map covers, [`FREELIST_DEFAULT`] above); no heap is needed yet;
//! 2. the heap's frames are taken from the front of the largest segment
//!    below [`Plan::heap_end`] (mapped write-back at boot) with
//!    [`Physmem::physunload`](hotkern_physmem::Physmem::physunload), one
//!    frame at a time, as NetBSD steals them;
//! 3. [`Physmem::init_pages`](hotkern_physmem::Physmem::init_pages)
//!    allocates the descriptors of every segment from that heap and
//!    publishes the segments to lock-free readers.
//!
//! What differs per architecture is only which frames are RAM and where
//! the boot map ends, which each `memory::bring_up` puts in a [`Plan`]:
//!
//! ```ignore
//! let plan = Plan { ram, loaded, boot_map_end, heap_end, kernel };
//! crate::arch::bring_up::bring_up(plan)
//! ```

use core::fmt;
use core::mem::size_of;

use hotkern_physmem::{BootRange, FreeList, Pfn, PhysmemError};

use crate::arch::clock;
use crate::arch::cpu::MAX_CPUS;
use crate::arch::frames::{KernelPage, Layout, PHYSMEM};
use crate::arch::heap;
use crate::arch::ranges::{FrameRanges, PAGE_SIZE};

/// Frames beyond the boot map (NetBSD x86's `VM_FREELIST_DEFAULT`).
pub const FREELIST_DEFAULT: FreeList = FreeList::DEFAULT;
/// Frames the boot map covers (NetBSD x86's `VM_FREELIST_FIRST4G`: on
/// x86-64 the map ends at 4 GiB, what 32-bit DMA reaches).
pub const FREELIST_FIRST4G: FreeList = FreeList(1);

/// Heap bytes beyond the descriptors: physmem's index and records, room
/// for the run-time plugs of the self test, a disk load (its cache's 4 MiB
/// and the file), and for each CPU the room its trace ring takes twice
/// more when the trace goes out at the end (the drained pages and the
/// trace.dat built from them): a 16-CPU boot ran out of it there.
const HEAP_SLACK: u64 = (12 << 20) + MAX_CPUS as u64 * (256 << 10);
/// From this much RAM on, half of it goes to the heap instead, so that a
/// boot loader's large file (`bench bcache --platform qemu --full` loads
/// 270 MB) fits beside the cache.
const LARGE_RAM: u64 = 512 << 20;

/// What an architecture's boot information gives the bring-up.
pub struct Plan {
    /// Every whole frame of RAM the firmware names.
    pub ram: FrameRanges,
    /// The frames to load: `ram` less what the firmware reserves, the
    /// kernel image, and what the architecture keeps out.
    pub loaded: FrameRanges,
    /// The first frame the boot map does not cover.
    pub boot_map_end: u64,
    /// The heap comes from a segment that ends at or below this frame.
    pub heap_end: u64,
    /// Whether a large-RAM heap also stays within half of its segment
    /// (aarch64, whose boot map holds only one GiB of RAM).
    pub cap_heap_to_segment: bool,
    /// The kernel image, in bytes.
    pub kernel: (u64, u64),
}

/// Why memory could not be brought up.
#[derive(Debug, Clone, Copy)]
pub enum MemoryError {
    /// The firmware's map leaves no usable RAM to load.
    NoRam,
    /// `physload` refused a range.
    Physload(u64, u64, PhysmemError),
    /// No segment the heap may come from can hold it.
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
            MemoryError::NoRam => write!(f, "the firmware's memory map leaves no usable RAM"),
            MemoryError::Physload(start, end, error) => {
                write!(f, "physload of frames [{start:#x}, {end:#x}): {error}")
            }
            MemoryError::NoRoomForHeap { needed, largest } => write!(
                f,
                "the heap needs {needed} frames, the largest segment it may come from has {largest}"
            ),
            MemoryError::Steal(Some(error)) => write!(f, "stealing heap frames: {error}"),
            MemoryError::Steal(None) => write!(f, "stolen heap frames are not contiguous"),
            MemoryError::InitPages(error) => write!(f, "init_pages: {error}"),
        }
    }
}

impl core::error::Error for MemoryError {}

/// Runs the three steps of the module documentation.
pub fn bring_up(plan: Plan) -> Result<Layout, MemoryError> {
    let Plan {
        ram,
        mut loaded,
        boot_map_end,
        heap_end,
        cap_heap_to_segment,
        kernel: (kernel_start, kernel_end),
    } = plan;
    loaded.split_at(boot_map_end);
    if loaded.len() == 0 {
        return Err(MemoryError::NoRam);
    }

    let started = clock::now();
    let mut heap_home = None;
    let mut largest = 0;
    for (start, end) in loaded.iter() {
        // The boot map's frames apart: allocations that must be written
        // come from them.
        let list = if end <= boot_map_end {
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
        if end <= heap_end && end - start > largest {
            largest = end - start;
            heap_home = Some((handle, start, list));
        }
    }
    let physload_us = clock::micros_since(started);

    let started = clock::now();
    let frames = loaded.frames();
    let descriptors = frames * size_of::<KernelPage>() as u64;
    let loaded_bytes = frames * PAGE_SIZE;
    let slack = if loaded_bytes >= LARGE_RAM - (16 << 20) {
        let half = loaded_bytes / 2;
        if cap_heap_to_segment {
            half.min(largest * PAGE_SIZE / 2)
        } else {
            half
        }
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
    // SAFETY: the frames are usable RAM from the firmware's map inside the
    // boot map's write-back part (below `heap_end`), outside the kernel and
    // what the architecture kept out, and physmem no longer has them, so
    // nothing else will hand them out.
    unsafe { heap::init(heap.0 * PAGE_SIZE, (needed * PAGE_SIZE) as usize) };
    let heap_us = clock::micros_since(started);

    let started = clock::now();
    PHYSMEM.init_pages().map_err(MemoryError::InitPages)?;
    let init_us = clock::micros_since(started);

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
