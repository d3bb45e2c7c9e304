//! An ftrace-class tracer: per-CPU lock-free ring buffers, events, function tracing.
#![no_std]
extern crate alloc;

pub mod filter;
pub mod glob;
pub mod trigger;
