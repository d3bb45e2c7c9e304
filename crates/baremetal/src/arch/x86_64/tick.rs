//! The contract's tick on x86-64: the local APIC timer, periodic at the
//! tick rate (see [`crate::arch::apic`]).

pub use super::apic::{hz, sched_ticks, set_hz, set_tick_handler, ticks};

/// The timer's name on the console.
pub const TIMER_NAME: &str = "local APIC timer";

/// Enables the calling CPU's local APIC, measures its timer against the
/// clock (`clock_hz`) and starts the tick; the timer's rate in Hz (0 if
/// it did not count, and then no tick runs).
pub fn start_on_boot_cpu(clock_hz: u64) -> u64 {
    super::apic::enable();
    let timer_hz = super::apic::calibrate(clock_hz);
    super::apic::start_tick();
    timer_hz
}

/// Starts the periodic tick on the calling CPU.
pub fn start() {
    super::apic::start_tick();
}

/// Stops the calling CPU's tick.
pub fn stop() {
    super::apic::stop_tick();
}
