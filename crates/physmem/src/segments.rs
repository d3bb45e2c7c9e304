//! [`PhysSegments`]: the operations every implementation shares, so that
//! tests and benchmarks run hotkern and the NetBSD baselines on the same
//! inputs.

use core::fmt::Debug;

use lock_api::RawMutex;

use crate::error::PhysmemError;
use crate::page::Page;
use crate::physmem::Physmem;
use crate::range::Lookup;
use crate::types::{PageCount, Pfn, SegmentHandle};

/// A set of physical memory segments, as `uvm_physseg` presents it.
///
/// Implemented by [`Physmem`] (`hotkern`), [`StaticSegments`]
/// (`static`) and [`RbTreeSegments`] (`rbtree`).
///
/// [`StaticSegments`]: crate::baseline::StaticSegments
/// [`RbTreeSegments`]: crate::baseline::RbTreeSegments
pub trait PhysSegments {
    /// What names a segment.
    type Handle: Copy + Eq + Debug;

    /// The implementation's name in benchmark reports.
    fn name(&self) -> &'static str;
    /// Adds a segment of `npages` frames from `pfn`.
    fn plug(&mut self, pfn: Pfn, npages: PageCount) -> Result<Self::Handle, PhysmemError>;
    /// Removes `npages` frames from `pfn`, inside one segment.
    fn unplug(&mut self, pfn: Pfn, npages: PageCount) -> Result<(), PhysmemError>;
    /// The segment holding `pfn` and the offset in it.
    fn find(&self, pfn: Pfn) -> Option<Lookup<Self::Handle>>;
    /// `[start, end)` of the segment `handle` names now, if it names one.
    fn bounds(&self, handle: Self::Handle) -> Option<(Pfn, Pfn)>;
    /// The lowest segment.
    fn first(&self) -> Option<Self::Handle>;
    /// The highest segment.
    fn last(&self) -> Option<Self::Handle>;
    /// The segment after `handle`'s.
    fn next(&self, handle: Self::Handle) -> Option<Self::Handle>;
    /// The segment before `handle`'s.
    fn prev(&self, handle: Self::Handle) -> Option<Self::Handle>;
    /// Number of segments.
    fn count(&self) -> usize;
    /// The highest frame of any segment.
    fn highest_frame(&self) -> Option<Pfn>;

    /// Looks up every frame of `pfns` and sums offset + 1 over the hits, so
    /// that the work cannot be optimised away. Implementations may do the
    /// batch inside one read section.
    fn sum_lookups(&self, pfns: &[Pfn]) -> u64 {
        pfns.iter()
            .map(|&pfn| self.find(pfn).map_or(0, |found| found.offset.0 + 1))
            .sum()
    }
}

impl<P: Page, R: RawMutex, const BOOT: usize> PhysSegments for Physmem<P, R, BOOT> {
    type Handle = SegmentHandle;

    fn name(&self) -> &'static str {
        "hotkern"
    }

    fn plug(&mut self, pfn: Pfn, npages: PageCount) -> Result<SegmentHandle, PhysmemError> {
        Physmem::plug(self, pfn, npages)
    }

    fn unplug(&mut self, pfn: Pfn, npages: PageCount) -> Result<(), PhysmemError> {
        Physmem::unplug(self, pfn, npages)
    }

    fn find(&self, pfn: Pfn) -> Option<Lookup> {
        self.read().find(pfn)
    }

    fn bounds(&self, handle: SegmentHandle) -> Option<(Pfn, Pfn)> {
        self.segment_info(handle)
            .ok()
            .map(|info| (info.start, info.end))
    }

    fn first(&self) -> Option<SegmentHandle> {
        self.read().first().map(|s| s.handle())
    }

    fn last(&self) -> Option<SegmentHandle> {
        self.read().last().map(|s| s.handle())
    }

    fn next(&self, handle: SegmentHandle) -> Option<SegmentHandle> {
        self.read().next(handle).ok().flatten().map(|s| s.handle())
    }

    fn prev(&self, handle: SegmentHandle) -> Option<SegmentHandle> {
        self.read().prev(handle).ok().flatten().map(|s| s.handle())
    }

    fn count(&self) -> usize {
        self.len()
    }

    fn highest_frame(&self) -> Option<Pfn> {
        self.read().highest_frame()
    }

    fn sum_lookups(&self, pfns: &[Pfn]) -> u64 {
        let guard = self.read();
        pfns.iter()
            .map(|&pfn| guard.find(pfn).map_or(0, |found| found.offset.0 + 1))
            .sum()
    }
}
