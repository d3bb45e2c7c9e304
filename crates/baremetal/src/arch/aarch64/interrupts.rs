//! The contract's interrupts on arm64: the vector table (`VBAR_EL1`), the
//! IRQ mask (`DAIF.I`), `WFI`, `BRK` for the breakpoint check, the GICv3's
//! end of interrupt (see [`super::exceptions`] and [`super::gic`]), and a
//! PCI device's legacy pin: the host bridge's `interrupt-map` names its SPI
//! ([`super::pci_host`]), which the distributor routes to the driver's CPU.
//! MSIs would need the GIC's ITS, which this kernel does not program: the
//! one device that interrupts, QEMU 7.2's virtio-mem-pci, has no MSI-X.

use core::arch::asm;
use core::fmt;

use super::pci_host::{MapError, Spi};

pub use super::cpu::{disable_interrupts as disable, enable_interrupts as enable};
pub use super::cpu::{halt_forever, wait_for_interrupt, without_interrupts};
pub use super::exceptions::{breakpoints, set_crash_handler};

/// Loads the vector table on the boot CPU and routes each interrupt to
/// its handler: the tick, the call SGI, the wake-up.
pub fn init() {
    super::exceptions::load();
    super::exceptions::set_irq_handler(super::gic::interrupt);
    super::gic::set_timer_handler(super::tick::tick);
    super::gic::set_call_handler(super::smp::run_call);
}

/// Takes a breakpoint (`BRK`), which the vector table counts and steps
/// over.
pub fn breakpoint() {
    // SAFETY: the vector table is loaded before anyone calls this, and its
    // handler counts a `BRK`, moves ELR past it and returns.
    unsafe { asm!("brk #0x4b", options(nomem, nostack)) };
}

/// Sets what a routed pin's interrupt runs.
pub fn set_device_handler(handler: fn()) {
    super::gic::set_device_handler(handler);
}

/// Ends the device interrupt being handled: nothing left to do, since the
/// GIC's dispatcher ([`super::gic::interrupt`]) writes the end of
/// interrupt itself once the handler returns (after it read the device's
/// status, so a level-sensitive line is low by then).
pub fn end_of_interrupt() {}

/// Waits for the next interrupt with the mask as it is.
pub fn halt() {
    // SAFETY: `WFI` only waits.
    unsafe { asm!("wfi", options(nomem, nostack)) };
}

/// Where a device's interrupt goes: the calling CPU, by its affinity.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceTarget {
    /// The CPU's affinity (`MPIDR_EL1`'s Aff fields).
    pub affinity: u64,
}

impl DeviceTarget {
    /// The MSI message that would deliver it: none, since MSIs on a GICv3
    /// go through its ITS, which this kernel does not program.
    pub fn message(self) -> Option<(u64, u32)> {
        None
    }
}

/// The calling CPU as a device interrupt's target.
pub fn device_target() -> DeviceTarget {
    DeviceTarget {
        affinity: super::cpu::affinity(),
    }
}

/// Why a device's legacy pin could not be routed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PinError {
    /// The function has no interrupt pin.
    Pin,
    /// No PCIe host bridge was read from the device tree.
    NoHost,
    /// The host bridge's `interrupt-map` has no SPI for it.
    Map(MapError),
    /// The GIC has no such SPI.
    Spi(u32),
}

impl fmt::Display for PinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PinError::Pin => f.write_str("the device has no interrupt pin"),
            PinError::NoHost => f.write_str("no PCIe host bridge in the device tree"),
            PinError::Map(MapError::Malformed) => {
                f.write_str("the host bridge's interrupt-map is malformed")
            }
            PinError::Map(MapError::NoEntry) => {
                f.write_str("the host bridge's interrupt-map has no entry for the pin")
            }
            PinError::Map(MapError::NotGicSpi) => {
                f.write_str("the interrupt-map entry is not an SPI of the GICv3")
            }
            PinError::Spi(intid) => write!(f, "the GICv3 has no SPI {intid}"),
        }
    }
}

impl core::error::Error for PinError {}

/// Where a routed pin goes: an SPI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PinRoute {
    /// The pin, 1 (INTA) to 4.
    pub pin: u8,
    /// The SPI's INTID and trigger.
    pub spi: Spi,
}

impl PinRoute {
    /// The number [`mask_pin`] and [`unmask_pin`] take: the INTID.
    pub fn number(self) -> u64 {
        u64::from(self.spi.intid)
    }
}

impl fmt::Display for PinRoute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "INT{} on SPI INTID {} ({}) through the GICv3 distributor",
            char::from(b'A' + self.pin - 1),
            self.spi.intid,
            if self.spi.level { "level" } else { "edge" }
        )
    }
}

/// Routes the pin of bus 0's `device`/`function` to `target`, masked:
/// the host bridge's `interrupt-map` names the SPI, the distributor sends
/// it to the target's affinity; [`unmask_pin`] lets it through.
pub fn route_pin(device: u8, function: u8, target: DeviceTarget) -> Result<PinRoute, PinError> {
    let pin = (super::pci::config_read(device, function, 0x3c) >> 8) as u8;
    if !(1..=4).contains(&pin) {
        return Err(PinError::Pin);
    }
    let host = super::pci::host().ok_or(PinError::NoHost)?;
    let spi = host.route(device, pin).map_err(PinError::Map)?;
    super::gic::route_spi(spi.intid, spi.level, target.affinity)
        .map_err(|error| PinError::Spi(error.0))?;
    Ok(PinRoute { pin, spi })
}

/// Stops the interrupts of the pin routed to INTID `number`.
pub fn mask_pin(number: u64) {
    if let Ok(intid) = u32::try_from(number) {
        super::gic::enable_spi(intid, false);
    }
}

/// Lets the interrupts of the pin routed to INTID `number` through.
pub fn unmask_pin(number: u64) {
    if let Ok(intid) = u32::try_from(number) {
        super::gic::enable_spi(intid, true);
    }
}
