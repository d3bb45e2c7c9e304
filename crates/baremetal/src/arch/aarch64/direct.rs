//! arm64's translation-table side of the shared direct map
//! ([`crate::arch::direct_map`]): each aligned GiB above the boot map is
//! one level-1 entry of the boot tables, a table of 2 MiB blocks while part
//! of it is plugged and one 1 GiB block once all of it is; and the one
//! device GiB (`map_device`).
//!
//! What differs from x86-64 is the Arm rule for changing a live entry
//! between a block and a table (Arm ARM D8.14, "break-before-make"): the
//! old entry is made invalid and its translations invalidated everywhere
//! before the new one is written. The invalidations are broadcast to every
//! CPU of the inner-shareable domain (`TLBI ...IS`), so unlike x86-64's
//! `invlpg` no other CPU has to be called.

use core::arch::asm;

use hotkern_kernel::directmap::{HUGE_PAGE_BYTES, LARGE_PAGE_BYTES};

use crate::arch::boot::{self, NORMAL_BLOCK};
use crate::arch::direct_map::{self, Entry, PageTables};
pub use crate::arch::direct_map::{directories_made, huge_pages, prepare_map, MapError};

/// A table descriptor's type bits.
const TABLE: u64 = 0b11;
/// An output address's bits in a descriptor.
const ADDRESS_MASK: u64 = 0x0000_ffff_ffff_f000;

/// arm64's translation tables under the shared direct map
/// ([`crate::arch::direct_map`]): level-1 entries of 1 GiB blocks or
/// level-2 tables of 2 MiB blocks, changed break-before-make.
pub struct Tables;

impl PageTables for Tables {
    const PAGE: u64 = NORMAL_BLOCK;
    const TABLE: u64 = TABLE;

    fn second_level() -> *mut u64 {
        boot::boot_level1()
    }

    fn decode(entry: u64) -> Entry {
        match entry & 0b11 {
            0b01 => Entry::Page,
            TABLE => Entry::Table(entry & ADDRESS_MASK),
            _ => Entry::Invalid,
        }
    }

    fn drop_page(address: u64) {
        invalidate_page(address);
    }

    /// Break (invalid), invalidate every CPU's translations of the old
    /// entry, make.
    unsafe fn replace(entry: *mut u64, value: u64) {
        // SAFETY: the caller's promise.
        unsafe { entry.write_volatile(0) };
        invalidate_all();
        // SAFETY: as above.
        unsafe { entry.write_volatile(value) };
        publish();
    }

    fn publish() {
        publish();
    }
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

/// Maps `[start, end)` (whole 2 MiB pages above the boot map) identity,
/// Normal write-back; a GiB then wholly mapped becomes one block.
#[hotkern_trace::function]
pub fn map_range(start: u64, end: u64) -> Result<(), MapError> {
    direct_map::map_range::<Tables>(start, end)
}

/// Unmaps `[start, end)` and invalidates it on every CPU.
#[hotkern_trace::function]
pub fn unmap_range(start: u64, end: u64) -> Result<(), MapError> {
    direct_map::unmap_range::<Tables>(start, end)
}

/// Unmaps the 2 MiB at `address`.
pub fn unmap_large(address: u64) -> Result<(), MapError> {
    unmap_range(address, address.saturating_add(LARGE_PAGE_BYTES))
}

/// Whether the tables map `address` (above the boot map), read from the
/// tables themselves.
pub fn is_mapped(address: u64) -> bool {
    direct_map::is_mapped::<Tables>(address)
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
    // SAFETY: only a raw pointer is taken; the table is written only
    // below, once (the claim succeeds once), while its GiB's level-1
    // entry is still invalid.
    let table = unsafe { (&raw mut DEVICE_TABLE.0).cast::<u64>() };
    if !direct_map::claim_for_device(block, table as u64) {
        return Err(MapError::Outside(address));
    }
    let gib = (block / HUGE_PAGE_BYTES) as usize;
    let index = ((block % HUGE_PAGE_BYTES) / LARGE_PAGE_BYTES) as usize;
    // SAFETY: index < 512; the entries are plain words nothing else reads
    // until the level-1 entry below points at them.
    unsafe { table.add(index).write_volatile(block | boot::DEVICE_BLOCK) };
    // SAFETY: the GiB's level-1 entry, invalid until now (no RAM there).
    unsafe {
        boot::boot_level1()
            .add(gib)
            .write_volatile(table as u64 | TABLE)
    };
    publish();
    Ok(())
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
