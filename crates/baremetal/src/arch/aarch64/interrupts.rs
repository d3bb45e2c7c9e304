//! The contract's interrupts on arm64: the vector table (`VBAR_EL1`), the
//! IRQ mask (`DAIF.I`), `WFI`, `BRK` for the breakpoint check, and the
//! GICv3's end of interrupt (see [`super::exceptions`] and [`super::gic`]).

use core::arch::asm;

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
