//! x86-64: everything only an x86-64 CPU and QEMU's PC do — the
//! PVH entry and the trampoline, the per-CPU block with its GDT and TSS,
//! the IDT, the local APIC, the cross-CPU mailboxes and AP starts, page
//! tables and the heap's frames, the context switch, the TSC, COM1 and
//! QEMU's exit port, and the ACPI tables that list the CPUs.
//!
//! The `pub` modules are this architecture's side of the contract in
//! [`crate::arch`]; the rest are visible only inside the arch layer, so
//! the layers above cannot come to depend on an x86 name.
//!
//! It uses nothing above it (drivers, platform, runs): where it must call
//! up — the tick, a device's interrupt, an AP's first Rust code — the layer
//! above hands it a function at boot.

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

pub(super) mod acpi;
pub(super) mod apic;
pub(super) mod idt;
pub(super) mod instructions;
pub(super) mod intx;
pub(super) mod pvh;
pub(super) mod trampoline;
pub(super) mod tsc;

/// The architecture's name on the console.
pub const NAME: &str = "x86_64";

/// Everything runs on x86-64: it is the architecture the runs were
/// written on.
pub const CAPABILITIES: Capabilities = Capabilities {
    text_patching: true,
    virtio_mem: true,
    disk: true,
};
