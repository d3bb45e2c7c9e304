//! arm64 on QEMU's `-M virt`: everything only an Armv8-A CPU and that
//! machine do — the ELF entry and the boot page tables, the exception
//! vectors, the device tree, the PL011, the generic timer, the GICv3,
//! PSCI, the per-CPU block in `TPIDR_EL1`, the context switch, and
//! semihosting's exit.
//!
//! It uses nothing above it (drivers, platform, runs): where it must call
//! up — the tick, a secondary CPU's first Rust code — the layer above hands
//! it a function at boot.

pub mod boot;
pub mod bringup;
pub mod console;
pub mod cpu;
pub mod devicetree;
pub mod direct;
pub mod exceptions;
pub mod fdt;
pub mod gic;
pub mod hardware;
pub mod kthread;
pub mod memory;
// The heap and the frame-range sets know nothing of the CPU: x86-64's, shared.
#[path = "x86_64/heap.rs"]
pub mod heap;
pub mod pl011;
pub mod psci;
pub mod qemu;
#[path = "x86_64/ranges.rs"]
pub mod ranges;
pub mod smp;
pub mod tick;
pub mod timer;
