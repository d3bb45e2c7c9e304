//! The contract's interrupts on arm64: the vector table (`VBAR_EL1`), the
//! IRQ mask (`DAIF.I`), `WFI`, `BRK` for the breakpoint check, and the
//! GICv3's end of interrupt (see [`super::exceptions`] and [`super::gic`]).

use core::arch::asm;
use core::fmt;

pub use super::cpu::{disable_interrupts as disable, enable_interrupts as enable};
pub use super::cpu::{halt_forever, wait_for_interrupt, without_interrupts};
pub use super::exceptions::{breakpoints, set_crash_handler};

/// The device interrupt's number: none is routed on arm64 yet (no
/// capability needs one), so this names an SPI nothing raises.
pub const DEVICE_VECTOR: u8 = 0x30;

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

/// Sets what the device interrupt runs: no device interrupt is routed on
/// arm64 yet (see [`DEVICE_VECTOR`]), so it is kept and never called.
pub fn set_device_handler(_handler: fn()) {}

/// Ends the device interrupt being handled: the GIC's end comes from its
/// own dispatcher, so nothing is left to do.
pub fn end_of_interrupt() {}

/// Waits for the next interrupt with the mask as it is.
pub fn halt() {
    // SAFETY: `WFI` only waits.
    unsafe { asm!("wfi", options(nomem, nostack)) };
}

/// Where a device's interrupt goes: an interrupt number at the GIC. No
/// device interrupt is routed on arm64 yet (the runs that need one are
/// skipped), so nothing reaches it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceTarget {
    /// The GIC's INTID.
    pub intid: u32,
}

impl DeviceTarget {
    /// The MSI message that would deliver it: none, since MSIs on a GICv3
    /// go through its ITS, which this kernel does not program yet.
    pub fn message(self) -> Option<(u64, u32)> {
        None
    }
}

/// The device interrupt's target on the calling CPU.
pub fn device_target() -> DeviceTarget {
    DeviceTarget {
        intid: u32::from(DEVICE_VECTOR),
    }
}

/// Why a device's legacy pin could not be routed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PinError {
    /// The device tree's `interrupt-map` is not read yet on arm64.
    NotRouted,
}

impl fmt::Display for PinError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("PCI interrupt pins are not routed on arm64 yet")
    }
}

impl core::error::Error for PinError {}

/// Where a routed pin goes: an SPI.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PinRoute {
    /// The SPI's INTID.
    pub spi: u32,
}

impl PinRoute {
    /// The number [`mask_pin`] and [`unmask_pin`] take.
    pub fn number(self) -> u64 {
        u64::from(self.spi)
    }
}

impl fmt::Display for PinRoute {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SPI {}", self.spi)
    }
}

/// Routes a PCI function's pin: not yet on arm64 ([`PinError::NotRouted`]).
pub fn route_pin(_device: u8, _function: u8, _target: DeviceTarget) -> Result<PinRoute, PinError> {
    Err(PinError::NotRouted)
}

/// Masks a routed pin: none is routed.
pub fn mask_pin(_number: u64) {}

/// Unmasks a routed pin: none is routed.
pub fn unmask_pin(_number: u64) {}
