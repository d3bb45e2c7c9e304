//! The contract's clock on arm64: the generic timer's virtual count, whose
//! rate `CNTFRQ_EL0` states (see [`super::timer`]), so nothing needs
//! calibrating.

pub use super::timer::{micros_since, nanos, now};

/// The counter's name on the console.
pub const NAME: &str = "CNTVCT";

/// Where the counter's rate comes from, on the console.
pub const REFERENCE: &str = "CNTFRQ_EL0";

/// The run trace's `trace_clock` name.
pub const TRACE_CLOCK: &str = "arm64-cntvct";

/// The counter's rate in Hz, as the firmware set `CNTFRQ_EL0`.
pub fn calibrate() -> Option<u64> {
    Some(super::timer::frequency()).filter(|&hz| hz != 0)
}
