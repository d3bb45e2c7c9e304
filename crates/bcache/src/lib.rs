//! Per-device block cache for boot loaders and small kernels.
#![no_std]
extern crate alloc;
