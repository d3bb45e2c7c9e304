//! The arch layer: everything only one kind of CPU and its QEMU machine
//! do. Each architecture is a module of its own, and the layers above
//! (drivers, platform, runs) reach it only through this one, so that the
//! build for a target compiles that target's module and no other.
//!
//! It uses nothing above it: where it must call up — the tick, a
//! device's interrupt, a secondary CPU's first Rust code — the layer
//! above hands it a function at boot.

#[cfg(target_arch = "x86_64")]
mod x86_64;
#[cfg(target_arch = "x86_64")]
pub use self::x86_64::*;

// Built stage by stage: pieces the later stages use are not called yet.
#[cfg(target_arch = "aarch64")]
#[allow(dead_code)]
mod aarch64;
#[cfg(target_arch = "aarch64")]
pub use self::aarch64::*;
