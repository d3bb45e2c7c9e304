//! An ftrace-class tracer: per-CPU lock-free ring buffers in ftrace's binary
//! format, typed trace events, `trace_marker` and `trace_printk`, function
//! and function_graph tracing with filters and profiling, snapshots and a
//! hardware-latency-style detector.
#![no_std]
extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

// Lets the `#[function]` attribute and the macros name this crate as
// `::hotkern_trace` from inside it too (its own tests and doc examples).
extern crate self as hotkern_trace;

pub mod event;
pub mod function;
#[cfg(feature = "std")]
pub mod hwlat;
pub mod marker;
pub mod platform;
pub mod printk;
pub mod ring;
pub mod tracer;

/// `#[hotkern_trace::function]`: instruments a function for the function
/// and function_graph tracers (see [`function`](mod@function)).
pub use hotkern_trace_macros::function;
pub use tracer::{EventHook, Record, TraceConfig, TraceError, TraceOption, Tracer};

// Control and output (filters, triggers, the tracefs-style interface, writers).
pub mod control;
pub mod filter;
pub mod glob;
pub mod output;
pub mod trigger;
