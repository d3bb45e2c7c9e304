//! PCI configuration space, through the arch's access to it (x86-64:
//! ports 0xCF8/0xCFC; aarch64: ECAM): enough to find a device on bus 0
//! and give it the I/O ports the firmware may not have (qboot assigns no
//! BARs).

use crate::arch::pci;

/// A function on bus 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Function {
    /// Device number, 0 to 31.
    pub device: u8,
    /// Function number, 0 to 7.
    pub function: u8,
}

impl Function {
    /// Reads the configuration dword at `offset` (a multiple of 4),
    /// through the arch's configuration access.
    pub fn read(self, offset: u8) -> u32 {
        pci::config_read(self.device, self.function, offset)
    }

    /// Writes the configuration dword at `offset` (a multiple of 4); the
    /// caller writes a register it owns (the command register or a BAR of
    /// the device it drives).
    pub fn write(self, offset: u8, value: u32) {
        pci::config_write(self.device, self.function, offset, value);
    }

    /// Vendor and device ids.
    pub fn ids(self) -> (u16, u16) {
        let word = self.read(0);
        (word as u16, (word >> 16) as u16)
    }

    /// The I/O port base of BAR `index`, assigning it `base` (rounded up
    /// to the BAR's size) if the firmware left it unassigned, as qboot
    /// does. `None` if the BAR is not an I/O BAR.
    pub fn io_bar(self, index: u8, base: u16) -> Option<u16> {
        let offset = 0x10 + 4 * index;
        let bar = self.read(offset);
        if bar & 1 == 0 {
            return None;
        }
        if bar & !0b11 != 0 {
            return Some((bar & !0b11) as u16);
        }
        // Sizing: write all ones, read back the bits the device keeps.
        self.write(offset, 0xffff_ffff);
        let size = (!(self.read(offset) & !0b11)).wrapping_add(1) & 0xffff;
        let size = size.max(4);
        let assigned = u32::from(base).next_multiple_of(size);
        self.write(offset, assigned | 1);
        Some(assigned as u16)
    }

    /// Turns on I/O space decoding and bus mastering (the device's DMA).
    pub fn enable_io_and_dma(self) {
        let command = self.read(0x04);
        self.write(0x04, command | 0b101);
    }
}

/// The first function on bus 0 with these ids.
pub fn find(vendor: u16, device: u16) -> Option<Function> {
    (0..32u8)
        .flat_map(|device| (0..8u8).map(move |function| Function { device, function }))
        .find(|f| f.ids() == (vendor, device))
}
