//! The direct map of hot-plugged RAM above the boot map, one bookkeeping
//! for every architecture: [`hotkern_kernel::directmap`] plans it, each
//! aligned GiB is one entry of the boot tables' second level (x86-64's
//! PDPT, arm64's level-1 table), a table of 2 MiB entries while part of
//! it is plugged and one 1 GiB entry once all of it is. Every GiB with a
//! page mapped has its table (made before its first map, kept while it is
//! a 1 GiB entry), so an unmap or a split never allocates.
//!
//! What each architecture supplies ([`PageTables`]) is the entry format
//! and its rule for changing a live entry: x86-64 writes a 1 GiB page
//! over its table at once and reloads CR3 after a split, arm64 breaks
//! before it makes (Arm ARM D8.14) with broadcast invalidations.
//!
//! ```ignore
//! pub fn map_range(start: u64, end: u64) -> Result<(), MapError> {
//!     direct_map::map_range::<Tables>(start, end)
//! }
//! ```

use core::fmt;
use core::sync::atomic::{AtomicU64, Ordering};

use hotkern_kernel::directmap::{
    self, Change, GibMap, GibSpan, HUGE_PAGE_BYTES, LARGE_PAGE_BYTES, LARGE_PER_HUGE,
};

use crate::arch::boot::IDENTITY_MAP_END;

/// The one top-level entry of the boot tables covers this much.
const TOP_SPAN: u64 = 512 << 30;
/// Second-level entries, one per GiB of the top-level entry.
const SLOTS: usize = 512;

/// What an entry of the second level or of a GiB's table holds.
pub enum Entry {
    /// Nothing mapped.
    Invalid,
    /// A 1 GiB or 2 MiB page.
    Page,
    /// A table of 2 MiB entries at this physical address.
    Table(u64),
}

/// An architecture's page-table format and its rules for changing a live
/// entry.
pub trait PageTables {
    /// A 2 MiB or 1 GiB page's bits beside its address: RAM, write-back.
    const PAGE: u64;
    /// A table pointer's bits beside its address.
    const TABLE: u64;
    /// The boot tables' second level: 512 entries of a GiB each.
    fn second_level() -> *mut u64;
    /// Reads an entry.
    fn decode(entry: u64) -> Entry;
    /// Drops the calling CPU's translations of the 2 MiB page at
    /// `address`, just unmapped (arm64: every CPU's).
    fn drop_page(address: u64);
    /// Replaces the live second-level entry `entry` (a table by a 1 GiB
    /// page or back) with `value`, mapping the same frames.
    ///
    /// # Safety
    /// `entry` must be a second-level entry the direct map owns, under its
    /// lock, and `value` must map only RAM the direct map holds.
    unsafe fn replace(entry: *mut u64, value: u64);
    /// Makes the table writes before it visible to the walker.
    fn publish() {}
    /// Runs once after a change that split a 1 GiB page.
    fn after_split() {}
}

/// Why a hot-plugged block could not be mapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapError {
    /// The range is not whole 2 MiB pages between the boot map's end and
    /// 512 GiB (what the one top-level entry covers), or a device holds
    /// its GiB.
    Outside(u64),
    /// No heap for a table of 2 MiB entries.
    NoMemory,
}

impl fmt::Display for MapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MapError::Outside(address) => write!(
                f,
                "the range from {address:#x} is not whole 2 MiB pages between {IDENTITY_MAP_END:#x} and 512 GiB"
            ),
            MapError::NoMemory => f.write_str("no heap for a table of 2 MiB entries"),
        }
    }
}

impl core::error::Error for MapError {}

/// One GiB as the tables hold it: which 2 MiB pages are mapped, whether
/// as one 1 GiB page, and its table, kept while it is a 1 GiB page so
/// that a split never allocates. One record per GiB, so that a change
/// reads and writes one place rather than three arrays.
#[derive(Clone, Copy)]
struct Slot {
    mapped: GibMap,
    table: u64,
    huge: bool,
    /// Holds a device's registers ([`claim_for_device`]): never RAM's.
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
/// Tables of 2 MiB entries made so far.
static TABLES: AtomicU64 = AtomicU64::new(0);

/// How many tables of 2 MiB entries (x86-64's page directories) have been
/// made above the boot map so far.
pub fn directories_made() -> u64 {
    TABLES.load(Ordering::Relaxed)
}

/// How many GiB above the boot map are mapped by one 1 GiB page now.
pub fn huge_pages() -> usize {
    DIRECT_MAP
        .lock()
        .slots
        .iter()
        .filter(|slot| slot.huge)
        .count()
}

/// A zeroed table from the heap (identity-mapped: its address is its
/// physical address), kept for the rest of the run.
#[cold]
#[inline(never)]
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

/// The GiB spans of `[start, end)`, which must be whole 2 MiB pages
/// between the boot map's end and 512 GiB.
fn spans(start: u64, end: u64) -> Result<impl Iterator<Item = GibSpan>, MapError> {
    if start < IDENTITY_MAP_END || end > TOP_SPAN {
        return Err(MapError::Outside(start));
    }
    directmap::spans(start, end).map_err(|_| MapError::Outside(start))
}

/// The slots `[start, end)` touches, refused if a device holds one.
fn ram_slots(state: &mut DirectMap, start: u64, end: u64) -> Result<&mut [Slot], MapError> {
    let slots = &mut state.slots
        [(start / HUGE_PAGE_BYTES) as usize..end.div_ceil(HUGE_PAGE_BYTES) as usize];
    if slots.iter().any(|slot| slot.device) {
        return Err(MapError::Outside(start));
    }
    Ok(slots)
}

/// Gives every GiB that `[start, end)` touches its table, if it has none
/// yet: all of them before anything is mapped, so that a failure changes
/// nothing. The range is already checked (below 512 GiB).
fn make_tables(state: &mut DirectMap, start: u64, end: u64) -> Result<(), MapError> {
    for slot in ram_slots(state, start, end)? {
        if slot.table == 0 {
            slot.table = new_table()?;
        }
    }
    Ok(())
}

/// Maps (`map`) or unmaps `[start, end)` as [`hotkern_kernel::directmap`]
/// plans it: 1 GiB pages where a whole GiB is mapped, 2 MiB entries
/// elsewhere.
///
/// Kept short on purpose: QEMU's TCG translates each block of guest code
/// the first time it runs, at one to two microseconds per instruction on
/// the shared test host, and the first grow after boot runs this path for
/// the first time inside its timed page-table share. So the plan is made
/// once per GiB, from one slot record updated in place a word at a time
/// ([`GibMap::set`] says whether it changed anything).
fn change<P: PageTables>(start: u64, end: u64, map: bool) -> Result<(), MapError> {
    let spans = spans(start, end)?;
    let mut state = DIRECT_MAP.lock();
    if map {
        make_tables(&mut state, start, end)?;
    } else {
        ram_slots(&mut state, start, end)?;
    }
    let second_level = P::second_level();
    let mut split = false;
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
        // SAFETY: the slot is below 512 (the range ends below 512 GiB):
        // inside the second-level table; the lock is held.
        let entry = unsafe { second_level.add(span.gib as usize) };
        let page = |index: usize| gib + index as u64 * LARGE_PAGE_BYTES;
        match change {
            Change::Nothing => {}
            Change::Entries => {
                for index in span.pages.clone() {
                    let value = if map { page(index) | P::PAGE } else { 0 };
                    // SAFETY: index < 512, inside the table, which exists
                    // (made by a map before its first page); only this
                    // range's pages change, and nothing uses an unmapped
                    // one.
                    unsafe { table.add(index).write_volatile(value) };
                    // A not-present entry is never cached, so only an
                    // unmap drops translations.
                    if !map {
                        P::drop_page(page(index));
                    }
                }
                // SAFETY: as above; the entry was invalid or already
                // pointed at this table.
                unsafe { entry.write_volatile(slot.table | P::TABLE) };
                P::publish();
            }
            Change::Promote => {
                // SAFETY: the whole GiB is plugged and mapped write-back;
                // the lock is held.
                unsafe { P::replace(entry, gib | P::PAGE) };
            }
            Change::Split => {
                for index in 0..LARGE_PER_HUGE {
                    let value = if slot.mapped.contains(index) {
                        page(index) | P::PAGE
                    } else {
                        0
                    };
                    // SAFETY: index < 512; the table (made before the
                    // slot's first map) is not in use while the GiB is a
                    // 1 GiB page.
                    unsafe { table.add(index).write_volatile(value) };
                }
                // SAFETY: the table now maps what stays plugged.
                unsafe { P::replace(entry, slot.table | P::TABLE) };
                split = true;
            }
        }
        slot.huge = matches!(change, Change::Promote) || (slot.huge && change == Change::Nothing);
    }
    if split {
        P::after_split();
    }
    Ok(())
}

/// Maps `[start, end)` (whole 2 MiB pages above the boot map) identity,
/// write-back: hot-plugged RAM becomes usable. A GiB whose every 2 MiB is
/// then mapped becomes one 1 GiB page.
pub fn map_range<P: PageTables>(start: u64, end: u64) -> Result<(), MapError> {
    change::<P>(start, end, true)
}

/// Unmaps `[start, end)`, splitting a 1 GiB page into its table if part
/// of it stays.
pub fn unmap_range<P: PageTables>(start: u64, end: u64) -> Result<(), MapError> {
    change::<P>(start, end, false)
}

/// Makes the tables of every GiB `[start, end)` touches, mapping nothing:
/// a driver calls it when it probes, before its first plug, so that a
/// resize allocates no table (allocate before changing anything).
pub fn prepare_map(start: u64, end: u64) -> Result<(), MapError> {
    let first = start & !(HUGE_PAGE_BYTES - 1);
    let last = end.next_multiple_of(HUGE_PAGE_BYTES);
    // Only to check the range.
    drop(spans(first, last)?);
    make_tables(&mut DIRECT_MAP.lock(), first, last)
}

/// Takes the GiB holding the 2 MiB `block` from the direct map for good,
/// with `table` (static, zeroed) as its table, so that RAM is never mapped
/// beside a device's registers; `false` if that GiB is outside the direct
/// map's reach, already holds RAM, or a device took one before. Only
/// arm64 maps devices above its boot map.
#[cfg_attr(not(target_arch = "aarch64"), allow(dead_code))]
pub fn claim_for_device(block: u64, table: u64) -> bool {
    if !(IDENTITY_MAP_END..TOP_SPAN).contains(&block) {
        return false;
    }
    let mut state = DIRECT_MAP.lock();
    if state.slots.iter().any(|slot| slot.device) {
        return false;
    }
    let slot = &mut state.slots[(block / HUGE_PAGE_BYTES) as usize];
    if slot.table != 0 || slot.huge || slot.mapped != GibMap::EMPTY {
        return false;
    }
    slot.device = true;
    slot.table = table;
    true
}

/// Whether the tables map `address` (above the boot map), read from the
/// tables themselves rather than from what this module recorded.
pub fn is_mapped<P: PageTables>(address: u64) -> bool {
    if !(IDENTITY_MAP_END..TOP_SPAN).contains(&address) {
        return false;
    }
    let _state = DIRECT_MAP.lock();
    // SAFETY: the slot is below 512; the lock keeps the tables still.
    let entry = unsafe {
        P::second_level()
            .add((address / HUGE_PAGE_BYTES) as usize)
            .read_volatile()
    };
    match P::decode(entry) {
        Entry::Invalid => false,
        Entry::Page => true,
        Entry::Table(table) => {
            let index = ((address / LARGE_PAGE_BYTES) % LARGE_PER_HUGE as u64) as usize;
            // SAFETY: index < 512, inside the table the entry points at.
            let entry = unsafe { (table as *const u64).add(index).read_volatile() };
            matches!(P::decode(entry), Entry::Page)
        }
    }
}
