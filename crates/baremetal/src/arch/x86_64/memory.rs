//! x86-64's memory: the PVH map fed to the shared bring-up
//! ([`crate::arch::bring_up`]: physmem, the heap, the descriptors), and
//! the page tables of the direct map.

pub use crate::arch::bring_up::MemoryError;
pub use crate::arch::frames::{KernelPage, Layout, FRAME_LIMIT, PHYSMEM};
use hotkern_kernel::directmap::LARGE_PAGE_BYTES;

use crate::arch::boot::{self, IDENTITY_MAP_END, MMIO_START};
use crate::arch::boot_info::{BootInfo, RegionKind};
use crate::arch::bring_up::{self, Plan};
use crate::arch::direct_map::{self, Entry, PageTables};
use crate::arch::ranges::{FrameRanges, PAGE_SIZE};

/// The frames the loader's map says are usable RAM.
fn ram_frames(info: &BootInfo) -> FrameRanges {
    let mut ram = FrameRanges::new();
    for region in info.regions().iter().filter(|r| r.kind == RegionKind::Ram) {
        ram.add_bytes(region.start, region.end);
    }
    // Where the map overlaps itself, reserved wins.
    for region in info.regions().iter().filter(|r| r.kind != RegionKind::Ram) {
        ram.remove_bytes(region.start, region.end);
    }
    // A page descriptor names its frame in 32 bits.
    ram.remove_bytes(FRAME_LIMIT * PAGE_SIZE, u64::MAX);
    ram
}

/// Runs the shared bring-up ([`crate::arch::bring_up`]) on the PVH map:
/// RAM less the first MiB (firmware, the start info, the legacy holes) and
/// the kernel, split at 4 GiB, the heap from below 3 GiB (identity-mapped
/// write-back, under the uncached device window).
pub fn bring_up(info: &BootInfo) -> Result<Layout, MemoryError> {
    let ram = ram_frames(info);
    let kernel = boot::kernel_image();
    let mut loaded = ram.clone();
    loaded.remove_bytes(0, 1 << 20);
    loaded.remove_bytes(kernel.0, kernel.1);
    bring_up::bring_up(Plan {
        ram,
        loaded,
        boot_map_end: IDENTITY_MAP_END / PAGE_SIZE,
        heap_end: MMIO_START / PAGE_SIZE,
        cap_heap_to_segment: false,
        kernel,
    })
}

pub use crate::arch::direct_map::{directories_made, huge_pages, prepare_map, MapError};

/// x86-64's page tables under the shared direct map
/// ([`crate::arch::direct_map`]): PDPT entries of 1 GiB pages or page
/// directories of 2 MiB pages.
pub struct Tables;

/// The physical address bits of a page-table entry.
const ADDRESS_MASK: u64 = 0x000f_ffff_ffff_f000;

impl PageTables for Tables {
    /// Present, writable, page size (PS), write-back.
    const PAGE: u64 = 0x83;
    /// Present, writable.
    const TABLE: u64 = 0x3;

    /// The boot PDPT, found through CR3 (every CPU runs on the boot tables).
    fn second_level() -> *mut u64 {
        let cr3: u64;
        // SAFETY: reading CR3 has no side effect.
        unsafe { core::arch::asm!("mov {}, cr3", out(reg) cr3, options(nomem, nostack)) };
        let pml4 = (cr3 & !0xfff) as *const u64;
        // SAFETY: the boot PML4 is in the kernel image (identity-mapped),
        // and its entry 0 points at the boot PDPT, also in the image.
        (unsafe { pml4.read_volatile() } & ADDRESS_MASK) as *mut u64
    }

    fn decode(entry: u64) -> Entry {
        if entry & 1 == 0 {
            Entry::Invalid
        } else if entry & 0x80 != 0 {
            Entry::Page
        } else {
            Entry::Table(entry & ADDRESS_MASK)
        }
    }

    fn drop_page(address: u64) {
        // SAFETY: drops a translation; changes no mapping.
        unsafe { core::arch::asm!("invlpg [{}]", in(reg) address, options(nostack)) };
    }

    /// A 1 GiB page over its directory maps the same frames (a stale 2 MiB
    /// entry is harmless), and a split's stale 1 GiB entry goes with the
    /// CR3 reload of [`after_split`](PageTables::after_split): one write.
    unsafe fn replace(entry: *mut u64, value: u64) {
        // SAFETY: the caller's promise.
        unsafe { entry.write_volatile(value) };
    }

    fn after_split() {
        flush_tlb(0);
    }
}

/// Maps `[start, end)` (whole 2 MiB pages above 4 GiB) identity,
/// write-back: hot-plugged RAM becomes usable. A GiB whose every 2 MiB is
/// then mapped becomes one 1 GiB page.
#[hotkern_trace::function]
pub fn map_range(start: u64, end: u64) -> Result<(), MapError> {
    direct_map::map_range::<Tables>(start, end)
}

/// Unmaps `[start, end)` and drops it from this CPU's TLB, splitting a
/// 1 GiB page into its directory if part of it stays; the caller flushes
/// the other CPUs ([`flush_tlb`]) before the device takes the memory back.
#[hotkern_trace::function]
pub fn unmap_range(start: u64, end: u64) -> Result<(), MapError> {
    direct_map::unmap_range::<Tables>(start, end)
}

/// Unmaps the 2 MiB at `address`: [`unmap_range`] of one 2 MiB page.
pub fn unmap_large(address: u64) -> Result<(), MapError> {
    unmap_range(address, address.saturating_add(LARGE_PAGE_BYTES))
}

/// Whether the page tables map `address` (above 4 GiB), read from the
/// tables themselves.
pub fn is_mapped(address: u64) -> bool {
    direct_map::is_mapped::<Tables>(address)
}

/// Drops every non-global TLB entry of the calling CPU (a CR3 reload), as
/// a cross-CPU call: `fn(u64) -> u64` for [`crate::arch::smp::call`].
pub fn flush_tlb(_: u64) -> u64 {
    // SAFETY: writing CR3 its own value changes no mapping.
    unsafe {
        core::arch::asm!("mov {0}, cr3", "mov cr3, {0}", out(reg) _, options(nostack));
    }
    0
}
