//! The contract's interrupts on x86-64: the IDT, the local APIC's end of
//! interrupt, and a device's interrupt to one CPU — an MSI message for a
//! local APIC, or the legacy pin through the PIIX3 and the I/O APIC (see
//! [`crate::arch::idt`], [`crate::arch::apic`], [`crate::arch::intx`]).

use core::arch::asm;

pub use super::apic::{DeviceTarget, VIRTIO_CONFIG_VECTOR as DEVICE_VECTOR};
pub use super::idt::{breakpoints, set_config_handler as set_device_handler, set_crash_handler};
pub use super::instructions::{breakpoint, halt_forever, without_interrupts};
pub use super::intx::{
    mask as mask_pin, route as route_pin, unmask as unmask_pin, PinError, PinRoute,
};
pub use super::smp::enable_interrupts as enable;

/// Builds the IDT and loads it on the boot CPU.
pub fn init() {
    super::idt::init();
    super::idt::load();
}

/// The calling CPU as a device interrupt's target, at [`DEVICE_VECTOR`]:
/// the handler `set_device_handler` installed runs there.
pub fn device_target() -> DeviceTarget {
    DeviceTarget {
        vector: DEVICE_VECTOR,
        apic_id: super::apic::id(),
    }
}

/// Signals the end of the device interrupt being handled.
pub fn end_of_interrupt() {
    super::apic::eoi();
}

/// Masks interrupts on the calling CPU.
pub fn disable() {
    // SAFETY: masking interrupts on the calling CPU hides nothing from
    // it: what arrives stays pending until they open.
    unsafe { asm!("cli", options(nomem, nostack)) };
}

/// Opens interrupts only for one wait: an interrupt already pending or
/// arriving wakes it, and interrupts are masked again after (`sti; hlt;
/// cli`, the `sti` shadow making the first pair atomic).
pub fn wait_for_interrupt() {
    // SAFETY: the caller runs with interrupts off and its handlers take
    // no lock it holds; an interrupt sent after the caller's checks wakes
    // the halt instead of being taken before it.
    unsafe { asm!("sti", "hlt", "cli", options(nomem, nostack)) };
}

/// Halts until the next interrupt, with interrupts as they are.
pub fn halt() {
    // SAFETY: `hlt` only waits; with interrupts open the next one ends it.
    unsafe { asm!("hlt", options(nomem, nostack)) };
}
