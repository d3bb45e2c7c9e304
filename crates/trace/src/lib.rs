//! An ftrace-class tracer: per-CPU lock-free ring buffers in ftrace's binary
//! format, typed trace events, `trace_marker` and `trace_printk`, function
//! and function_graph tracing with filters and profiling, snapshots and a
//! hardware-latency-style detector.
#![no_std]
extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

pub mod ring;
pub mod filter;
pub mod glob;
pub mod trigger;
pub mod output;
