//! The PVH start info: what the loader tells the kernel at entry.
//!
//! Layout from Xen's `public/arch-x86/hvm/start_info.h` (version 1, which
//! QEMU writes): a 56-byte `hvm_start_info` whose physical address arrives in
//! `%ebx`, with the kernel command line and a memory map of 24-byte entries
//! (address, size, E820 type) elsewhere in low memory. Everything is copied
//! out here, before the kernel hands any memory out, so the loader's pages
//! need not be kept.

use core::fmt;
use core::ptr;

use crate::arch::boot_info::{BootInfo, Region, RegionKind, MAX_REGIONS};

/// `hvm_start_info.magic`: "xEn3" with the top bit of "E" set.
pub const MAGIC: u32 = 0x336e_c578;

/// The neutral kind of an E820 type (ACPI's "Address Range Types").
fn kind(e820: u32) -> RegionKind {
    match e820 {
        1 => RegionKind::Ram,
        2 => RegionKind::Reserved,
        3 => RegionKind::FirmwareTables,
        4 => RegionKind::FirmwareStorage,
        _ => RegionKind::Other,
    }
}

/// The `hvm_start_info` fields, as Xen lays them out.
#[repr(C)]
#[derive(Clone, Copy)]
struct RawStartInfo {
    magic: u32,
    version: u32,
    flags: u32,
    nr_modules: u32,
    modlist_paddr: u64,
    cmdline_paddr: u64,
    rsdp_paddr: u64,
    memmap_paddr: u64,
    memmap_entries: u32,
    reserved: u32,
}

/// One `hvm_memmap_table_entry`.
#[repr(C)]
#[derive(Clone, Copy)]
struct RawRegion {
    addr: u64,
    size: u64,
    kind: u32,
    reserved: u32,
}

/// Why the start info cannot be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PvhError {
    /// `%ebx` was 0 or the structure would not fit below 4 GiB.
    BadAddress(u64),
    /// The magic number is wrong: not entered through PVH.
    BadMagic(u32),
    /// Version 0, or no memory map: nothing to feed physmem with.
    NoMemoryMap {
        /// The structure's version.
        version: u32,
    },
}

impl fmt::Display for PvhError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PvhError::BadAddress(addr) => write!(f, "start info address {addr:#x} is unusable"),
            PvhError::BadMagic(magic) => {
                write!(f, "start info magic {magic:#x}, expected {MAGIC:#x}")
            }
            PvhError::NoMemoryMap { version } => {
                write!(f, "start info version {version} carries no memory map")
            }
        }
    }
}

impl core::error::Error for PvhError {}

/// Whether `[addr, addr + len)` lies in the identity-mapped first 4 GiB
/// (the loader puts everything below 4 GiB) and is not at address 0 (which
/// the ABI uses for "absent").
fn readable(addr: u64, len: u64) -> bool {
    addr != 0
        && addr
            .checked_add(len)
            .is_some_and(|end| end <= crate::arch::boot::IDENTITY_MAP_END)
}

/// Copies the start info at physical address `addr` out of the loader's
/// memory, into the contract's [`BootInfo`] (the RSDP as its firmware
/// tables).
///
/// # Safety
/// `addr` is what the PVH entry found in `%ebx`, and the loader's memory
/// (the start info, the map, the command line) has not been reused yet.
pub unsafe fn read(addr: u64) -> Result<BootInfo, PvhError> {
    if !readable(addr, size_of_val::<RawStartInfo>()) {
        return Err(PvhError::BadAddress(addr));
    }
    // SAFETY: the loader wrote the structure there (contract) and the
    // address is identity-mapped (checked); unaligned reads make no
    // assumption about where the loader put it.
    let raw = unsafe { ptr::read_unaligned(addr as *const RawStartInfo) };
    if raw.magic != MAGIC {
        return Err(PvhError::BadMagic(raw.magic));
    }
    if raw.version < 1 || raw.memmap_entries == 0 {
        return Err(PvhError::NoMemoryMap {
            version: raw.version,
        });
    }
    let mut info = BootInfo::new("start info", raw.version, raw.rsdp_paddr);
    let entries = raw.memmap_entries as usize;
    let kept = entries.min(MAX_REGIONS);
    let entry_size = size_of_val::<RawRegion>();
    if !readable(raw.memmap_paddr, (kept as u64) * entry_size) {
        return Err(PvhError::BadAddress(raw.memmap_paddr));
    }
    for index in 0..kept {
        let at = raw.memmap_paddr + index as u64 * entry_size;
        // SAFETY: inside the map the loader wrote (contract), checked to
        // be identity-mapped above.
        let entry = unsafe { ptr::read_unaligned(at as *const RawRegion) };
        info.push_region(Region {
            start: entry.addr,
            end: entry.addr.saturating_add(entry.size),
            kind: kind(entry.kind),
        });
    }
    info.regions_dropped = entries - kept;
    if readable(raw.cmdline_paddr, 1) {
        let mut length = 0;
        while readable(raw.cmdline_paddr, length + 1) {
            // SAFETY: the command line is a NUL-terminated string the
            // loader wrote (contract); each byte read is checked to be
            // identity-mapped and the loop stops at the NUL.
            let byte = unsafe { ptr::read((raw.cmdline_paddr + length) as *const u8) };
            if byte == 0 || !info.push_command_line_byte(byte) {
                break;
            }
            length += 1;
        }
    }
    Ok(info)
}

/// The size of `T` as a `u64`.
fn size_of_val<T>() -> u64 {
    core::mem::size_of::<T>() as u64
}
