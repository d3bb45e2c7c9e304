//! The lock-free read side: [`ReadGuard`] and the [`Segment`] views it hands out.

use core::iter::FusedIterator;
use core::ops::Range;

use crate::deferred;
use crate::epoch::Pin;
use crate::error::PhysmemError;
use crate::index::{Index, Listing, Place, Run, Section};
use crate::page::Page;
use crate::range::Lookup;
use crate::sync::Ordering;
use crate::types::{FreeList, PageCount, Pfn, SegmentHandle, SegmentInfo};

/// A lock-free read section over a [`Physmem`](crate::Physmem).
///
/// Everything borrowed from the guard (segments, page descriptors) stays
/// valid until it is dropped, even if the segment is unplugged meanwhile:
/// the memory is reclaimed only after every guard that could see it is gone.
/// The guard sees one consistent snapshot; writes made after it was taken
/// show up in the next guard. Keep guards short: a long one delays the
/// reclamation of unplugged descriptors.
pub struct ReadGuard<'a, P> {
    index: Option<&'a Index<P>>,
    _pin: Pin<'a>,
}

impl<'a, P> ReadGuard<'a, P> {
    pub(crate) fn new(index: Option<&'a Index<P>>, pin: Pin<'a>) -> Self {
        ReadGuard { index, _pin: pin }
    }

    /// The segment holding `pfn` and the frame's offset in it
    /// (NetBSD's `uvm_physseg_find`).
    #[inline]
    pub fn find(&self, pfn: Pfn) -> Option<Lookup> {
        let run = self.index?.find(pfn.0)?;
        Some(located(run, pfn))
    }

    /// The descriptor of frame `pfn` (NetBSD's `PHYS_TO_VM_PAGE`). If the
    /// segment was plugged with deferred descriptor init and no one has
    /// used its chunk of 64 frames yet, this makes the chunk's
    /// descriptors first.
    #[inline]
    pub fn page(&self, pfn: Pfn) -> Option<&P>
    where
        P: Page,
    {
        let run = self.index?.find(pfn.0)?;
        let page = match deferred::marked(run.pages) {
            // SAFETY: `pfn` is inside the run, whose descriptors are
            // initialised and kept alive while this guard's pin holds.
            None => unsafe { run.pages.add((pfn.0 - run.start) as usize) },
            // SAFETY: a marked run names its plug's states, which (like
            // its descriptors, of type `P`) stay alive while this guard's
            // pin holds; `pfn` is a frame of this live piece.
            Some(deferred) => unsafe { (*deferred).page::<P>(pfn.0) },
        };
        // SAFETY: made and alive, as above.
        Some(unsafe { &*page })
    }

    /// The segment `handle` names, or [`PhysmemError::StaleHandle`].
    pub fn segment(&self, handle: SegmentHandle) -> Result<Segment<'_, P>, PhysmemError> {
        self.index
            .and_then(|index| index.resolve(handle))
            .map(view)
            .ok_or(PhysmemError::StaleHandle)
    }

    /// The lowest segment, `None` when there is none.
    pub fn first(&self) -> Option<Segment<'_, P>> {
        self.index?.first().map(view)
    }

    /// The highest segment, `None` when there is none.
    pub fn last(&self) -> Option<Segment<'_, P>> {
        self.index?.last().map(view)
    }

    /// The segment after `handle`'s; `Ok(None)` after the last one.
    pub fn next(&self, handle: SegmentHandle) -> Result<Option<Segment<'_, P>>, PhysmemError> {
        let index = self.index.ok_or(PhysmemError::StaleHandle)?;
        let place = index.resolve(handle).ok_or(PhysmemError::StaleHandle)?;
        Ok(index.next(place).map(view))
    }

    /// The segment before `handle`'s; `Ok(None)` before the first one.
    pub fn prev(&self, handle: SegmentHandle) -> Result<Option<Segment<'_, P>>, PhysmemError> {
        let index = self.index.ok_or(PhysmemError::StaleHandle)?;
        let place = index.resolve(handle).ok_or(PhysmemError::StaleHandle)?;
        Ok(index.prev(place).map(view))
    }

    /// All segments in address order.
    pub fn segments(&self) -> Segments<'_, P> {
        let sections = self.index.map_or(0, Index::section_count);
        Segments {
            index: self.index,
            front: (0, 0),
            back: (sections, 0),
            remaining: self.len(),
        }
    }

    /// Number of segments.
    pub fn len(&self) -> usize {
        self.index.map_or(0, Index::len)
    }

    /// Whether there are no segments.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The highest frame of any segment; `None` when there is none.
    pub fn highest_frame(&self) -> Option<Pfn> {
        self.last().map(|s| Pfn(s.end().0 - 1))
    }

    /// Lookup by binary search among the section's runs instead of the
    /// block table: an alternative kept for the benchmark's comparison.
    #[doc(hidden)]
    pub fn find_by_section_search(&self, pfn: Pfn) -> Option<Lookup> {
        let run = self.index?.find_by_section_search(pfn.0)?;
        Some(located(run, pfn))
    }

    /// The segment holding `pfn` with its bounds, by section search: lets
    /// the benchmark put an MRU hint in front of a lookup.
    #[doc(hidden)]
    pub fn find_bounds_by_section_search(&self, pfn: Pfn) -> Option<(SegmentHandle, Pfn, Pfn)> {
        let run = self.index?.find_by_section_search(pfn.0)?;
        Some((handle_of(run), Pfn(run.start), Pfn(run.end)))
    }

    /// Bytes of lookup tables, for the benchmark.
    #[doc(hidden)]
    pub fn table_bytes(&self) -> usize {
        self.index.map_or(0, Index::table_bytes)
    }
}

/// The handle naming the segment `run` describes.
#[inline]
fn handle_of<P>(run: &Run<P>) -> SegmentHandle {
    SegmentHandle {
        slot: run.slot,
        generation: run.generation,
    }
}

/// A lookup's answer once it has found the run holding `pfn`: the
/// segment's handle and the frame's offset in it.
#[inline]
fn located<P>(run: &Run<P>, pfn: Pfn) -> Lookup {
    Lookup {
        segment: handle_of(run),
        offset: PageCount(pfn.0 - run.start),
    }
}

fn view<P>(place: Place<'_, P>) -> Segment<'_, P> {
    Segment {
        section: place.section,
        i: place.position,
    }
}

/// One segment seen through a [`ReadGuard`].
pub struct Segment<'g, P> {
    section: &'g Section<P>,
    i: usize,
}

impl<P> Clone for Segment<'_, P> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<P> Copy for Segment<'_, P> {}

impl<'g, P> Segment<'g, P> {
    /// The handle naming this segment.
    pub fn handle(&self) -> SegmentHandle {
        handle_of(self.section.run(self.i))
    }

    /// First frame.
    pub fn start(&self) -> Pfn {
        Pfn(self.section.run(self.i).start)
    }

    /// One past the last frame.
    pub fn end(&self) -> Pfn {
        Pfn(self.section.run(self.i).end)
    }

    /// The frames, as numbers.
    pub fn frames(&self) -> Range<u64> {
        let run = self.section.run(self.i);
        run.start..run.end
    }

    /// Number of frames.
    pub fn len(&self) -> PageCount {
        self.end() - self.start()
    }

    /// Always false: segments have at least one frame.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// First frame the page allocator may hand out.
    pub fn avail_start(&self) -> Pfn {
        Pfn(self.section.detail(self.i).avail_start)
    }

    /// One past the last frame the page allocator may hand out.
    pub fn avail_end(&self) -> Pfn {
        Pfn(self.section.detail(self.i).avail_end)
    }

    /// The free list.
    pub fn free_list(&self) -> FreeList {
        self.section.detail(self.i).free_list
    }

    /// Where the page allocator starts looking.
    pub fn start_hint(&self) -> u64 {
        self.section
            .detail(self.i)
            .start_hint
            .load(Ordering::Relaxed)
    }

    /// All attributes at once.
    pub fn info(&self) -> SegmentInfo {
        SegmentInfo {
            start: self.start(),
            end: self.end(),
            avail_start: self.avail_start(),
            avail_end: self.avail_end(),
            free_list: self.free_list(),
            start_hint: self.start_hint(),
        }
    }

    /// The descriptors of all frames, indexed from [`start`](Self::start)
    /// (with deferred descriptor init, every chunk not made yet is made
    /// first).
    pub fn pages(&self) -> &'g [P]
    where
        P: Page,
    {
        let run = self.section.run(self.i);
        let pages = match deferred::marked(run.pages) {
            None => run.pages,
            // SAFETY: as in `ReadGuard::page`: the marked run's states and
            // descriptors, alive for 'g.
            Some(deferred) => unsafe { (*deferred).pages::<P>(run.start, run.end) },
        };
        // SAFETY: the run's descriptors are initialised and outlive 'g.
        unsafe { core::slice::from_raw_parts(pages, (run.end - run.start) as usize) }
    }

    /// The descriptor `index` frames from the start (NetBSD's
    /// `uvm_physseg_get_pg`).
    pub fn page(&self, index: u64) -> Option<&'g P>
    where
        P: Page,
    {
        self.pages().get(usize::try_from(index).ok()?)
    }
}

/// Segments in address order; see [`ReadGuard::segments`].
pub struct Segments<'g, P> {
    index: Option<&'g Index<P>>,
    /// Next (section, run) to look at from the front.
    front: (usize, usize),
    /// One past the next (section, run) to look at from the back.
    back: (usize, usize),
    remaining: usize,
}

impl<'g, P> Iterator for Segments<'g, P> {
    type Item = Segment<'g, P>;

    fn next(&mut self) -> Option<Self::Item> {
        let index = self.index?;
        while self.remaining > 0 && self.front.0 < index.section_count() {
            let (n, i) = self.front;
            match index.listing(n, i) {
                Listing::Past => self.front = (n + 1, 0),
                Listing::Continued => self.front.1 += 1,
                Listing::Owned(place) => {
                    self.front.1 += 1;
                    self.remaining -= 1;
                    return Some(view(place));
                }
            }
        }
        None
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl<P> DoubleEndedIterator for Segments<'_, P> {
    fn next_back(&mut self) -> Option<Self::Item> {
        let index = self.index?;
        while self.remaining > 0 {
            let (n, i) = self.back;
            if i == 0 {
                let n = n.checked_sub(1)?;
                self.back = (n, index.runs_in(n));
                continue;
            }
            self.back.1 -= 1;
            if let Listing::Owned(place) = index.listing(n, i - 1) {
                self.remaining -= 1;
                return Some(view(place));
            }
        }
        None
    }
}

impl<P> ExactSizeIterator for Segments<'_, P> {}
impl<P> FusedIterator for Segments<'_, P> {}
