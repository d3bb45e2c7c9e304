//! virtio devices on PCI: one split virtqueue ([`queue`]) that both the
//! legacy transport (virtio-blk, [`blk`]) and the modern one ([`pci`],
//! which virtio-mem needs, [`mem`]) drive.

pub mod blk;
pub mod mem;
pub mod pci;
pub mod queue;
