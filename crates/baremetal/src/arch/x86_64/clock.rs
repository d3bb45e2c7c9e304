//! The contract's clock on x86-64: the TSC, calibrated against the PIT
//! (see [`crate::arch::tsc`]).

pub use super::tsc::{calibrate, micros_since, nanos, now};

/// The counter's name on the console.
pub const NAME: &str = "TSC";

/// What the counter is calibrated against, on the console.
pub const REFERENCE: &str = "the PIT";

/// The run trace's `trace_clock` name.
pub const TRACE_CLOCK: &str = "x86-tsc";
