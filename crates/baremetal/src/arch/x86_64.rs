//! x86-64: everything only an x86-64 CPU and QEMU's PC do — the
//! PVH entry and the trampoline, the per-CPU block with its GDT and TSS,
//! the IDT, the local APIC, the cross-CPU mailboxes and AP starts, page
//! tables and the heap's frames, the context switch, the TSC, COM1 and
//! QEMU's exit port, and the ACPI tables that list the CPUs.
//!
//! It uses nothing above it (drivers, platform, runs): where it must call
//! up — the tick, a device's interrupt, an AP's first Rust code — the layer
//! above hands it a function at boot.

pub mod acpi;
pub mod apic;
pub mod boot;
pub mod console;
pub mod cpu;
pub mod heap;
pub mod idt;
pub mod instructions;
pub mod kthread;
pub mod memory;
pub mod pvh;
pub mod qemu;
pub mod ranges;
pub mod serial;
pub mod smp;
pub mod text;
pub mod trampoline;
pub mod tsc;
