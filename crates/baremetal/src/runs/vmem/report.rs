//! What the virtio-mem experiment reports: the driver's outcome, every
//! resize, the audit's counts, the readers' view and how configuration
//! changes came.

use alloc::vec::Vec;

use super::changes::Counted;
use super::descriptors::HeapUse;
use super::fill::FillReport;
use super::readers::Seen;
use crate::drivers::virtio::mem::{MemError, Resize};

/// What the driver did, for the summary.
#[derive(Debug, Default)]
pub struct VmemReport {
    /// Why the driver stopped, if it did.
    pub error: Option<MemError>,
    /// The device's block size in bytes.
    pub block: u64,
    /// The region's guest-physical start.
    pub addr: u64,
    /// The region's size.
    pub region: u64,
    /// Every resize, in order.
    pub resizes: Vec<Resize>,
    /// Plugged frames physmem or the allocator did not have, or whose
    /// memory did not keep a written word.
    pub pages_lost: u64,
    /// Unplugged frames physmem still looked up.
    pub stale: u64,
    /// Whether the host's sizes all came and were followed.
    pub followed: bool,
    /// The heap before, during and after the resizes.
    pub heap: HeapUse,
    /// Frames at the front of a whole run holding its descriptors.
    pub descriptor_frames: u64,
    /// Blocks in a whole run (one physmem segment).
    pub run_blocks: u64,
    /// Plugged blocks, counted after each grow, whose descriptors are not
    /// on their run's first frames.
    pub descriptors_off_block: u64,
    /// What the readers on the other CPUs saw, if any ran.
    pub seen: Option<Seen>,
    /// How the host's configuration changes reached the driver.
    pub config: Counted,
    /// What the fill did, with `vmem_fill=`.
    pub(super) fill: Option<FillReport>,
}
