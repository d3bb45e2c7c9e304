//! MSI-X for the modern transport: the capability in PCI configuration
//! space, its table in a memory BAR, and one entry aimed at a local APIC.
//!
//! The PCI Local Bus Specification 3.0, section 6.8.2: capability id
//! 0x11; its message control word (above the id and next pointer) holds
//! the table size minus one (bits 0–10), the function mask (bit 14) and
//! the enable bit (bit 15); the next dword names the table's BAR (bits
//! 0–2) and its offset in it. Each table entry is 16 bytes: message
//! address low and high, message data, vector control (bit 0 masks).
//! The message itself is the Intel SDM's (vol. 3, "Message Signalled
//! Interrupts"): address 0xFEE0_0000 with the destination APIC id in bits
//! 12–19 (physical destination, no redirection hint), data the vector
//! with fixed delivery and edge trigger (all other bits zero).
//!
//! Virtio 1.2, section 4.1.5.1.2: with MSI-X on, the driver names a table
//! entry in `config_msix_vector` and reads it back; the device answers
//! VIRTIO_MSI_NO_VECTOR (0xffff) when it cannot use that entry. Linux
//! does the same in `vp_modern_config_vector`
//! (drivers/virtio/virtio_pci_modern_dev.c).

use core::fmt;
use core::ptr::{read_volatile, write_volatile};

use crate::arch::boot::{IDENTITY_MAP_END, MMIO_START};
use crate::drivers::pci::Function;

/// The MSI-X capability id.
const CAP_MSIX: u8 = 0x11;
/// Message control bits, in the capability's first dword.
const CONTROL_ENABLE: u32 = 1 << 31;
const CONTROL_FUNCTION_MASK: u32 = 1 << 30;
/// A table entry's size and its vector control's mask bit.
const ENTRY_BYTES: u64 = 16;
const ENTRY_MASKED: u32 = 1;
/// The local APIC's MSI window (Intel SDM vol. 3, "Message Address
/// Register Format").
const MSI_ADDRESS: u32 = 0xfee0_0000;

/// Where a device's interrupt goes: a vector on one local APIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IrqTarget {
    /// The IDT vector, 0x20 or above.
    pub vector: u8,
    /// The destination's local APIC id (xAPIC: 0 to 254).
    pub apic_id: u32,
}

impl IrqTarget {
    /// The message address and data that deliver [`Self::vector`] to
    /// [`Self::apic_id`], fixed and edge-triggered.
    pub fn message(self) -> (u32, u32) {
        (
            MSI_ADDRESS | (self.apic_id & 0xff) << 12,
            u32::from(self.vector),
        )
    }
}

/// Why configuration changes cannot come as interrupts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MsixError {
    /// The function has no MSI-X capability.
    NoCapability,
    /// The table's BAR is not placed in the uncached identity map.
    TableBar(u8),
    /// An xAPIC destination above 254, or a vector below 0x20.
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
            MsixError::BadTarget => f.write_str("no MSI message reaches that APIC id or vector"),
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
    pub(super) fn program(&self, entry: u16, target: IrqTarget) -> Result<(), MsixError> {
        if target.apic_id > 254 || target.vector < 0x20 {
            return Err(MsixError::BadTarget);
        }
        let (address, data) = target.message();
        let entry = entry.min(self.entries - 1);
        // SAFETY: `find` checked that the whole table lies in a BAR placed
        // in the uncached identity map, and memory decoding is on; the
        // driver owns the device, and these are the entry's four dwords.
        unsafe {
            let control = self.entry_word(entry, 3);
            write_volatile(control, read_volatile(control) | ENTRY_MASKED);
            write_volatile(self.entry_word(entry, 0), address);
            write_volatile(self.entry_word(entry, 1), 0);
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
