//! x86-64's memory: the PVH map fed to the shared bring-up
//! ([`crate::arch::bring_up`]: physmem, the heap, the descriptors), and
//! the page tables of the direct map.

use core::fmt;
use core::sync::atomic::{AtomicU64, Ordering};

pub use crate::arch::bring_up::MemoryError;
pub use crate::arch::frames::{KernelPage, Layout, FRAME_LIMIT, PHYSMEM};
use hotkern_kernel::directmap::{
    self, Change, GibMap, GibSpan, HUGE_PAGE_BYTES, LARGE_PAGE_BYTES, LARGE_PER_HUGE,
};

use crate::arch::boot::{self, IDENTITY_MAP_END, MMIO_START};
use crate::arch::boot_info::{BootInfo, RegionKind};
use crate::arch::bring_up::{self, Plan};
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

/// Why a hot-plugged block could not be mapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapError {
    /// The address is not 2 MiB-aligned, inside the boot identity map, or
    /// beyond the 512 GiB the boot PML4 entry covers.
    Outside(u64),
    /// No heap for a page directory.
    NoMemory,
}

impl fmt::Display for MapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MapError::Outside(address) => write!(
                f,
                "the range from {address:#x} is not whole 2 MiB pages between 4 GiB and 512 GiB"
            ),
            MapError::NoMemory => f.write_str("no heap for a page directory"),
        }
    }
}

impl core::error::Error for MapError {}

/// A 2 MiB (PD) or 1 GiB (PDPT) page: present, writable, page size (PS),
/// write-back.
const LARGE_PAGE: u64 = 0x83;
/// A page directory or page table pointer: present, writable.
const TABLE: u64 = 0x3;
/// The physical address bits of a page-table entry.
const ADDRESS_MASK: u64 = 0x000f_ffff_ffff_f000;
/// The boot PML4's one entry covers this much.
const PML4_SPAN: u64 = 512 << 30;
/// PDPT slots, one per GiB of the boot PML4 entry.
const SLOTS: usize = 512;

/// One PDPT slot of the direct map above 4 GiB as the page tables hold
/// it: which 2 MiB pages are mapped, whether as one 1 GiB page, and its
/// page directory, kept while the slot is a 1 GiB page so that a split
/// never allocates. One record per slot, so that a change reads and
/// writes one place rather than three arrays.
#[derive(Clone, Copy)]
struct Slot {
    mapped: GibMap,
    directory: u64,
    huge: bool,
}

/// The direct map above 4 GiB, one [`Slot`] per GiB of the boot PML4
/// entry. Every slot with a page mapped has its directory (made before
/// its first map), which is why an unmap never allocates.
struct DirectMap {
    slots: [Slot; SLOTS],
}

/// Serialises changes to the page tables above 4 GiB.
static DIRECT_MAP: spin::Mutex<DirectMap> = spin::Mutex::new(DirectMap {
    slots: [Slot {
        mapped: GibMap::EMPTY,
        directory: 0,
        huge: false,
    }; SLOTS],
});
/// Page directories made above 4 GiB so far.
static DIRECTORIES: AtomicU64 = AtomicU64::new(0);

/// How many page directories above 4 GiB have been made so far.
pub fn directories_made() -> u64 {
    DIRECTORIES.load(Ordering::Relaxed)
}

/// How many GiB above 4 GiB are mapped by one 1 GiB page now.
pub fn huge_pages() -> usize {
    DIRECT_MAP
        .lock()
        .slots
        .iter()
        .filter(|slot| slot.huge)
        .count()
}

/// The boot PDPT, found through CR3 (every CPU runs on the boot tables).
fn pdpt() -> *mut u64 {
    let cr3: u64;
    // SAFETY: reading CR3 has no side effect.
    unsafe { core::arch::asm!("mov {}, cr3", out(reg) cr3, options(nomem, nostack)) };
    let pml4 = (cr3 & !0xfff) as *const u64;
    // SAFETY: the boot PML4 is in the kernel image (identity-mapped), and
    // its entry 0 points at the boot PDPT, also in the image.
    (unsafe { pml4.read_volatile() } & ADDRESS_MASK) as *mut u64
}

/// A zeroed page directory from the heap (identity-mapped: its address is
/// its physical address), kept for the rest of the run.
#[cold]
#[inline(never)]
fn new_directory() -> Result<u64, MapError> {
    let layout =
        alloc::alloc::Layout::from_size_align(4096, 4096).map_err(|_| MapError::NoMemory)?;
    // SAFETY: a non-zero size.
    let directory = unsafe { alloc::alloc::alloc_zeroed(layout) };
    if directory.is_null() {
        return Err(MapError::NoMemory);
    }
    DIRECTORIES.fetch_add(1, Ordering::Relaxed);
    Ok(directory as u64)
}

/// The GiB spans of `[start, end)`, which must be whole 2 MiB pages
/// between 4 GiB and 512 GiB.
fn spans(start: u64, end: u64) -> Result<impl Iterator<Item = GibSpan>, MapError> {
    if start < IDENTITY_MAP_END || end > PML4_SPAN {
        return Err(MapError::Outside(start));
    }
    directmap::spans(start, end).map_err(|_| MapError::Outside(start))
}

/// Gives every GiB that `[start, end)` touches its page directory, if it
/// has none yet: all of them before anything is mapped, so that a failure
/// changes nothing, and a GiB that becomes a 1 GiB page keeps one for its
/// split. The range is already checked (below 512 GiB).
fn make_directories(state: &mut DirectMap, start: u64, end: u64) -> Result<(), MapError> {
    let first = (start / HUGE_PAGE_BYTES) as usize;
    let last = end.div_ceil(HUGE_PAGE_BYTES) as usize;
    for slot in &mut state.slots[first..last] {
        if slot.directory == 0 {
            slot.directory = new_directory()?;
        }
    }
    Ok(())
}

/// Maps (`map`) or unmaps `[start, end)` as [`hotkern_kernel::directmap`]
/// plans it: 1 GiB pages where a whole GiB is mapped, 2 MiB entries
/// elsewhere. A map makes the directories first ([`make_directories`]);
/// an unmap needs none it does not have (see [`DirectMap`]).
///
/// Kept short on purpose: QEMU's TCG translates each block of guest code
/// the first time it runs, at one to two microseconds per instruction on
/// the shared test host, and the first grow after boot runs this path for
/// the first time inside its timed page-table share. So the plan is made
/// once per GiB (not again in an allocation pass), from one slot record
/// updated in place a word at a time ([`GibMap::set`] says whether it
/// changed anything), with no copy or comparison of whole maps.
fn change(start: u64, end: u64, map: bool) -> Result<(), MapError> {
    let spans = spans(start, end)?;
    let mut state = DIRECT_MAP.lock();
    if map {
        make_directories(&mut state, start, end)?;
    }
    let pdpt = pdpt();
    let mut reload = false;
    for span in spans {
        let slot = &mut state.slots[span.gib as usize];
        let changed = if map {
            slot.mapped.set(span.pages.clone())
        } else {
            slot.mapped.clear(span.pages.clone())
        };
        let change = directmap::plan(slot.huge, changed, &slot.mapped);
        let gib = span.gib * HUGE_PAGE_BYTES;
        let directory = slot.directory as *mut u64;
        // SAFETY: the slot is below 512 (the range ends below 512 GiB):
        // inside the PDPT page; DIRECT_MAP is held.
        let entry = unsafe { pdpt.add(span.gib as usize) };
        let page = |index: usize| gib + index as u64 * LARGE_PAGE_BYTES;
        match change {
            Change::Nothing => {}
            Change::Entries => {
                for index in span.pages.clone() {
                    let value = if map { page(index) | LARGE_PAGE } else { 0 };
                    // SAFETY: index < 512, inside the directory, which
                    // exists (made by a map before its first page); only
                    // this range's pages change, and nothing uses an
                    // unmapped one.
                    unsafe { directory.add(index).write_volatile(value) };
                }
                if !map {
                    // A not-present entry is never cached, so only an
                    // unmap invalidates.
                    for index in span.pages.clone() {
                        // SAFETY: drops a translation; changes no mapping.
                        unsafe {
                            core::arch::asm!("invlpg [{}]", in(reg) page(index), options(nostack));
                        }
                    }
                }
                // SAFETY: as above; the entry was not present or already
                // pointed at this directory.
                unsafe { entry.write_volatile(directory as u64 | TABLE) };
            }
            Change::Promote => {
                // The same translations in one entry: nothing to
                // invalidate (a stale 2 MiB entry maps the same frame).
                // SAFETY: the whole GiB is plugged and mapped write-back.
                unsafe { entry.write_volatile(gib | LARGE_PAGE) };
            }
            Change::Split => {
                for index in 0..LARGE_PER_HUGE {
                    let value = if slot.mapped.contains(index) {
                        page(index) | LARGE_PAGE
                    } else {
                        0
                    };
                    // SAFETY: index < 512; the directory (made before the
                    // slot's first map) is not in use while the slot is a
                    // 1 GiB page.
                    unsafe { directory.add(index).write_volatile(value) };
                }
                // SAFETY: the directory now maps what stays plugged; the
                // 1 GiB TLB entry goes with the reload below.
                unsafe { entry.write_volatile(directory as u64 | TABLE) };
                reload = true;
            }
        }
        slot.huge = matches!(change, Change::Promote) || (slot.huge && change == Change::Nothing);
    }
    if reload {
        flush_tlb(0);
    }
    Ok(())
}

/// Maps `[start, end)` (whole 2 MiB pages above 4 GiB) identity,
/// write-back: hot-plugged RAM becomes usable. A GiB whose every 2 MiB is
/// then mapped becomes one 1 GiB page.
#[hotkern_trace::function]
pub fn map_range(start: u64, end: u64) -> Result<(), MapError> {
    change(start, end, true)
}

/// Unmaps `[start, end)` and drops it from this CPU's TLB, splitting a
/// 1 GiB page into its directory if part of it stays; the caller flushes
/// the other CPUs ([`flush_tlb`]) before the device takes the memory back.
#[hotkern_trace::function]
pub fn unmap_range(start: u64, end: u64) -> Result<(), MapError> {
    change(start, end, false)
}

/// Unmaps the 2 MiB at `address`: [`unmap_range`] of one 2 MiB page.
pub fn unmap_large(address: u64) -> Result<(), MapError> {
    unmap_range(address, address.saturating_add(LARGE_PAGE_BYTES))
}

/// Makes the page directories of every GiB `[start, end)` touches,
/// mapping nothing: a driver calls it when it probes, before its first
/// plug, so that a resize allocates no directory (allocate before
/// changing anything).
#[hotkern_trace::function]
pub fn prepare_map(start: u64, end: u64) -> Result<(), MapError> {
    let first = start & !(HUGE_PAGE_BYTES - 1);
    let last = end.next_multiple_of(HUGE_PAGE_BYTES);
    // Only to check the range.
    drop(spans(first, last)?);
    make_directories(&mut DIRECT_MAP.lock(), first, last)
}

/// Whether the page tables map `address` (above 4 GiB), read from the
/// tables themselves rather than from what this module recorded.
pub fn is_mapped(address: u64) -> bool {
    if !(IDENTITY_MAP_END..PML4_SPAN).contains(&address) {
        return false;
    }
    let _state = DIRECT_MAP.lock();
    // SAFETY: the slot is below 512; the lock keeps the tables still.
    let entry = unsafe {
        pdpt()
            .add((address / HUGE_PAGE_BYTES) as usize)
            .read_volatile()
    };
    if entry & 1 == 0 {
        return false;
    }
    if entry & 0x80 != 0 {
        return true;
    }
    let directory = (entry & ADDRESS_MASK) as *const u64;
    let index = ((address / LARGE_PAGE_BYTES) % LARGE_PER_HUGE as u64) as usize;
    // SAFETY: index < 512, inside the directory the entry points at.
    unsafe { directory.add(index).read_volatile() & 1 != 0 }
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
