//! MSI-X for the modern transport: the capability in PCI configuration
//! space, its table in a memory BAR, and one entry aimed at a CPU (the
//! message, address and data, is the arch's: `DeviceTarget::message`).
//!
//! The PCI Local Bus Specification 3.0, section 6.8.2: capability id
//! 0x11; its message control word (above the id and next pointer) holds
//! the table size minus one (bits 0–10), the function mask (bit 14) and
//! the enable bit (bit 15); the next dword names the table's BAR (bits
//! 0–2) and its offset in it. Each table entry is 16 bytes: message
//! address low and high, message data, vector control (bit 0 masks).
//!
//! Virtio 1.2, section 4.1.5.1.2: with MSI-X on, the driver names a table
//! entry in `config_msix_vector` and reads it back; the device answers
//! VIRTIO_MSI_NO_VECTOR (0xffff) when it cannot use that entry. Linux
//! does the same in `vp_modern_config_vector`
//! (drivers/virtio/virtio_pci_modern_dev.c).

use core::fmt;
use core::ptr::{read_volatile, write_volatile};

use crate::arch::boot::{IDENTITY_MAP_END, MMIO_START};
use crate::arch::interrupts::DeviceTarget;
use crate::drivers::pci::Function;

/// The MSI-X capability id.
const CAP_MSIX: u8 = 0x11;
/// Message control bits, in the capability's first dword.
const CONTROL_ENABLE: u32 = 1 << 31;
const CONTROL_FUNCTION_MASK: u32 = 1 << 30;
/// A table entry's size and its vector control's mask bit.
const ENTRY_BYTES: u64 = 16;
const ENTRY_MASKED: u32 = 1;
/// Why configuration changes cannot come as interrupts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MsixError {
    /// The function has no MSI-X capability.
    NoCapability,
    /// The table's BAR is not placed in the uncached identity map.
    TableBar(u8),
    /// No MSI message reaches the target (x86-64: an xAPIC destination
    /// above 254, or a vector below 0x20).
    BadTarget,
    /// The device read back VIRTIO_MSI_NO_VECTOR for the entry.
    Refused,
}

impl fmt::Display for MsixError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MsixError::NoCapability => f.write_str("the device has no MSI-X capability"),
            MsixError::TableBar(bar) => {
                write!(f, "the MSI-X table's BAR {bar} is not mapped uncached")
            }
            MsixError::BadTarget => f.write_str("no MSI message reaches that CPU or vector"),
            MsixError::Refused => {
                f.write_str("the device answered VIRTIO_MSI_NO_VECTOR for the configuration vector")
            }
        }
    }
}

impl core::error::Error for MsixError {}

/// A function's MSI-X capability and table.
pub(super) struct Msix {
    function: Function,
    /// The capability's offset in configuration space.
    at: u8,
    /// The table's address in the uncached identity map.
    table: u64,
    /// Table entries.
    entries: u16,
}

impl Msix {
    /// Finds the capability among `capabilities` (offset, first dword) and
    /// its table in `bars` (the placed BAR addresses).
    pub(super) fn find(
        function: Function,
        mut capabilities: impl Iterator<Item = (u8, u32)>,
        bars: &[u64; 6],
    ) -> Result<Msix, MsixError> {
        let (at, header) = capabilities
            .find(|&(_, header)| header as u8 == CAP_MSIX)
            .ok_or(MsixError::NoCapability)?;
        let entries = ((header >> 16) & 0x7ff) as u16 + 1;
        let place = function.read(at + 4);
        let bar = (place & 0b111) as u8;
        let base = bars.get(usize::from(bar)).copied().unwrap_or(0);
        let table = base + u64::from(place & !0b111);
        let end = table + u64::from(entries) * ENTRY_BYTES;
        if base == 0 || table < MMIO_START || end > IDENTITY_MAP_END {
            return Err(MsixError::TableBar(bar));
        }
        Ok(Msix {
            function,
            at,
            table,
            entries,
        })
    }

    fn entry_word(&self, entry: u16, word: u64) -> *mut u32 {
        (self.table + u64::from(entry) * ENTRY_BYTES + 4 * word) as *mut u32
    }

    /// Points `entry` (below [`Self::entries`]) at `target` and unmasks
    /// it; masked while its address and data change, so that no message
    /// goes out half written.
    pub(super) fn program(&self, entry: u16, target: DeviceTarget) -> Result<(), MsixError> {
        let (address, data) = target.message().ok_or(MsixError::BadTarget)?;
        let entry = entry.min(self.entries - 1);
        // SAFETY: `find` checked that the whole table lies in a BAR placed
        // in the uncached identity map, and memory decoding is on; the
        // driver owns the device, and these are the entry's four dwords.
        unsafe {
            let control = self.entry_word(entry, 3);
            write_volatile(control, read_volatile(control) | ENTRY_MASKED);
            write_volatile(self.entry_word(entry, 0), address as u32);
            write_volatile(self.entry_word(entry, 1), (address >> 32) as u32);
            write_volatile(self.entry_word(entry, 2), data);
            write_volatile(control, read_volatile(control) & !ENTRY_MASKED);
        }
        Ok(())
    }

    /// Turns MSI-X on for the function (which turns its INTx off) with no
    /// function-wide mask.
    pub(super) fn enable(&self) {
        let header = self.function.read(self.at);
        self.function
            .write(self.at, (header | CONTROL_ENABLE) & !CONTROL_FUNCTION_MASK);
    }

    /// Turns MSI-X off again (the device's answer made it useless).
    pub(super) fn disable(&self) {
        let header = self.function.read(self.at);
        self.function.write(self.at, header & !CONTROL_ENABLE);
    }
}
