//! The contract's PCI access on arm64: bus 0's configuration space
//! through the host bridge's ECAM, and PCI I/O space through its I/O
//! window, both as the device tree's `pci-host-ecam-generic` node says
//! ([`super::pci_host`]).
//!
//! ECAM (PCI Express Base Specification, 7.2.2) puts function
//! `bus:device.function`'s 4 KiB of configuration space at `bus << 20 |
//! device << 15 | function << 12` from its base. `-M virt` puts the ECAM
//! at 256.25 GiB when it has high memory (its `highmem-ecam`), above the
//! boot map: [`init`] maps bus 0's 1 MiB there Device-nGnRE (one 2 MiB
//! block, [`direct::map_device`]). The I/O window (64 KiB at 0x3eff_0000)
//! and the 32-bit memory window the drivers place BARs in (0x1000_0000 up)
//! lie in the boot map's Device GiB already. Before [`init`], or on a
//! machine without a host bridge, the bus reads as empty (all ones).

use core::ptr::{read_volatile, write_volatile};

use super::boot::{IDENTITY_MAP_END, MMIO_START, RAM_WINDOW_START};
use super::devicetree::Machine;
use super::direct;
use super::pci_host::{HostBridge, HostError, ECAM_BUS_BYTES};

/// The host bridge [`init`] read.
static HOST: spin::Once<HostBridge> = spin::Once::new();

/// The host bridge, once [`init`] found one.
pub(super) fn host() -> Option<&'static HostBridge> {
    HOST.get()
}

/// Reads the host bridge from the machine and maps bus 0's ECAM: once,
/// on the boot CPU, before the drivers probe.
pub(super) fn init(machine: &Machine) -> Result<&'static HostBridge, HostError> {
    let host = HostBridge::read(machine.pcie_ecam, machine.pcie, machine.gic_node)?;
    let (ecam, _) = host.ecam;
    let in_device_gib = ecam >= MMIO_START && ecam + ECAM_BUS_BYTES <= RAM_WINDOW_START;
    if !in_device_gib {
        // One 2 MiB block must hold the whole bus.
        let offset = ecam % (2 << 20);
        if ecam < IDENTITY_MAP_END
            || offset + ECAM_BUS_BYTES > (2 << 20)
            || direct::map_device(ecam).is_err()
        {
            return Err(HostError::Ecam(ecam));
        }
    }
    // Device GiB only: I/O space goes through plain loads and stores there.
    let mut host = host;
    host.io = host
        .io
        .filter(|io| io.cpu >= MMIO_START && io.cpu + io.size <= RAM_WINDOW_START);
    Ok(HOST.call_once(|| host))
}

/// The 32-bit memory window BARs are placed in: `(start, end)` as CPU
/// addresses, which equal the bus addresses (checked when it was read).
/// Empty without a host bridge.
///
/// ```ignore
/// let (start, end) = arch::pci::memory_window(); // virt: 0x1000_0000, 0x3eff_0000
/// ```
pub fn memory_window() -> (u64, u64) {
    host().map_or((0, 0), |host| {
        (host.memory.cpu, host.memory.cpu + host.memory.size)
    })
}

/// The ECAM address of bus 0's `device`/`function` at `offset` (a
/// multiple of 4), if there is a host bridge.
fn config_address(device: u8, function: u8, offset: u8) -> Option<u64> {
    let (ecam, _) = host()?.ecam;
    let within =
        u64::from(device & 31) << 15 | u64::from(function & 7) << 12 | u64::from(offset & 0xfc);
    Some(ecam + within)
}

/// Reads the configuration dword at `offset` (a multiple of 4) of bus 0's
/// `device`/`function`; all ones when nothing answers.
pub fn config_read(device: u8, function: u8, offset: u8) -> u32 {
    match config_address(device, function, offset) {
        // SAFETY: inside bus 0's ECAM, which `init` mapped Device-nGnRE; a
        // read of an absent function returns all ones.
        Some(address) => unsafe { read_volatile(address as *const u32) },
        None => u32::MAX,
    }
}

/// Writes the configuration dword at `offset` (a multiple of 4).
pub fn config_write(device: u8, function: u8, offset: u8, value: u32) {
    if let Some(address) = config_address(device, function, offset) {
        // SAFETY: as `config_read`; the caller writes a register it owns.
        unsafe { write_volatile(address as *mut u32, value) }
    }
}

/// Where I/O port `port` of `bytes` bytes appears in memory, if inside
/// the I/O window.
fn io_address(port: u16, bytes: u64) -> Option<u64> {
    let io = host()?.io?;
    let offset = u64::from(port).checked_sub(io.bus)?;
    (offset + bytes <= io.size).then_some(io.cpu + offset)
}

/// Reads 32 bits at `port` of PCI I/O space (all ones outside the window).
///
/// # Safety
/// `port` belongs to a device the caller drives.
pub unsafe fn io_read32(port: u16) -> u32 {
    // SAFETY: inside the I/O window (the Device GiB); the caller's contract.
    io_address(port, 4).map_or(u32::MAX, |at| unsafe { read_volatile(at as *const u32) })
}

/// Reads 16 bits at `port` of PCI I/O space.
///
/// # Safety
/// As [`io_read32`].
pub unsafe fn io_read16(port: u16) -> u16 {
    // SAFETY: as `io_read32`.
    io_address(port, 2).map_or(u16::MAX, |at| unsafe { read_volatile(at as *const u16) })
}

/// Writes 8 bits at `port` of PCI I/O space (nothing outside the window).
///
/// # Safety
/// As [`io_read32`].
pub unsafe fn io_write8(port: u16, value: u8) {
    if let Some(at) = io_address(port, 1) {
        // SAFETY: as `io_read32`.
        unsafe { write_volatile(at as *mut u8, value) }
    }
}

/// Writes 16 bits at `port` of PCI I/O space.
///
/// # Safety
/// As [`io_read32`].
pub unsafe fn io_write16(port: u16, value: u16) {
    if let Some(at) = io_address(port, 2) {
        // SAFETY: as `io_read32`.
        unsafe { write_volatile(at as *mut u16, value) }
    }
}

/// Writes 32 bits at `port` of PCI I/O space.
///
/// # Safety
/// As [`io_read32`].
pub unsafe fn io_write32(port: u16, value: u32) {
    if let Some(at) = io_address(port, 4) {
        // SAFETY: as `io_read32`.
        unsafe { write_volatile(at as *mut u32, value) }
    }
}
