//! An extent allocator: hands out sub-ranges of a fixed range of units and
//! takes them back, the job extent(9) does for NetBSD's page descriptor slabs.
//!
//! The extent records its *free* regions, sorted and coalesced, in a
//! [`RegionStore`]: a `Vec` once the heap is up, or a fixed array
//! ([`FixedRegions`]) at boot, when there is no heap yet.
//!
//! ```
//! use hotkern_physmem::extent::{Extent, ExtentError, FixedRegions};
//!
//! // Boot mode: no heap, at most 4 free regions.
//! let mut extent = Extent::with_store(100, FixedRegions::<4>::new());
//! let a = extent.alloc(30).unwrap();
//! let b = extent.alloc(30).unwrap();
//! assert_eq!((a, b), (0, 30));
//! extent.free(a, 30).unwrap();
//! // First fit: the freed space is reused before the untouched tail.
//! assert_eq!(extent.alloc(10), Ok(0));
//! // Space that is already free cannot be freed again.
//! assert_eq!(extent.free(70, 10), Err(ExtentError::NotAllocated));
//! ```

use alloc::vec::Vec;
use core::fmt;

/// A free region: `len` units from `start`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    /// First unit.
    pub start: u64,
    /// Units in the region.
    pub len: u64,
}

impl Region {
    fn end(&self) -> u64 {
        self.start + self.len
    }
}

/// Why an extent refused a request; a refused request changes nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExtentError {
    /// Zero units asked for.
    Empty,
    /// No free region is large enough.
    NoSpace,
    /// The range is (partly) outside the extent or not allocated.
    NotAllocated,
    /// The region store is full (boot mode) or could not grow (heap mode).
    StoreFull,
}

impl fmt::Display for ExtentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ExtentError::Empty => write!(f, "zero-length request"),
            ExtentError::NoSpace => write!(f, "no free region is large enough"),
            ExtentError::NotAllocated => write!(f, "range is not allocated from this extent"),
            ExtentError::StoreFull => write!(f, "no room to record another free region"),
        }
    }
}

impl core::error::Error for ExtentError {}

/// Where an extent keeps its free regions.
pub trait RegionStore {
    /// The regions, sorted by start.
    fn regions(&self) -> &[Region];
    /// Mutable access to the regions.
    fn regions_mut(&mut self) -> &mut [Region];
    /// Inserts `region` at `index`; fails with [`ExtentError::StoreFull`]
    /// without changing anything when there is no room.
    fn insert(&mut self, index: usize, region: Region) -> Result<(), ExtentError>;
    /// Removes the region at `index`.
    fn remove(&mut self, index: usize);
}

impl RegionStore for Vec<Region> {
    fn regions(&self) -> &[Region] {
        self
    }
    fn regions_mut(&mut self) -> &mut [Region] {
        self
    }
    fn insert(&mut self, index: usize, region: Region) -> Result<(), ExtentError> {
        self.try_reserve(1).map_err(|_| ExtentError::StoreFull)?;
        Vec::insert(self, index, region);
        Ok(())
    }
    fn remove(&mut self, index: usize) {
        Vec::remove(self, index);
    }
}

/// At most `N` free regions in a fixed array: the no-heap boot mode.
#[derive(Debug, Clone)]
pub struct FixedRegions<const N: usize> {
    regions: [Region; N],
    len: usize,
}

impl<const N: usize> FixedRegions<N> {
    /// An empty store.
    pub const fn new() -> Self {
        FixedRegions {
            regions: [Region { start: 0, len: 0 }; N],
            len: 0,
        }
    }
}

impl<const N: usize> Default for FixedRegions<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> RegionStore for FixedRegions<N> {
    fn regions(&self) -> &[Region] {
        &self.regions[..self.len]
    }
    fn regions_mut(&mut self) -> &mut [Region] {
        &mut self.regions[..self.len]
    }
    fn insert(&mut self, index: usize, region: Region) -> Result<(), ExtentError> {
        if self.len == N || index > self.len {
            return Err(ExtentError::StoreFull);
        }
        self.regions.copy_within(index..self.len, index + 1);
        self.regions[index] = region;
        self.len += 1;
        Ok(())
    }
    fn remove(&mut self, index: usize) {
        if index < self.len {
            self.regions.copy_within(index + 1..self.len, index);
            self.len -= 1;
        }
    }
}

/// Sub-ranges of `[0, size)` handed out first-fit.
#[derive(Debug, Clone)]
pub struct Extent<S: RegionStore = Vec<Region>> {
    size: u64,
    free_units: u64,
    store: S,
}

impl Extent<Vec<Region>> {
    /// Room for `additional` more free regions, so that the next frees of
    /// that many ranges cannot fail for want of memory.
    pub fn reserve(&mut self, additional: usize) -> Result<(), ExtentError> {
        self.store
            .try_reserve(additional)
            .map_err(|_| ExtentError::StoreFull)
    }

    /// A heap-backed extent over `[0, size)`, all free.
    pub fn new(size: u64) -> Self {
        Self::with_store(size, Vec::new())
    }
}

impl<S: RegionStore> Extent<S> {
    /// An extent over `[0, size)`, all free, recording free regions in `store`
    /// (which must be empty). A zero-sized extent has nothing to hand out.
    pub fn with_store(size: u64, mut store: S) -> Self {
        while !store.regions().is_empty() {
            store.remove(0);
        }
        if size > 0 {
            // An empty store always has room for one region unless its
            // capacity is zero, in which case the extent is simply full.
            if store
                .insert(
                    0,
                    Region {
                        start: 0,
                        len: size,
                    },
                )
                .is_err()
            {
                return Extent {
                    size,
                    free_units: 0,
                    store,
                };
            }
        }
        Extent {
            size,
            free_units: size,
            store,
        }
    }

    /// Units managed.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Units free.
    pub fn free_units(&self) -> u64 {
        self.free_units
    }

    /// Whether nothing is allocated: the slab behind it may be released.
    pub fn is_unused(&self) -> bool {
        self.free_units == self.size
    }

    /// The free regions, sorted.
    pub fn free_regions(&self) -> &[Region] {
        self.store.regions()
    }

    /// Allocates `len` units from the lowest free region that holds them.
    pub fn alloc(&mut self, len: u64) -> Result<u64, ExtentError> {
        if len == 0 {
            return Err(ExtentError::Empty);
        }
        let index = self
            .store
            .regions()
            .iter()
            .position(|r| r.len >= len)
            .ok_or(ExtentError::NoSpace)?;
        let region = &mut self.store.regions_mut()[index];
        let start = region.start;
        if region.len == len {
            self.store.remove(index);
        } else {
            region.start += len;
            region.len -= len;
        }
        self.free_units -= len;
        Ok(start)
    }

    /// Allocates exactly `[start, start + len)`, which must be free.
    pub fn alloc_at(&mut self, start: u64, len: u64) -> Result<(), ExtentError> {
        if len == 0 {
            return Err(ExtentError::Empty);
        }
        let end = start.checked_add(len).ok_or(ExtentError::NoSpace)?;
        let index = self
            .store
            .regions()
            .iter()
            .position(|r| r.start <= start && end <= r.end())
            .ok_or(ExtentError::NoSpace)?;
        let region = self.store.regions()[index];
        let before = Region {
            start: region.start,
            len: start - region.start,
        };
        let after = Region {
            start: end,
            len: region.end() - end,
        };
        match (before.len > 0, after.len > 0) {
            (false, false) => self.store.remove(index),
            (true, false) => self.store.regions_mut()[index] = before,
            (false, true) => self.store.regions_mut()[index] = after,
            (true, true) => {
                // Insert first: if the store is full nothing has changed yet.
                self.store.insert(index + 1, after)?;
                self.store.regions_mut()[index] = before;
            }
        }
        self.free_units -= len;
        Ok(())
    }

    /// Returns `[start, start + len)`, which must be allocated, coalescing it
    /// with free neighbours.
    pub fn free(&mut self, start: u64, len: u64) -> Result<(), ExtentError> {
        if len == 0 {
            return Err(ExtentError::Empty);
        }
        let end = start.checked_add(len).ok_or(ExtentError::NotAllocated)?;
        if end > self.size {
            return Err(ExtentError::NotAllocated);
        }
        let regions = self.store.regions();
        // Index of the first free region starting at or after `start`.
        let index = regions.partition_point(|r| r.start < start);
        let joins_before = index > 0 && {
            let before = regions[index - 1];
            if before.end() > start {
                return Err(ExtentError::NotAllocated);
            }
            before.end() == start
        };
        let joins_after = index < regions.len() && {
            let after = regions[index];
            if after.start < end {
                return Err(ExtentError::NotAllocated);
            }
            after.start == end
        };
        match (joins_before, joins_after) {
            (true, true) => {
                let after_len = self.store.regions()[index].len;
                self.store.regions_mut()[index - 1].len += len + after_len;
                self.store.remove(index);
            }
            (true, false) => self.store.regions_mut()[index - 1].len += len,
            (false, true) => {
                let after = &mut self.store.regions_mut()[index];
                after.start = start;
                after.len += len;
            }
            (false, false) => self.store.insert(index, Region { start, len })?,
        }
        self.free_units += len;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_messages_say_why_the_request_was_refused() {
        use alloc::string::ToString;
        let error: &dyn core::error::Error = &ExtentError::NotAllocated;
        assert_eq!(error.to_string(), "range is not allocated from this extent");
        assert_eq!(ExtentError::Empty.to_string(), "zero-length request");
    }

    #[test]
    fn alloc_is_first_fit_and_free_coalesces_both_sides() {
        let mut e = Extent::new(30);
        assert_eq!(e.alloc(10), Ok(0));
        assert_eq!(e.alloc(10), Ok(10));
        assert_eq!(e.alloc(10), Ok(20));
        assert_eq!(e.alloc(1), Err(ExtentError::NoSpace));
        e.free(0, 10).unwrap();
        e.free(20, 10).unwrap();
        assert_eq!(e.free_regions().len(), 2);
        e.free(10, 10).unwrap();
        assert_eq!(e.free_regions(), &[Region { start: 0, len: 30 }]);
        assert!(e.is_unused());
    }

    #[test]
    fn double_free_and_out_of_range_are_refused_without_change() {
        let mut e = Extent::new(20);
        assert_eq!(e.alloc(5), Ok(0));
        let before = e.free_regions().to_vec();
        assert_eq!(e.free(5, 1), Err(ExtentError::NotAllocated));
        assert_eq!(e.free(3, 4), Err(ExtentError::NotAllocated));
        assert_eq!(e.free(19, 2), Err(ExtentError::NotAllocated));
        assert_eq!(e.free(0, 0), Err(ExtentError::Empty));
        assert_eq!(e.alloc(0), Err(ExtentError::Empty));
        assert_eq!(e.free_regions(), &before[..]);
        assert_eq!(e.free_units(), 15);
    }

    #[test]
    fn fixed_store_refuses_a_split_it_cannot_record_and_keeps_state() {
        let mut e = Extent::with_store(10, FixedRegions::<1>::new());
        assert_eq!(e.alloc(10), Ok(0));
        e.free(0, 2).unwrap();
        assert_eq!(e.free(5, 2), Err(ExtentError::StoreFull));
        assert_eq!(e.free_regions(), &[Region { start: 0, len: 2 }]);
        assert_eq!(e.free_units(), 2);
        // Coalescing needs no new record, so it still works.
        e.free(2, 3).unwrap();
        assert_eq!(e.free_regions(), &[Region { start: 0, len: 5 }]);
    }

    #[test]
    fn alloc_at_splits_and_refuses_taken_space() {
        let mut e = Extent::with_store(10, FixedRegions::<2>::new());
        e.alloc_at(4, 2).unwrap();
        assert_eq!(
            e.free_regions(),
            &[Region { start: 0, len: 4 }, Region { start: 6, len: 4 }]
        );
        assert_eq!(e.alloc_at(5, 2), Err(ExtentError::NoSpace));
        assert_eq!(e.alloc_at(1, 1), Err(ExtentError::StoreFull));
        assert_eq!(e.free_units(), 8);
        e.free(4, 2).unwrap();
        assert!(e.is_unused());
    }

    #[test]
    fn fixed_store_removes_the_region_asked_for_and_nothing_past_the_end() {
        let regions = [0, 10, 20].map(|start| Region { start, len: 5 });
        let mut store = FixedRegions::<4>::new();
        for (i, &region) in regions.iter().enumerate() {
            store.insert(i, region).unwrap();
        }
        store.remove(3);
        assert_eq!(store.regions(), &regions[..]);
        store.remove(1);
        assert_eq!(store.regions(), &[regions[0], regions[2]]);
    }

    #[test]
    fn free_between_two_free_regions_merges_them_and_keeps_the_next() {
        let mut e = Extent::with_store(100, FixedRegions::<4>::new());
        for start in [0, 10, 20, 30, 40] {
            assert_eq!(e.alloc(10), Ok(start));
        }
        e.free(0, 10).unwrap();
        e.free(20, 10).unwrap();
        // Free: [0, 10), [20, 30) and [50, 100); [10, 20) joins the first
        // two into one record, and the third stays.
        e.free(10, 10).unwrap();
        let merged = Region { start: 0, len: 30 };
        assert_eq!(e.free_regions(), &[merged, Region { start: 50, len: 50 }]);
        assert_eq!(e.free_units(), 80);
        assert_eq!(e.alloc(50), Ok(50));
    }

    #[test]
    fn alloc_at_a_regions_start_or_end_leaves_no_empty_record() {
        let mut e = Extent::new(100);
        assert_eq!(e.size(), 100);
        assert_eq!(e.alloc(10), Ok(0));
        // The free region is [10, 100): take from inside, its start, its end.
        e.alloc_at(50, 5).unwrap();
        let (low, high) = (Region { start: 10, len: 40 }, Region { start: 55, len: 45 });
        assert_eq!(e.free_regions(), &[low, high]);
        e.alloc_at(10, 5).unwrap();
        e.alloc_at(95, 5).unwrap();
        let (low, high) = (Region { start: 15, len: 35 }, Region { start: 55, len: 40 });
        assert_eq!(e.free_regions(), &[low, high]);
        assert_eq!(e.free_units(), 75);
    }

    #[test]
    fn an_extent_of_no_units_records_no_region() {
        let mut e = Extent::new(0);
        assert_eq!((e.size(), e.free_units()), (0, 0));
        assert!(e.free_regions().is_empty());
        assert_eq!(e.alloc(1), Err(ExtentError::NoSpace));
        assert!(e.is_unused());
    }
}
