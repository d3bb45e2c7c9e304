//! Just enough ACPI to find the CPUs: RSDP → RSDT/XSDT → MADT, and the
//! local APIC entries of the MADT.
//!
//! Layouts from the ACPI specification 6.x (sections "Root System
//! Description Pointer", "System Description Table Header" and "Multiple
//! APIC Description Table"). Every table's signature, length and checksum is
//! checked before anything in it is used; a table that fails gives an
//! [`AcpiError`], never a panic. Tables are read in place through the
//! identity map, so they must lie below its end.

use core::fmt;

use crate::arch::boot::IDENTITY_MAP_END;
use crate::arch::cpu::MAX_CPUS;

/// The SDT header's size.
const HEADER: usize = 36;
/// Tables larger than this are taken for garbage.
const MAX_TABLE: usize = 1 << 20;

/// Why the CPUs could not be found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AcpiError {
    /// The start info gave no RSDP address.
    NoRsdp,
    /// A table lies (partly) outside the identity map.
    Unmapped(u64),
    /// A signature was not the expected one.
    Signature(&'static str),
    /// A checksum did not sum to zero.
    Checksum(&'static str),
    /// A length field was too small or too large.
    Length(&'static str),
    /// No MADT among the root table's entries.
    NoMadt,
}

impl fmt::Display for AcpiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AcpiError::NoRsdp => f.write_str("no RSDP address in the start info"),
            AcpiError::Unmapped(address) => write!(f, "table at {address:#x} is not mapped"),
            AcpiError::Signature(table) => write!(f, "{table}: wrong signature"),
            AcpiError::Checksum(table) => write!(f, "{table}: bad checksum"),
            AcpiError::Length(table) => write!(f, "{table}: bad length"),
            AcpiError::NoMadt => f.write_str("no MADT in the root table"),
        }
    }
}

impl core::error::Error for AcpiError {}

/// The CPUs the MADT lists as enabled (or online-capable).
pub struct Cpus {
    apic_ids: [u32; MAX_CPUS],
    count: usize,
    /// Enabled CPUs beyond [`MAX_CPUS`], not kept.
    pub dropped: usize,
}

impl Cpus {
    /// The APIC ids, in MADT order (the boot CPU is usually first).
    pub fn apic_ids(&self) -> &[u32] {
        &self.apic_ids[..self.count]
    }
}

/// `len` bytes of physical memory at `address`, if the identity map holds
/// them.
fn bytes(address: u64, len: usize) -> Result<&'static [u8], AcpiError> {
    let end = address.checked_add(len as u64);
    if address == 0 || end.is_none_or(|end| end > IDENTITY_MAP_END) {
        return Err(AcpiError::Unmapped(address));
    }
    // SAFETY: the range lies inside the identity map (checked above), which
    // is never unmapped, and the firmware's tables are not written while the
    // kernel runs; a read of RAM or of a hole has no side effect.
    Ok(unsafe { core::slice::from_raw_parts(address as *const u8, len) })
}

fn checksum_ok(data: &[u8]) -> bool {
    data.iter().fold(0u8, |sum, byte| sum.wrapping_add(*byte)) == 0
}

fn u32_at(data: &[u8], offset: usize) -> u32 {
    let mut word = [0; 4];
    word.copy_from_slice(&data[offset..offset + 4]);
    u32::from_le_bytes(word)
}

fn u64_at(data: &[u8], offset: usize) -> u64 {
    let mut word = [0; 8];
    word.copy_from_slice(&data[offset..offset + 8]);
    u64::from_le_bytes(word)
}

/// A whole system description table at `address`, checked.
fn table(
    address: u64,
    signature: &[u8; 4],
    name: &'static str,
) -> Result<&'static [u8], AcpiError> {
    let header = bytes(address, HEADER)?;
    if &header[..4] != signature {
        return Err(AcpiError::Signature(name));
    }
    let len = u32_at(header, 4) as usize;
    if !(HEADER..=MAX_TABLE).contains(&len) {
        return Err(AcpiError::Length(name));
    }
    let data = bytes(address, len)?;
    if !checksum_ok(data) {
        return Err(AcpiError::Checksum(name));
    }
    Ok(data)
}

/// The MADT's address, from the RSDP at `rsdp`.
fn find_madt(rsdp: u64) -> Result<&'static [u8], AcpiError> {
    if rsdp == 0 {
        return Err(AcpiError::NoRsdp);
    }
    let pointer = bytes(rsdp, 20)?;
    if &pointer[..8] != b"RSD PTR " {
        return Err(AcpiError::Signature("RSDP"));
    }
    if !checksum_ok(pointer) {
        return Err(AcpiError::Checksum("RSDP"));
    }
    let revision = pointer[15];
    let (root, entry_size) = if revision >= 2 {
        let extended = bytes(rsdp, 36)?;
        if !checksum_ok(extended) {
            return Err(AcpiError::Checksum("RSDP (extended)"));
        }
        (table(u64_at(extended, 24), b"XSDT", "XSDT")?, 8)
    } else {
        (table(u64::from(u32_at(pointer, 16)), b"RSDT", "RSDT")?, 4)
    };
    let entries = &root[HEADER..];
    for entry in entries.chunks_exact(entry_size) {
        let address = if entry_size == 8 {
            u64_at(entry, 0)
        } else {
            u64::from(u32_at(entry, 0))
        };
        if bytes(address, 4)? == b"APIC" {
            return table(address, b"APIC", "MADT");
        }
    }
    Err(AcpiError::NoMadt)
}

/// The enabled CPUs listed by the MADT that the RSDP at `rsdp` leads to.
pub fn cpus(rsdp: u64) -> Result<Cpus, AcpiError> {
    let madt = find_madt(rsdp)?;
    let mut cpus = Cpus {
        apic_ids: [0; MAX_CPUS],
        count: 0,
        dropped: 0,
    };
    // The header, then the local APIC address and flags (8 bytes).
    let mut offset = HEADER + 8;
    if madt.len() < offset {
        return Err(AcpiError::Length("MADT"));
    }
    while offset < madt.len() {
        let rest = &madt[offset..];
        if rest.len() < 2 || usize::from(rest[1]) < 2 || usize::from(rest[1]) > rest.len() {
            return Err(AcpiError::Length("MADT entry"));
        }
        let (kind, len) = (rest[0], usize::from(rest[1]));
        // Type 0: processor local APIC (ACPI id, APIC id, flags); bit 0
        // enabled, bit 1 online-capable.
        if kind == 0 {
            if len < 8 {
                return Err(AcpiError::Length("MADT local APIC entry"));
            }
            let flags = u32_at(rest, 4);
            if flags & 0b11 != 0 {
                if cpus.count < MAX_CPUS {
                    cpus.apic_ids[cpus.count] = u32::from(rest[3]);
                    cpus.count += 1;
                } else {
                    cpus.dropped += 1;
                }
            }
        }
        offset += len;
    }
    Ok(cpus)
}

/// Scratch room for [`refuses_bad_tables`]: a copy of the RSDP, in the
/// kernel image and so inside the identity map.
struct Scratch(core::cell::UnsafeCell<[u8; 36]>);

// SAFETY: only the boot CPU uses it, once, in `refuses_bad_tables`.
unsafe impl Sync for Scratch {}

static SCRATCH: Scratch = Scratch(core::cell::UnsafeCell::new([0; 36]));

/// Feeds the parser broken input and says whether each gave the expected
/// error: no RSDP, an address past the identity map, and a copy of the real
/// RSDP at `rsdp` with one byte changed (bad checksum) and with a broken
/// signature. Call on the boot CPU only.
pub fn refuses_bad_tables(rsdp: u64) -> bool {
    let Ok(real) = bytes(rsdp, 20) else {
        return false;
    };
    let address = SCRATCH.0.get() as u64;
    // Each change goes through its own short-lived borrow, so none is live
    // while the parser reads the copy through its address.
    let change = |edit: &dyn Fn(&mut [u8; 36])| {
        // SAFETY: the boot CPU alone calls this, so nothing else touches
        // the scratch copy, and no other reference to it is live.
        edit(unsafe { &mut *SCRATCH.0.get() })
    };
    change(&|copy| copy[..20].copy_from_slice(real));
    change(&|copy| copy[9] ^= 0x5a);
    let bad_checksum = cpus(address).err() == Some(AcpiError::Checksum("RSDP"));
    change(&|copy| copy[0] = b'X');
    let bad_signature = cpus(address).err() == Some(AcpiError::Signature("RSDP"));
    cpus(0).err() == Some(AcpiError::NoRsdp)
        && cpus(IDENTITY_MAP_END - 8).err() == Some(AcpiError::Unmapped(IDENTITY_MAP_END - 8))
        && bad_checksum
        && bad_signature
}
