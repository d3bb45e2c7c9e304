//! What the modern transport and its interrupt routing both read: a
//! register block in MMIO space, the capability list, and the common
//! configuration's MSI-X field.

use core::ptr::{read_volatile, write_volatile};

use crate::drivers::pci::Function;

/// The common configuration's `config_msix_vector` (virtio 1.2, 4.1.4.3).
pub const MSIX_CONFIG: u64 = 0x10;

/// A register block in MMIO space.
#[derive(Clone, Copy)]
pub struct Mmio(pub u64);

impl Mmio {
    pub fn read8(self, offset: u64) -> u8 {
        // SAFETY: `self.0 + offset` lies in a BAR `probe` placed in the
        // uncached identity map, inside the block its capability names.
        unsafe { read_volatile((self.0 + offset) as *const u8) }
    }

    pub fn read16(self, offset: u64) -> u16 {
        // SAFETY: as `read8`; the fields are naturally aligned.
        unsafe { read_volatile((self.0 + offset) as *const u16) }
    }

    pub fn read32(self, offset: u64) -> u32 {
        // SAFETY: as `read16`.
        unsafe { read_volatile((self.0 + offset) as *const u32) }
    }

    pub fn write8(self, offset: u64, value: u8) {
        // SAFETY: as `read8`; the driver owns the device.
        unsafe { write_volatile((self.0 + offset) as *mut u8, value) }
    }

    pub fn write16(self, offset: u64, value: u16) {
        // SAFETY: as `write8`.
        unsafe { write_volatile((self.0 + offset) as *mut u16, value) }
    }

    pub fn write32(self, offset: u64, value: u32) {
        // SAFETY: as `write8`.
        unsafe { write_volatile((self.0 + offset) as *mut u32, value) }
    }

    /// A 64-bit field as two 32-bit accesses, low half first (the
    /// specification allows it for the common configuration).
    pub fn write64(self, offset: u64, value: u64) {
        self.write32(offset, value as u32);
        self.write32(offset + 4, (value >> 32) as u32);
    }
}

/// Every capability of `function`: its offset and first dword (id, next
/// pointer and the capability's own 16 bits).
pub fn capability_list(function: Function) -> impl Iterator<Item = (u8, u32)> {
    let has_list = function.read(0x04) >> 16 & 0x10 != 0;
    let mut next = if has_list {
        function.read(0x34) as u8 & 0xfc
    } else {
        0
    };
    // A looping list ends after 48 entries (all configuration space holds).
    (0..48).map_while(move |_| {
        if next == 0 {
            return None;
        }
        let at = next;
        let header = function.read(at);
        next = (header >> 8) as u8 & 0xfc;
        Some((at, header))
    })
}
