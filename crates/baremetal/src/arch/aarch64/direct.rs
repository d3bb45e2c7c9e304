//! The direct map of hot-plugged RAM above the boot map, with x86-64's
//! layering ([`hotkern_kernel::directmap`] plans it): each aligned GiB is
//! one level-1 entry of the boot tables, a table of 2 MiB blocks while part
//! of it is plugged and one 1 GiB block once all of it is.
//!
//! What differs from x86-64 is the Arm rule for changing a live entry
//! between a block and a table (Arm ARM D8.14, "break-before-make"): the
//! old entry is made invalid and its translations invalidated everywhere
//! before the new one is written. The invalidations are broadcast to every
//! CPU of the inner-shareable domain (`TLBI ...IS`), so unlike x86-64's
//! `invlpg` no other CPU has to be called.

use core::arch::asm;
use core::fmt;
use core::sync::atomic::{AtomicU64, Ordering};

use hotkern_kernel::directmap::{
    self, Change, GibMap, GibSpan, HUGE_PAGE_BYTES, LARGE_PAGE_BYTES, LARGE_PER_HUGE,
};

use crate::arch::boot::{self, IDENTITY_MAP_END, NORMAL_BLOCK};

/// Why a hot-plugged block could not be mapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapError {
    /// The range is not whole 2 MiB pages between the boot map's end and
    /// 512 GiB (what the one level-0 entry covers).
    Outside(u64),
    /// No heap for a level-2 table.
    NoMemory,
}

impl fmt::Display for MapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MapError::Outside(address) => write!(
                f,
                "the range from {address:#x} is not whole 2 MiB pages between {IDENTITY_MAP_END:#x} and 512 GiB"
            ),
            MapError::NoMemory => f.write_str("no heap for a level-2 table"),
        }
    }
}

impl core::error::Error for MapError {}

/// A table descriptor's type bits.
const TABLE: u64 = 0b11;
/// An output address's bits in a descriptor.
const ADDRESS_MASK: u64 = 0x0000_ffff_ffff_f000;
/// The level-0 entry covers this much.
const LEVEL0_SPAN: u64 = 512 << 30;
/// Level-1 entries, one per GiB.
const SLOTS: usize = 512;

/// One GiB as the tables hold it (x86-64's `Slot`): which 2 MiB are
/// mapped, whether as one block, and its level-2 table, kept while it is a
/// block so that a split never allocates.
#[derive(Clone, Copy)]
struct Slot {
    mapped: GibMap,
    table: u64,
    huge: bool,
    /// Holds a device's registers ([`map_device`]): never RAM's.
    device: bool,
}

struct DirectMap {
    slots: [Slot; SLOTS],
}

/// Serialises changes to the tables above the boot map.
static DIRECT_MAP: spin::Mutex<DirectMap> = spin::Mutex::new(DirectMap {
    slots: [Slot {
        mapped: GibMap::EMPTY,
        table: 0,
        huge: false,
        device: false,
    }; SLOTS],
});
static TABLES: AtomicU64 = AtomicU64::new(0);

/// Level-2 tables made so far.
pub fn directories_made() -> u64 {
    TABLES.load(Ordering::Relaxed)
}

/// GiB above the boot map mapped by one 1 GiB block now.
pub fn huge_pages() -> usize {
    DIRECT_MAP
        .lock()
        .slots
        .iter()
        .filter(|slot| slot.huge)
        .count()
}

/// A zeroed level-2 table from the heap (identity-mapped), kept for good.
#[cold]
fn new_table() -> Result<u64, MapError> {
    let layout =
        alloc::alloc::Layout::from_size_align(4096, 4096).map_err(|_| MapError::NoMemory)?;
    // SAFETY: a non-zero size.
    let table = unsafe { alloc::alloc::alloc_zeroed(layout) };
    if table.is_null() {
        return Err(MapError::NoMemory);
    }
    TABLES.fetch_add(1, Ordering::Relaxed);
    Ok(table as u64)
}

fn spans(start: u64, end: u64) -> Result<impl Iterator<Item = GibSpan>, MapError> {
    if start < IDENTITY_MAP_END || end > LEVEL0_SPAN {
        return Err(MapError::Outside(start));
    }
    directmap::spans(start, end).map_err(|_| MapError::Outside(start))
}

fn make_tables(state: &mut DirectMap, start: u64, end: u64) -> Result<(), MapError> {
    let first = (start / HUGE_PAGE_BYTES) as usize;
    let last = end.div_ceil(HUGE_PAGE_BYTES) as usize;
    if state.slots[first..last].iter().any(|slot| slot.device) {
        return Err(MapError::Outside(start));
    }
    for slot in &mut state.slots[first..last] {
        if slot.table == 0 {
            slot.table = new_table()?;
        }
    }
    Ok(())
}

/// Makes the table writes before it visible to the walker and to the
/// instructions after it.
fn publish() {
    // SAFETY: barriers only.
    unsafe { asm!("dsb ishst", "isb", options(nostack)) };
}

/// Drops every CPU's translations of the 2 MiB page at `address`.
fn invalidate_page(address: u64) {
    // SAFETY: invalidation changes no mapping; `dsb ish` waits for it on
    // every CPU of the inner-shareable domain.
    unsafe {
        asm!("dsb ishst", "tlbi vaae1is, {}", "dsb ish", "isb", in(reg) address >> 12, options(nostack));
    }
}

/// Drops every CPU's translations (a block became a table or back).
fn invalidate_all() {
    // SAFETY: as in `invalidate_page`.
    unsafe {
        asm!(
            "dsb ishst",
            "tlbi vmalle1is",
            "dsb ish",
            "isb",
            options(nostack)
        )
    };
}

fn change(start: u64, end: u64, map: bool) -> Result<(), MapError> {
    let spans = spans(start, end)?;
    let mut state = DIRECT_MAP.lock();
    if map {
        make_tables(&mut state, start, end)?;
    } else if state.slots
        [(start / HUGE_PAGE_BYTES) as usize..end.div_ceil(HUGE_PAGE_BYTES) as usize]
        .iter()
        .any(|slot| slot.device)
    {
        return Err(MapError::Outside(start));
    }
    let level1 = boot::boot_level1();
    for span in spans {
        let slot = &mut state.slots[span.gib as usize];
        let changed = if map {
            slot.mapped.set(span.pages.clone())
        } else {
            slot.mapped.clear(span.pages.clone())
        };
        let change = directmap::plan(slot.huge, changed, &slot.mapped);
        let gib = span.gib * HUGE_PAGE_BYTES;
        let table = slot.table as *mut u64;
        // SAFETY: the slot is below 512: inside the level-1 table; the lock
        // is held.
        let entry = unsafe { level1.add(span.gib as usize) };
        let page = |index: usize| gib + index as u64 * LARGE_PAGE_BYTES;
        let write = |at: *mut u64, value: u64| {
            // SAFETY: `at` is an entry of a table this module owns, under
            // the lock; callers keep break-before-make.
            unsafe { at.write_volatile(value) }
        };
        match change {
            Change::Nothing => {}
            Change::Entries => {
                for index in span.pages.clone() {
                    let value = if map { page(index) | NORMAL_BLOCK } else { 0 };
                    // SAFETY: index < 512, inside the table.
                    write(unsafe { table.add(index) }, value);
                    if !map {
                        invalidate_page(page(index));
                    }
                }
                write(entry, slot.table | TABLE);
                publish();
            }
            Change::Promote => {
                // Break (the table), invalidate its 2 MiB entries, make.
                write(entry, 0);
                invalidate_all();
                write(entry, gib | NORMAL_BLOCK);
                publish();
            }
            Change::Split => {
                for index in 0..LARGE_PER_HUGE {
                    let value = if slot.mapped.contains(index) {
                        page(index) | NORMAL_BLOCK
                    } else {
                        0
                    };
                    // SAFETY: index < 512; the table is unused while the
                    // GiB is a block.
                    write(unsafe { table.add(index) }, value);
                }
                write(entry, 0);
                invalidate_all();
                write(entry, slot.table | TABLE);
                publish();
            }
        }
        slot.huge = matches!(change, Change::Promote) || (slot.huge && change == Change::Nothing);
    }
    Ok(())
}

/// Maps `[start, end)` (whole 2 MiB pages above the boot map) identity,
/// Normal write-back; a GiB then wholly mapped becomes one block.
#[hotkern_trace::function]
pub fn map_range(start: u64, end: u64) -> Result<(), MapError> {
    change(start, end, true)
}

/// Unmaps `[start, end)` and invalidates it on every CPU.
#[hotkern_trace::function]
pub fn unmap_range(start: u64, end: u64) -> Result<(), MapError> {
    change(start, end, false)
}

/// Unmaps the 2 MiB at `address`.
pub fn unmap_large(address: u64) -> Result<(), MapError> {
    unmap_range(address, address.saturating_add(LARGE_PAGE_BYTES))
}

/// Makes the level-2 tables of every GiB `[start, end)` touches, mapping
/// nothing (a driver's probe, so that a resize allocates none).
#[hotkern_trace::function]
pub fn prepare_map(start: u64, end: u64) -> Result<(), MapError> {
    let first = start & !(HUGE_PAGE_BYTES - 1);
    let last = end.next_multiple_of(HUGE_PAGE_BYTES);
    drop(spans(first, last)?);
    make_tables(&mut DIRECT_MAP.lock(), first, last)
}

/// The level-2 table of the one device GiB ([`map_device`]): static, so
/// that the PCIe host bridge's registers are mapped before there is a heap.
#[repr(align(4096))]
struct DeviceTable([u64; 512]);
static mut DEVICE_TABLE: DeviceTable = DeviceTable([0; 512]);

/// Maps the 2 MiB at `address` (rounded down) Device-nGnRE, identity,
/// for registers above the boot map (`-M virt`'s high PCIe ECAM, at
/// 256.25 GiB): once, on the boot CPU, before the heap. Its GiB is taken
/// from the direct map for good, so RAM is never mapped beside it;
/// [`MapError::Outside`] if that GiB is outside the direct map's reach,
/// already holds RAM, or a device was mapped before.
///
/// ```ignore
/// direct::map_device(0x40_1000_0000)?; // bus 0 of virt's high ECAM
/// ```
pub fn map_device(address: u64) -> Result<(), MapError> {
    let block = address & !(LARGE_PAGE_BYTES - 1);
    if !(IDENTITY_MAP_END..LEVEL0_SPAN).contains(&block) {
        return Err(MapError::Outside(address));
    }
    let mut state = DIRECT_MAP.lock();
    if state.slots.iter().any(|slot| slot.device) {
        return Err(MapError::Outside(address));
    }
    let gib = (block / HUGE_PAGE_BYTES) as usize;
    let slot = &mut state.slots[gib];
    if slot.table != 0 || slot.huge || slot.mapped != GibMap::EMPTY {
        return Err(MapError::Outside(address));
    }
    // SAFETY: only a raw pointer is taken; the table is written only here,
    // once (checked above under the lock), while its GiB's level-1 entry
    // is still invalid.
    let table = unsafe { (&raw mut DEVICE_TABLE.0).cast::<u64>() };
    let index = ((block % HUGE_PAGE_BYTES) / LARGE_PAGE_BYTES) as usize;
    // SAFETY: index < 512; the entries are plain words nothing else reads
    // until the level-1 entry below points at them.
    unsafe { table.add(index).write_volatile(block | boot::DEVICE_BLOCK) };
    slot.device = true;
    slot.table = table as u64;
    // SAFETY: the GiB's level-1 entry, invalid until now (no RAM there).
    unsafe {
        boot::boot_level1()
            .add(gib)
            .write_volatile(table as u64 | TABLE)
    };
    publish();
    Ok(())
}

/// Whether the tables map `address` (above the boot map), read from the
/// tables themselves.
pub fn is_mapped(address: u64) -> bool {
    if !(IDENTITY_MAP_END..LEVEL0_SPAN).contains(&address) {
        return false;
    }
    let _state = DIRECT_MAP.lock();
    // SAFETY: the slot is below 512; the lock keeps the tables still.
    let entry = unsafe {
        boot::boot_level1()
            .add((address / HUGE_PAGE_BYTES) as usize)
            .read_volatile()
    };
    match entry & 0b11 {
        0b01 => true,
        TABLE => {
            let table = (entry & ADDRESS_MASK) as *const u64;
            let index = ((address / LARGE_PAGE_BYTES) % LARGE_PER_HUGE as u64) as usize;
            // SAFETY: index < 512, inside the table the entry points at.
            unsafe { table.add(index).read_volatile() & 1 != 0 }
        }
        _ => false,
    }
}

/// Drops the calling CPU's translations, as a cross-CPU call's function
/// (x86-64's `flush_tlb`): the unmaps here already broadcast theirs.
pub fn flush_tlb(_: u64) -> u64 {
    // SAFETY: invalidation changes no mapping.
    unsafe {
        asm!(
            "dsb ishst",
            "tlbi vmalle1",
            "dsb nsh",
            "isb",
            options(nostack)
        )
    };
    0
}

/// Whether the MMU translates `address` for an EL1 read now, asked of the
/// hardware (`AT S1E1R`, then `PAR_EL1`'s fault bit), not of the tables
/// this module wrote: what a check of the walker's view uses.
pub fn translates(address: u64) -> bool {
    let result: u64;
    // SAFETY: an address translation query; it changes no mapping and
    // faults nothing (a failed walk sets PAR_EL1.F).
    unsafe {
        asm!("at s1e1r, {}", "isb", "mrs {}, par_el1", in(reg) address, out(reg) result, options(nostack));
    }
    result & 1 == 0
}
