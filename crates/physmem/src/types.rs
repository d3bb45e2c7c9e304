//! Page frame numbers, page counts and physical addresses.

use core::fmt;
use core::ops::{Add, Range, Sub};

/// log2 of the page size: hotkern's physmem works in 4 KiB pages.
pub const PAGE_SHIFT: u32 = 12;

/// Bytes in a page.
pub const PAGE_SIZE: u64 = 1 << PAGE_SHIFT;

/// One past the highest frame physmem accepts: 52-bit physical addresses,
/// the architectural limit of x86-64 and AArch64. Keeping every frame below it
/// means `pfn + npages` and `pfn << PAGE_SHIFT` never overflow.
pub const PFN_LIMIT: u64 = 1 << (52 - PAGE_SHIFT);

/// A page frame number: a physical address divided by [`PAGE_SIZE`].
///
/// ```
/// use hotkern_physmem::{Pfn, PhysAddr};
/// assert_eq!(Pfn(3).phys_addr(), PhysAddr(3 * 4096));
/// assert_eq!(PhysAddr(8191).pfn(), Pfn(1));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Pfn(pub u64);

/// A number of pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct PageCount(pub u64);

/// A physical byte address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct PhysAddr(pub u64);

/// The free list a segment's pages go to (NetBSD's `VM_FREELIST_*`); its
/// meaning belongs to the kernel, physmem only stores and compares it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct FreeList(pub u32);

impl FreeList {
    /// The list `plug` puts pages on (NetBSD's `VM_FREELIST_DEFAULT`).
    pub const DEFAULT: FreeList = FreeList(0);
}

impl Pfn {
    /// The physical address of the frame's first byte.
    pub const fn phys_addr(self) -> PhysAddr {
        PhysAddr(self.0 << PAGE_SHIFT)
    }

    /// The frame `count` pages further on, or `None` on overflow.
    pub const fn checked_add(self, count: PageCount) -> Option<Pfn> {
        match self.0.checked_add(count.0) {
            Some(v) => Some(Pfn(v)),
            None => None,
        }
    }
}

impl PhysAddr {
    /// The frame holding this address.
    pub const fn pfn(self) -> Pfn {
        Pfn(self.0 >> PAGE_SHIFT)
    }
}

impl Add<PageCount> for Pfn {
    type Output = Pfn;
    fn add(self, count: PageCount) -> Pfn {
        Pfn(self.0 + count.0)
    }
}

impl Sub<Pfn> for Pfn {
    type Output = PageCount;
    fn sub(self, other: Pfn) -> PageCount {
        PageCount(self.0 - other.0)
    }
}

impl From<u64> for Pfn {
    fn from(v: u64) -> Pfn {
        Pfn(v)
    }
}

impl From<u64> for PageCount {
    fn from(v: u64) -> PageCount {
        PageCount(v)
    }
}

impl fmt::Display for Pfn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "pfn {:#x}", self.0)
    }
}

impl fmt::Display for PageCount {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} pages", self.0)
    }
}

impl fmt::Display for PhysAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:#x}", self.0)
    }
}

/// Frames `[start, end)`: what a write changes, or the span all segments
/// cover.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FrameRange {
    /// First frame.
    pub(crate) start: Pfn,
    /// One past the last frame.
    pub(crate) end: Pfn,
}

impl FrameRange {
    /// The smallest range holding both.
    pub(crate) fn hull(self, other: FrameRange) -> FrameRange {
        FrameRange {
            start: self.start.min(other.start),
            end: self.end.max(other.end),
        }
    }

    /// Numbers of the sections of `1 << shift` frames the (non-empty)
    /// range overlaps.
    pub(crate) fn sections(self, shift: u32) -> Range<u64> {
        (self.start.0 >> shift)..((self.end.0 - 1) >> shift) + 1
    }
}

/// A handle naming one segment.
///
/// It keeps naming the same segment while others are plugged, unplugged or
/// inserted out of order, and while its own segment shrinks (front or back
/// unplug) or is split (it names the lower part). Once the segment is gone
/// every operation given the handle reports [`PhysmemError::StaleHandle`]:
/// a slot's generation changes when its segment goes, and a slot whose
/// generation would wrap is retired, so a handle is never silently reused.
///
/// [`PhysmemError::StaleHandle`]: crate::PhysmemError::StaleHandle
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SegmentHandle {
    pub(crate) slot: u32,
    pub(crate) generation: u32,
}

impl SegmentHandle {
    /// The handle as one number, for interfaces that carry an integer
    /// (a C `uvm_physseg_t`, a register). [`from_bits`](Self::from_bits)
    /// gives it back.
    ///
    /// ```
    /// use hotkern_physmem::{BasicPage, PageCount, Pfn, Physmem, SegmentHandle};
    ///
    /// let mem: Physmem<BasicPage> = Physmem::initialized();
    /// let segment = mem.plug(Pfn(8), PageCount(8)).unwrap();
    /// let bits = segment.to_bits();
    /// assert_eq!(SegmentHandle::from_bits(bits), segment);
    /// // Bits no handle gave name no segment: refused, never misread.
    /// assert!(mem.segment_info(SegmentHandle::from_bits(!bits)).is_err());
    /// ```
    pub const fn to_bits(self) -> u64 {
        ((self.generation as u64) << 32) | self.slot as u64
    }

    /// The handle [`to_bits`](Self::to_bits) turned into `bits`. Other
    /// bits make a handle that names no segment (operations report
    /// [`PhysmemError::StaleHandle`](crate::PhysmemError::StaleHandle))
    /// unless they happen to equal a live handle's. Slot `u32::MAX` is never
    /// used, so bits whose low 32 bits are all ones never name a segment.
    pub const fn from_bits(bits: u64) -> SegmentHandle {
        SegmentHandle {
            slot: bits as u32,
            generation: (bits >> 32) as u32,
        }
    }
}

/// A segment's bounds and attributes, as `uvm_physseg`'s getters give them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SegmentInfo {
    /// First frame.
    pub start: Pfn,
    /// One past the last frame.
    pub end: Pfn,
    /// First frame the page allocator may hand out.
    pub avail_start: Pfn,
    /// One past the last frame the page allocator may hand out.
    pub avail_end: Pfn,
    /// The free list the pages belong to.
    pub free_list: FreeList,
    /// Where the page allocator starts looking (NetBSD's `start_hint`).
    pub start_hint: u64,
}

impl SegmentInfo {
    /// Number of frames in the segment.
    pub fn pages(&self) -> PageCount {
        self.end - self.start
    }
}
