//! The drivers layer: PCI configuration and the virtio devices QEMU gives
//! this kernel (a disk, memory from the hypervisor).
//!
//! Drivers use the arch layer (ports, MMIO windows, the APIC, page tables)
//! and nothing above it: what a run does with a device is in `runs`.

pub mod pci;
pub mod virtio;
