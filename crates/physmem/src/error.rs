//! Every way an operation can be refused. A refused operation changes nothing.

use core::fmt;

use crate::types::{PageCount, Pfn};

/// Why a physmem operation was refused; the state is exactly as before it.
///
/// New reasons may be added in a minor release (`#[non_exhaustive]`): a
/// `match` needs a `_` arm, e.g. one that prints the error's `Display`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PhysmemError {
    /// `npages` was zero.
    ZeroPages,
    /// The range is empty, reversed, past [`PFN_LIMIT`](crate::PFN_LIMIT), or
    /// its avail range is not inside it.
    InvalidRange {
        /// First frame asked for.
        start: Pfn,
        /// One past the last frame asked for.
        end: Pfn,
    },
    /// Some frame of the range is already in a segment.
    Overlap {
        /// The existing segment's first frame.
        existing_start: Pfn,
        /// One past the existing segment's last frame.
        existing_end: Pfn,
    },
    /// The unplug range does not lie inside one segment.
    NotInOneSegment {
        /// First frame asked for.
        pfn: Pfn,
        /// Pages asked for.
        npages: PageCount,
    },
    /// The operation would remove the only segment left.
    LastSegment,
    /// The fixed boot-time storage (or a fixed-capacity table) is full.
    StorageFull,
    /// The page descriptor array could not be allocated.
    DescriptorAllocation,
    /// Memory for the segment records or the lookup index could not be
    /// allocated.
    OutOfMemory,
    /// The handle's segment is gone.
    StaleHandle,
    /// `physunload`: the segment's free list is not the one asked for.
    FreeListMismatch,
    /// `physunload`: neither end of the avail range is at the segment's edge.
    NoPageAtEnds,
    /// `physunload_force`: the avail range is empty.
    NoAvailablePages,
    /// `init_pages` was called twice.
    AlreadyInitialized,
    /// A plug with its descriptors on its own memory came before
    /// `init_pages`.
    NotInitialized,
    /// The block's descriptors would fill all of it, leaving no frame to
    /// hand out.
    BlockTooSmall {
        /// Frames in the block.
        npages: PageCount,
        /// Frames its descriptors need.
        descriptor_frames: PageCount,
    },
    /// The memory given for descriptors is not aligned for them.
    MisalignedDescriptors,
    /// The first frames of a [`plug_on_memory`](crate::Physmem::plug_on_memory)
    /// plug, which hold its descriptors, while other frames of that plug
    /// are still plugged: they go last, with its last segment, whole.
    DescriptorsOnMemory {
        /// The segment's first frame.
        start: Pfn,
        /// One past its last frame.
        end: Pfn,
    },
}

impl fmt::Display for PhysmemError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PhysmemError::ZeroPages => write!(f, "zero pages requested"),
            PhysmemError::InvalidRange { start, end } => {
                write!(f, "invalid range [{}, {})", start.0, end.0)
            }
            PhysmemError::Overlap {
                existing_start,
                existing_end,
            } => write!(
                f,
                "range overlaps the segment [{}, {})",
                existing_start.0, existing_end.0
            ),
            PhysmemError::NotInOneSegment { pfn, npages } => {
                write!(f, "{} from {} do not lie inside one segment", npages, pfn)
            }
            PhysmemError::LastSegment => write!(f, "cannot remove the last segment"),
            PhysmemError::StorageFull => write!(f, "segment storage is full"),
            PhysmemError::DescriptorAllocation => {
                write!(f, "page descriptors could not be allocated")
            }
            PhysmemError::OutOfMemory => {
                write!(f, "out of memory for the segment records or lookup index")
            }
            PhysmemError::StaleHandle => write!(f, "the handle's segment is gone"),
            PhysmemError::FreeListMismatch => write!(f, "segment is on another free list"),
            PhysmemError::NoPageAtEnds => {
                write!(f, "no available page at either end of the segment")
            }
            PhysmemError::NoAvailablePages => write!(f, "segment has no available pages"),
            PhysmemError::AlreadyInitialized => write!(f, "page descriptors already initialised"),
            PhysmemError::NotInitialized => write!(f, "page descriptors not initialised yet"),
            PhysmemError::BlockTooSmall {
                npages,
                descriptor_frames,
            } => write!(
                f,
                "a block of {npages} cannot hold its own descriptors ({descriptor_frames})"
            ),
            PhysmemError::MisalignedDescriptors => {
                write!(f, "the descriptor memory is not aligned for descriptors")
            }
            PhysmemError::DescriptorsOnMemory { start, end } => write!(
                f,
                "the segment [{}, {}) holds descriptors still in use and goes last, whole",
                start.0, end.0
            ),
        }
    }
}

impl core::error::Error for PhysmemError {}

#[cfg(test)]
mod tests {
    use alloc::string::ToString;

    use super::*;

    #[test]
    fn messages_name_the_frames_involved() {
        let error: &dyn core::error::Error = &PhysmemError::Overlap {
            existing_start: Pfn(32),
            existing_end: Pfn(64),
        };
        assert_eq!(error.to_string(), "range overlaps the segment [32, 64)");
        let error = PhysmemError::NotInOneSegment {
            pfn: Pfn(0x1010),
            npages: PageCount(16),
        };
        assert_eq!(
            error.to_string(),
            "16 pages from pfn 0x1010 do not lie inside one segment"
        );
        assert_eq!(
            PhysmemError::LastSegment.to_string(),
            "cannot remove the last segment"
        );
    }
}
