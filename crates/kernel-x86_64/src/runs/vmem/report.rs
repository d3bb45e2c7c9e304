//! What the virtio-mem experiment reports: the driver's outcome, every
//! resize, the audit's counts, the readers' view and how configuration
//! changes came.

use alloc::vec::Vec;

use super::changes::Counted;
use super::fill::FillReport;
use super::readers::Seen;
use super::room::Room;
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
    /// The heap room touched for the region's descriptors before the
    /// first resize.
    pub room: Room,
    /// Plugged blocks, counted after each grow, whose descriptors physmem
    /// kept outside that room.
    pub outside_room: u64,
    /// What the readers on the other CPUs saw, if any ran.
    pub seen: Option<Seen>,
    /// How the host's configuration changes reached the driver.
    pub config: Counted,
    /// What the fill did, with `vmem_fill=`.
    pub(super) fill: Option<FillReport>,
}
