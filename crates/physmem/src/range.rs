//! Named ranges at the API's edges: frames from a firmware memory map
//! ([`PfnRange`]), a boot segment with its avail range ([`BootRange`]) and
//! a lookup's answer ([`Lookup`]).

use crate::types::{PageCount, Pfn, PhysAddr, SegmentHandle, PAGE_SIZE};

/// Frames `[start, end)`.
///
/// Firmware memory maps (e820, UEFI's `GetMemoryMap`, a device tree's
/// `/memory` node) describe memory in bytes; physmem works in frames.
/// [`PfnRange::inside_bytes`] gives the frames a kernel may use (only whole
/// pages inside the range), [`PfnRange::covering_bytes`] the frames the
/// range touches (e.g. to keep a reserved region out of every segment).
///
/// ```
/// use hotkern_physmem::{PfnRange, Pfn, PhysAddr};
///
/// // An e820 entry: 0x9fc00 bytes of RAM from 0x400 (the BIOS data area).
/// let usable = PfnRange::inside_bytes(PhysAddr(0x400), 0x9fc00).unwrap();
/// assert_eq!(usable, PfnRange { start: Pfn(1), end: Pfn(0xa0) });
/// let touched = PfnRange::covering_bytes(PhysAddr(0x400), 0x9fc00).unwrap();
/// assert_eq!(touched, PfnRange { start: Pfn(0), end: Pfn(0xa0) });
/// // Less than a page holds no whole page.
/// assert_eq!(PfnRange::inside_bytes(PhysAddr(0x400), 0x800), None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PfnRange {
    /// First frame.
    pub start: Pfn,
    /// One past the last frame.
    pub end: Pfn,
}

impl PfnRange {
    /// The frames lying wholly inside the `length` bytes from `base`: the
    /// start rounded up to a page boundary, the end rounded down. `None`
    /// when no whole page fits or `base + length` overflows.
    pub const fn inside_bytes(base: PhysAddr, length: u64) -> Option<PfnRange> {
        let Some(end) = base.0.checked_add(length) else {
            return None;
        };
        let Some(start) = base.0.checked_add(PAGE_SIZE - 1) else {
            return None;
        };
        let range = PfnRange {
            start: PhysAddr(start).pfn(),
            end: PhysAddr(end).pfn(),
        };
        if range.start.0 < range.end.0 {
            Some(range)
        } else {
            None
        }
    }

    /// The frames holding any of the `length` bytes from `base`: the start
    /// rounded down to a page boundary, the end rounded up. `None` when
    /// `length` is zero or the end overflows.
    pub const fn covering_bytes(base: PhysAddr, length: u64) -> Option<PfnRange> {
        if length == 0 {
            return None;
        }
        let Some(last) = base.0.checked_add(length - 1) else {
            return None;
        };
        Some(PfnRange {
            start: base.pfn(),
            end: Pfn(PhysAddr(last).pfn().0 + 1),
        })
    }

    /// Number of frames (zero for an empty or reversed range).
    ///
    /// ```
    /// use hotkern_physmem::{PageCount, Pfn, PfnRange};
    /// assert_eq!(PfnRange { start: Pfn(4), end: Pfn(6) }.pages(), PageCount(2));
    /// ```
    pub const fn pages(self) -> PageCount {
        PageCount(self.end.0.saturating_sub(self.start.0))
    }

    /// Whether `pfn` is one of the frames.
    ///
    /// ```
    /// use hotkern_physmem::{Pfn, PfnRange};
    /// let range = PfnRange { start: Pfn(4), end: Pfn(6) };
    /// assert!(range.contains(Pfn(5)) && !range.contains(Pfn(6)));
    /// ```
    pub const fn contains(self, pfn: Pfn) -> bool {
        self.start.0 <= pfn.0 && pfn.0 < self.end.0
    }
}

/// Memory registered at boot ([`Physmem::physload`](crate::Physmem::physload),
/// NetBSD's `uvm_page_physload`): frames `[start, end)`, of which
/// `[avail_start, avail_end)` may be handed out by the page allocator (the
/// rest holds the kernel image, the boot loader's tables, ...).
///
/// ```
/// use hotkern_physmem::{BootRange, Pfn, PfnRange};
///
/// let frames = PfnRange { start: Pfn(0x100), end: Pfn(0x800) };
/// let all = BootRange::available(frames);
/// assert_eq!((all.avail_start, all.avail_end), (Pfn(0x100), Pfn(0x800)));
/// // The kernel image sits in the first 0x80 frames.
/// let rest = BootRange { avail_start: Pfn(0x180), ..all };
/// assert_eq!(rest.frames(), frames);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct BootRange {
    /// First frame.
    pub start: Pfn,
    /// One past the last frame.
    pub end: Pfn,
    /// First frame the page allocator may hand out.
    pub avail_start: Pfn,
    /// One past the last frame the page allocator may hand out.
    pub avail_end: Pfn,
}

impl BootRange {
    /// `frames`, all of them available.
    pub const fn available(frames: PfnRange) -> BootRange {
        BootRange {
            start: frames.start,
            end: frames.end,
            avail_start: frames.start,
            avail_end: frames.end,
        }
    }

    /// `[start, end)`, without the avail range.
    pub const fn frames(self) -> PfnRange {
        PfnRange {
            start: self.start,
            end: self.end,
        }
    }
}

/// Where a frame is: what [`ReadGuard::find`](crate::ReadGuard::find)
/// answers (NetBSD's `uvm_physseg_find` returns the segment and writes the
/// offset through a pointer).
///
/// ```
/// use hotkern_physmem::{BasicPage, Lookup, PageCount, Pfn, Physmem};
///
/// let mem: Physmem<BasicPage> = Physmem::initialized();
/// let segment = mem.plug(Pfn(0x40), PageCount(16)).unwrap();
/// let Lookup { segment: found, offset } = mem.read().find(Pfn(0x45)).unwrap();
/// assert_eq!((found, offset), (segment, PageCount(5)));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Lookup<H = SegmentHandle> {
    /// The segment holding the frame.
    pub segment: H,
    /// The frame's distance from the segment's first frame.
    pub offset: PageCount,
}
