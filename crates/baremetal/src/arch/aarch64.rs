//! arm64 on QEMU's `-M virt`: everything only an Armv8-A CPU and that
//! machine do — the ELF entry and the boot page tables, the exception
//! vectors, the device tree, the PL011, the generic timer, the GICv3,
//! PSCI, the per-CPU block in `TPIDR_EL1`, the context switch, and
//! semihosting's exit.
//!
//! The `pub` modules are this architecture's side of the contract in
//! [`crate::arch`]; the rest are visible only inside the arch layer. It
//! uses nothing above it: where it must call up — the tick, a secondary
//! CPU's first Rust code — the layer above hands it a function at boot.

use crate::arch::capabilities::Capabilities;

pub mod boot;
pub mod clock;
pub mod cpu;
pub mod interrupts;
pub mod kthread;
pub mod memory;
pub mod pci;
pub mod qemu;
pub mod serial;
pub mod smp;
pub mod text;
pub mod tick;

pub(super) mod bringup;
pub(super) mod devicetree;
pub(super) mod direct;
pub(super) mod exceptions;
pub(super) mod fdt;
pub(super) mod gic;
pub(super) mod pci_host;
pub(super) mod pl011;
pub(super) mod psci;
pub(super) mod selfcheck;
pub(super) mod semihosting;
pub(super) mod timer;

/// The architecture's name on the console.
pub const NAME: &str = "aarch64";

/// What arm64 cannot do yet: patch its own call sites (the function
/// tracer's NOPs stay NOPs). The PCI devices work: virtio-blk's disk
/// through the host bridge's I/O window, virtio-mem's configuration
/// changes through its pin to a GIC SPI ([`pci`], [`interrupts`]).
pub const CAPABILITIES: Capabilities = Capabilities {
    text_patching: false,
    virtio_mem: true,
    disk: true,
};
