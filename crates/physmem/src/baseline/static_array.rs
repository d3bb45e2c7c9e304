//! `static`: NetBSD's non-hotplug design. A fixed-capacity array kept sorted
//! by BSEARCH insertion; handles are array indices, so they move when a
//! segment is inserted or removed below them.

use alloc::vec::Vec;

use super::{checked_range, descriptors, Descriptors};
use crate::error::PhysmemError;
use crate::page::Page;
use crate::range::Lookup;
use crate::segments::PhysSegments;
use crate::types::{PageCount, Pfn};

struct Segment<P> {
    start: u64,
    end: u64,
    pages: Descriptors<P>,
    /// Index in `pages` of the descriptor of `start`.
    first: usize,
}

/// A sorted fixed-capacity array of segments (`VM_PHYSSEG_MAX`).
pub struct StaticSegments<P> {
    segments: Vec<Segment<P>>,
    capacity: usize,
}

impl<P: Page> StaticSegments<P> {
    /// An empty array holding at most `capacity` segments; the storage is
    /// allocated once, up front, as the static array is.
    pub fn new(capacity: usize) -> Self {
        StaticSegments {
            segments: Vec::with_capacity(capacity),
            capacity,
        }
    }

    /// The descriptor of `pfn`.
    pub fn page(&self, pfn: Pfn) -> Option<&P> {
        let Lookup { segment: i, offset } = self.find(pfn)?;
        let segment = &self.segments[i];
        segment.pages.get(segment.first + offset.0 as usize)
    }

    /// Binary search for the segment holding `pfn` (`vm_physseg_find_bsearch`).
    #[inline]
    fn search(&self, pfn: u64) -> Option<usize> {
        let (mut low, mut high) = (0, self.segments.len());
        while low < high {
            let mid = low + (high - low) / 2;
            let segment = &self.segments[mid];
            if pfn < segment.start {
                high = mid;
            } else if pfn >= segment.end {
                low = mid + 1;
            } else {
                return Some(mid);
            }
        }
        None
    }

    /// Where a segment starting at `start` goes to keep the array sorted.
    fn position(&self, start: u64) -> usize {
        self.segments.partition_point(|s| s.start < start)
    }
}

impl<P: Page> PhysSegments for StaticSegments<P> {
    type Handle = usize;

    fn name(&self) -> &'static str {
        "static"
    }

    fn plug(&mut self, pfn: Pfn, npages: PageCount) -> Result<usize, PhysmemError> {
        let end = checked_range(pfn, npages)?;
        let at = self.position(pfn.0);
        for neighbour in [at.checked_sub(1), Some(at)].into_iter().flatten() {
            if let Some(s) = self.segments.get(neighbour) {
                if s.start < end && pfn.0 < s.end {
                    return Err(PhysmemError::Overlap {
                        existing_start: Pfn(s.start),
                        existing_end: Pfn(s.end),
                    });
                }
            }
        }
        if self.segments.len() == self.capacity {
            return Err(PhysmemError::StorageFull);
        }
        self.segments.insert(
            at,
            Segment {
                start: pfn.0,
                end,
                pages: descriptors(pfn, npages.0),
                first: 0,
            },
        );
        Ok(at)
    }

    fn unplug(&mut self, pfn: Pfn, npages: PageCount) -> Result<(), PhysmemError> {
        let end = checked_range(pfn, npages)?;
        let outside = PhysmemError::NotInOneSegment { pfn, npages };
        let i = self.search(pfn.0).ok_or(outside)?;
        let segment = &self.segments[i];
        if end > segment.end {
            return Err(outside);
        }
        match (pfn.0 == segment.start, end == segment.end) {
            (true, true) => {
                if self.segments.len() == 1 {
                    return Err(PhysmemError::LastSegment);
                }
                self.segments.remove(i);
            }
            (true, false) => {
                let segment = &mut self.segments[i];
                segment.first += (end - segment.start) as usize;
                segment.start = end;
            }
            (false, true) => self.segments[i].end = pfn.0,
            (false, false) => {
                if self.segments.len() == self.capacity {
                    return Err(PhysmemError::StorageFull);
                }
                let segment = &mut self.segments[i];
                let upper = Segment {
                    start: end,
                    end: segment.end,
                    pages: segment.pages.clone(),
                    first: segment.first + (end - segment.start) as usize,
                };
                segment.end = pfn.0;
                self.segments.insert(i + 1, upper);
            }
        }
        Ok(())
    }

    #[inline]
    fn find(&self, pfn: Pfn) -> Option<Lookup<usize>> {
        let i = self.search(pfn.0)?;
        Some(Lookup {
            segment: i,
            offset: PageCount(pfn.0 - self.segments[i].start),
        })
    }

    fn bounds(&self, handle: usize) -> Option<(Pfn, Pfn)> {
        self.segments
            .get(handle)
            .map(|s| (Pfn(s.start), Pfn(s.end)))
    }

    fn first(&self) -> Option<usize> {
        (!self.segments.is_empty()).then_some(0)
    }

    fn last(&self) -> Option<usize> {
        self.segments.len().checked_sub(1)
    }

    fn next(&self, handle: usize) -> Option<usize> {
        (handle + 1 < self.segments.len()).then_some(handle + 1)
    }

    fn prev(&self, handle: usize) -> Option<usize> {
        (handle < self.segments.len())
            .then_some(handle)?
            .checked_sub(1)
    }

    fn count(&self) -> usize {
        self.segments.len()
    }

    fn highest_frame(&self) -> Option<Pfn> {
        self.segments.last().map(|s| Pfn(s.end - 1))
    }
}
