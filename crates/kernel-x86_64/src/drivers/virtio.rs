//! virtio devices on PCI: virtio-blk over the legacy transport ([`blk`]),
//! and the modern transport ([`pci`]) that virtio-mem ([`mem`]) needs.

pub mod blk;
pub mod mem;
pub mod pci;
