//! The contract's PCI access on x86-64: configuration space through the
//! legacy ports 0xCF8/0xCFC (mechanism #1), and I/O space as ports.

use super::instructions::{inl, inw, outb, outl, outw};

/// Where the drivers place the BARs the firmware left unassigned: inside
/// QEMU i440fx's PCI hole, above the RAM the kernel maps write-back and
/// below the I/O APIC (0xfec0_0000).
const MEMORY_WINDOW: (u64, u64) = (0xe000_0000, 0xfe00_0000);

/// The memory window BARs are placed in: `(start, end)`.
///
/// ```ignore
/// assert_eq!(arch::pci::memory_window(), (0xe000_0000, 0xfe00_0000));
/// ```
pub fn memory_window() -> (u64, u64) {
    MEMORY_WINDOW
}

const ADDRESS: u16 = 0xcf8;
const DATA: u16 = 0xcfc;

/// Mechanism #1's address of the configuration dword at `offset` of
/// bus 0's `device`/`function`: enable bit, bus 0, device, function,
/// register.
fn address(device: u8, function: u8, offset: u8) -> u32 {
    0x8000_0000 | u32::from(device) << 11 | u32::from(function) << 8 | u32::from(offset & 0xfc)
}

/// Reads the configuration dword at `offset` (a multiple of 4) of bus 0's
/// `device`/`function`.
pub fn config_read(device: u8, function: u8, offset: u8) -> u32 {
    // SAFETY: mechanism #1's ports select and read a configuration dword;
    // nothing else in the kernel uses them, and only the boot CPU touches
    // PCI.
    unsafe {
        outl(ADDRESS, address(device, function, offset));
        inl(DATA)
    }
}

/// Writes the configuration dword at `offset` (a multiple of 4).
pub fn config_write(device: u8, function: u8, offset: u8, value: u32) {
    // SAFETY: as `config_read`; the caller writes a register it owns (the
    // command register or a BAR of the device it drives).
    unsafe {
        outl(ADDRESS, address(device, function, offset));
        outl(DATA, value);
    }
}

/// Reads 32 bits at `port` of PCI I/O space.
///
/// # Safety
/// `port` belongs to a device the caller drives.
pub unsafe fn io_read32(port: u16) -> u32 {
    // SAFETY: the caller's contract.
    unsafe { inl(port) }
}

/// Reads 16 bits at `port` of PCI I/O space.
///
/// # Safety
/// As [`io_read32`].
pub unsafe fn io_read16(port: u16) -> u16 {
    // SAFETY: the caller's contract.
    unsafe { inw(port) }
}

/// Writes 8 bits at `port` of PCI I/O space.
///
/// # Safety
/// As [`io_read32`].
pub unsafe fn io_write8(port: u16, value: u8) {
    // SAFETY: the caller's contract.
    unsafe { outb(port, value) }
}

/// Writes 16 bits at `port` of PCI I/O space.
///
/// # Safety
/// As [`io_read32`].
pub unsafe fn io_write16(port: u16, value: u16) {
    // SAFETY: the caller's contract.
    unsafe { outw(port, value) }
}

/// Writes 32 bits at `port` of PCI I/O space.
///
/// # Safety
/// As [`io_read32`].
pub unsafe fn io_write32(port: u16, value: u32) {
    // SAFETY: the caller's contract.
    unsafe { outl(port, value) }
}
