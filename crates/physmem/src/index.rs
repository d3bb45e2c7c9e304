//! The published index: an immutable snapshot of all segments that readers
//! search without locks.
//!
//! Lookup is direct-indexed, so its cost does not grow with fragmentation:
//! the frame number picks a *section* (2^9 frames, 2 MiB, Linux's sub-section
//! size) in a two-level table (a directory of leaves of 512 sections),
//! the section picks a *block* of its own size, and the block names the first
//! run (segment) that can hold any of its frames. Each section chooses its
//! block size so that at most [`MAX_SCAN`] runs are looked at, so a lookup is
//! five dependent loads and a short scan whether there are 32 segments or
//! 80,000.
//!
//! Sections, the table's leaves and the slot map's chunks are separate
//! allocations shared between successive indexes: a write rebuilds only
//! the sections its segments overlap, copies the table's directory (one
//! pointer per 512 sections), the leaves and the slot chunk it changes,
//! and retires what it replaced. Readers of untouched sections keep their
//! caches warm, and a write costs O(sections / 512 + slots / 512) copying
//! plus O(runs in the touched sections), not a copy of the table: at a
//! 64 GiB span that is under 10 KiB a plug, where a flat table copied
//! 256 KiB (see [`directory`]).

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::ops::Range;
use core::ptr;

use crate::error::PhysmemError;
use crate::fallible::reserve;
pub(crate) use crate::section::{Entry, Run, Section};
use crate::slots::{SlotChunk, SlotMap};
use crate::sync::Ordering;
use crate::types::{FrameRange, Pfn, SegmentHandle};
pub(crate) use directory::Leaf;
use directory::SectionTable;
#[cfg(all(test, not(loom)))]
use sections::MAX_SECTIONS;
pub(crate) use sections::SECTION_SHIFT;
use sections::{fill_sections, shift_for, Maker};

/// Where a run is listed in an index.
pub(crate) struct Place<'a, P> {
    /// The section's number in the table (counted from the table's base).
    pub(crate) number: usize,
    pub(crate) section: &'a Section<P>,
    /// The run's position in the section.
    pub(crate) position: usize,
}

impl<P> Clone for Place<'_, P> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<P> Copy for Place<'_, P> {}

impl<'a, P> Place<'a, P> {
    /// The run listed here.
    #[inline]
    pub(crate) fn run(&self) -> &'a Run<P> {
        self.section.run(self.position)
    }
}

/// What [`Index::listing`] finds at one position of a section, for
/// iteration in address order, which lists each segment once: in the
/// section holding its first frame.
pub(crate) enum Listing<'a, P> {
    /// The section has no run at that position (or is empty): iteration
    /// goes on with the next section.
    Past,
    /// A run that starts in an earlier section, which lists it as its own.
    Continued,
    /// A run that starts in this section.
    Owned(Place<'a, P>),
}

pub(crate) struct Index<P> {
    shift: u32,
    /// One per section from the table's base; null where no run
    /// overlaps. Owned by the index, shared with the next one for the
    /// sections a write keeps; its leaves too (see [`directory`]).
    sections: SectionTable<P>,
    /// Slot → first frame of its segment.
    slots: SlotMap,
    len: usize,
    /// Absolute numbers of the sections this index made itself; every
    /// other entry its table shares with the index it was made from was
    /// copied from there (see [`release_for`](Self::release_for)). The
    /// whole table for an index built from scratch.
    fresh: Range<u64>,
    /// As in [`Section`]: lets loom catch an index freed under a reader.
    #[cfg(loom)]
    alive: loom::cell::UnsafeCell<()>,
}

#[cfg(loom)]
impl<P> Drop for Index<P> {
    fn drop(&mut self) {
        self.alive.with_mut(|_| ());
    }
}

// SAFETY: an index owns the sections and slot chunks its raw pointers
// reach, and only borrows descriptors (owned by its `Physmem`), handing out
// `&P`: moving it to another thread shares `P`s, which `P: Sync` allows.
unsafe impl<P: Sync> Send for Index<P> {}
// SAFETY: a published index is only read. The one non-atomic cell it
// reaches, a section's `shares`, is read and written only by the writer
// under its lock, never through a reader; readers get `&P` (`P: Sync`).
unsafe impl<P: Sync> Sync for Index<P> {}

/// A part of an index that no index uses any more, from
/// [`Index::release_for`].
pub(crate) enum Unused<P> {
    Section(*const Section<P>),
    Chunk(*const SlotChunk),
    Leaf(*const Leaf<P>),
}

/// What a write changed, for [`Index::update`].
pub(crate) struct Update<'e, P> {
    /// Frames whose segments changed: the old and the new extents.
    pub(crate) frames: FrameRange,
    /// The segments of `slots` that are live after the write, sorted.
    pub(crate) entries: &'e [Entry<P>],
    /// Lowest start and highest end after the write, `None` when empty.
    pub(crate) span: Option<FrameRange>,
    /// Slots whose segment moved, appeared or went: (slot, new start).
    pub(crate) slots: &'e [(u32, Option<u64>)],
    pub(crate) slot_count: usize,
    pub(crate) len: usize,
}

impl<P> Index<P> {
    /// An index of `entries` (sorted, disjoint) from scratch; on failure
    /// nothing is left allocated.
    pub(crate) fn build(entries: &[Entry<P>], slot_count: usize) -> Result<Self, PhysmemError> {
        let slots = SlotMap::new(
            slot_count,
            entries.iter().map(|e| (e.run.slot, e.run.start)),
        )?;
        let mut index = Index {
            shift: SECTION_SHIFT,
            sections: SectionTable::empty(),
            slots,
            len: entries.len(),
            fresh: 0..0,
            #[cfg(loom)]
            alive: loom::cell::UnsafeCell::new(()),
        };
        let (Some(first), Some(last)) = (entries.first(), entries.last()) else {
            return Ok(index);
        };
        let span = FrameRange {
            start: Pfn(first.run.start),
            end: Pfn(last.run.end),
        };
        index.shift = shift_for(span);
        let numbers = span.sections(index.shift);
        index.fresh = numbers.clone();
        let filled = SectionTable::new(numbers.clone()).and_then(|sections| {
            index.sections = sections;
            fill_sections(&mut index.sections, index.shift, numbers, entries)
        });
        match filled {
            Ok(()) => Ok(index),
            Err(error) => {
                index.discard(None);
                Err(error)
            }
        }
    }

    /// The index after a write: sections the write touched are rebuilt from
    /// `update.entries`, the others are shared with this index (see
    /// [`release_for`](Self::release_for)). `None` when the span needs
    /// larger sections (build from scratch instead). On failure nothing is
    /// left allocated.
    pub(crate) fn update(&self, update: Update<'_, P>) -> Result<Option<Self>, PhysmemError> {
        let shift = self.shift;
        let (base, count) = match update.span {
            Some(span) => {
                if shift_for(span) != shift {
                    return Ok(None);
                }
                let numbers = span.sections(shift);
                (numbers.start, numbers.end - numbers.start)
            }
            None => (0, 0),
        };
        // The entries both tables cover are shared a leaf at a time (the
        // leaves the write does not touch), not copied: the ones the
        // write rebuilds are cleared, in fresh leaves, and filled below.
        let touched = update.frames.sections(shift);
        let fresh = touched.start.max(base)..touched.end.min(base + count);
        let sections = self.sections.derive(base..base + count, fresh.clone())?;
        let slots = match self.slots.update(update.slot_count, update.slots) {
            Ok(slots) => slots,
            Err(error) => {
                sections.discard(Some(&self.sections));
                return Err(error);
            }
        };
        let mut index = Index {
            shift,
            sections,
            slots,
            len: update.len,
            fresh,
            #[cfg(loom)]
            alive: loom::cell::UnsafeCell::new(()),
        };
        match self.fill_update(&mut index, &update) {
            Ok(()) => Ok(Some(index)),
            Err(error) => {
                index.discard(Some(self));
                Err(error)
            }
        }
    }

    fn fill_update(
        &self,
        index: &mut Index<P>,
        update: &Update<'_, P>,
    ) -> Result<(), PhysmemError> {
        let shift = self.shift;
        // Sections outside `fresh` are the old index's, copied by `update`:
        // kept sections are not written to, so readers' cached copies stay
        // valid, and the new index takes over their shares when it is
        // published (see `release_for`).
        let fresh = index.fresh.clone();
        // A touched section holds its old runs, less the segments the write
        // changed, plus their new versions: no walk over the writer's records.
        let changed = |slot: u32| update.slots.iter().any(|&(s, _)| s == slot);
        let mut list: Vec<Entry<P>> = Vec::new();
        let mut maker = Maker::new();
        for number in fresh {
            let start = number << shift;
            let end = start + (1 << shift);
            list.clear();
            let old = number
                .checked_sub(self.sections.base)
                .and_then(|n| self.section(n as usize));
            if let Some(old) = old {
                reserve(&mut list, old.len() + update.entries.len())?;
                for i in 0..old.len() {
                    let run = old.run(i);
                    if !changed(run.slot) {
                        let detail = old.detail(i);
                        list.push(Entry {
                            run: *run,
                            avail_start: detail.avail_start,
                            avail_end: detail.avail_end,
                            free_list: detail.free_list,
                            start_hint: detail.start_hint.load(Ordering::Relaxed),
                        });
                    }
                }
            }
            reserve(&mut list, update.entries.len())?;
            for entry in update.entries {
                if entry.run.start < end && entry.run.end > start {
                    let at = list.partition_point(|e| e.run.start < entry.run.start);
                    list.insert(at, entry.clone());
                }
            }
            if list.is_empty() {
                continue;
            }
            index.sections.set(number, maker.make(start, shift, &list)?);
        }
        Ok(())
    }

    /// Drops the share of its section of every table entry that `next`
    /// does not list at the same place (the same section number), passing
    /// each section nothing points to any more to `unused` (once), and each
    /// slot chunk `next` does not list at the same place. Called on the old
    /// index when `next` (made from it) is published, on an unpublished
    /// index being thrown away (with the index it was made from), and at
    /// teardown (with `None`). A section listed at the same place in both
    /// is one `next` kept: its share passes to `next`. New sections are
    /// fresh allocations, so they never match one of the old index.
    ///
    /// Only the entries [`changed`](Self::changed) names are looked at:
    /// a write costs the sections it touched, not the whole table.
    pub(crate) fn release_for(&self, next: Option<&Index<P>>, unused: impl FnMut(Unused<P>)) {
        let fresh = next.map_or(0..0, |next| next.fresh.clone());
        self.release_to(next, fresh, unused);
    }

    /// [`release_for`](Self::release_for) where `fresh` is the
    /// [`fresh`](Self::fresh) range of whichever of `self` and `other`
    /// was made from the other.
    fn release_to(
        &self,
        other: Option<&Index<P>>,
        fresh: Range<u64>,
        mut unused: impl FnMut(Unused<P>),
    ) {
        self.changed(other, fresh, |number, listed| {
            let kept = other.is_some_and(|other| other.entry_at(number) == Some(listed));
            // SAFETY: listed in this index, whose shares keep it allocated.
            if !kept && unsafe { &*listed }.release() {
                unused(Unused::Section(listed));
            }
        });
        for chunk in self.slots.replaced_by(other.map(|n| &n.slots)) {
            unused(Unused::Chunk(chunk));
        }
        for leaf in self.sections.replaced_by(other.map(|n| &n.sections)) {
            unused(Unused::Leaf(leaf));
        }
    }

    /// Calls `each` with (absolute number, section) for every non-null
    /// entry of this table that `other` may list differently, each once.
    /// One of the two was made from the other, and `fresh` is the
    /// [`fresh`](Self::fresh) range of the one that was made: outside it
    /// the entries both tables cover are equal. So the walk is over
    /// `fresh` and the part of this table that `other`'s does not cover.
    /// `None`: every entry.
    fn changed(
        &self,
        other: Option<&Index<P>>,
        fresh: Range<u64>,
        mut each: impl FnMut(u64, *const Section<P>),
    ) {
        let table = self.sections.base..self.table_end();
        let Some(other) = other else {
            return self.walk(table, &mut each);
        };
        let clip = |r: Range<u64>| r.start.max(table.start)..r.end.min(table.end);
        let mut ranges = [
            clip(fresh),
            clip(table.start..other.sections.base),
            clip(other.table_end()..table.end),
        ];
        ranges.sort_unstable_by_key(|r| r.start);
        // Walk the union of the ranges, so that no entry comes twice.
        let mut done = table.start;
        for range in ranges {
            let from = range.start.max(done);
            if from < range.end {
                self.walk(from..range.end, &mut each);
                done = range.end;
            }
        }
    }

    /// Calls `each` for the non-null entries with absolute numbers in
    /// `numbers` (within the table).
    fn walk(&self, numbers: Range<u64>, each: &mut impl FnMut(u64, *const Section<P>)) {
        for number in numbers {
            match self.sections.at(number) {
                Some(listed) if !listed.is_null() => each(number, listed),
                _ => {}
            }
        }
    }

    /// One past the last absolute section number of the table.
    fn table_end(&self) -> u64 {
        self.sections.end()
    }

    /// The table entry for absolute section `number`.
    fn entry_at(&self, number: u64) -> Option<*const Section<P>> {
        self.sections.at(number)
    }

    /// Most items [`release_for`](Self::release_for) with `next` can pass on.
    pub(crate) fn release_bound(&self, next: Option<&Index<P>>) -> usize {
        let mut listed = 0;
        let fresh = next.map_or(0..0, |next| next.fresh.clone());
        self.changed(next, fresh, |_, _| listed += 1);
        let leaves = self.sections.replaced_by(next.map(|n| &n.sections));
        listed + self.slots.chunk_count() + leaves.count()
    }

    /// Frees an index that was never published (or is the last one): what
    /// `origin` (the index it was made from) does not also hold.
    pub(crate) fn discard(&self, origin: Option<&Index<P>>) {
        self.release_to(origin, self.fresh.clone(), |unused| match unused {
            // SAFETY: from `Box::into_raw`; `release_for` passes a section
            // once, when no index lists it, and this index was never (or is
            // no longer) visible to readers.
            Unused::Section(section) => drop(unsafe { Box::from_raw(section.cast_mut()) }),
            // SAFETY: as for sections: from `Box::into_raw`, passed once,
            // listed by no index readers can reach.
            Unused::Chunk(chunk) => drop(unsafe { Box::from_raw(chunk.cast_mut()) }),
            // SAFETY: as for chunks.
            Unused::Leaf(leaf) => drop(unsafe { Box::from_raw(leaf.cast_mut()) }),
        });
    }

    /// First frame of section `n` of the table.
    fn section_start(&self, n: usize) -> u64 {
        (self.sections.base + n as u64) << self.shift
    }

    fn section(&self, number: usize) -> Option<&Section<P>> {
        #[cfg(loom)]
        self.alive.with(|_| ());
        let section = self.sections.get(number)?;
        // SAFETY: non-null section pointers stay valid as long as the index
        // that lists them (they are retired together with or after it).
        unsafe { section.as_ref() }
    }

    /// The run holding `pfn`: the lookup every reader does.
    #[inline]
    pub(crate) fn find(&self, pfn: u64) -> Option<&Run<P>> {
        let number = (pfn >> self.shift).wrapping_sub(self.sections.base);
        let section = self.section(number as usize)?;
        section.find(pfn).map(|i| section.run(i))
    }

    /// Where the run holding `pfn` is listed.
    pub(crate) fn place(&self, pfn: u64) -> Option<Place<'_, P>> {
        let number = (pfn >> self.shift).wrapping_sub(self.sections.base) as usize;
        let section = self.section(number)?;
        let position = section.find(pfn)?;
        Some(Place {
            number,
            section,
            position,
        })
    }

    /// Alternative lookup measured by the benchmark.
    pub(crate) fn find_by_section_search(&self, pfn: u64) -> Option<&Run<P>> {
        let number = (pfn >> self.shift).wrapping_sub(self.sections.base);
        let section = self.section(number as usize)?;
        section.find_by_search(pfn).map(|i| section.run(i))
    }

    /// Number of segments.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Where a live handle's segment is listed (in its first section).
    pub(crate) fn resolve(&self, handle: SegmentHandle) -> Option<Place<'_, P>> {
        let start = self.slots.get(handle.slot)?;
        let place = self.place(start)?;
        let run = place.run();
        (run.slot == handle.slot && run.generation == handle.generation).then_some(place)
    }

    /// Some segment sharing a frame with `[start, end)`: the one holding
    /// `start`, else the first starting inside the range (writer only).
    pub(crate) fn first_overlapping(&self, start: u64, end: u64) -> Option<&Run<P>> {
        if let Some(run) = self.find(start) {
            return Some(run);
        }
        let first = (start >> self.shift).max(self.sections.base);
        let last = ((end - 1) >> self.shift).min(self.table_end());
        (first..=last).find_map(|number| {
            let section = self.section((number - self.sections.base) as usize)?;
            // A run starting before `start` that reaches this section would
            // hold `start`; so the first overlapping run starts in range.
            let runs = &section.runs[..section.len()];
            runs.iter().find(|r| r.start >= start && r.start < end)
        })
    }

    /// The lowest segment.
    pub(crate) fn first(&self) -> Option<Place<'_, P>> {
        (0..self.sections.len()).find_map(|n| {
            let section = self.section(n)?;
            let position = (0..section.len()).find(|&i| section.owns(i, self.section_start(n)))?;
            Some(Place {
                number: n,
                section,
                position,
            })
        })
    }

    /// The highest segment.
    pub(crate) fn last(&self) -> Option<Place<'_, P>> {
        (0..self.sections.len()).rev().find_map(|n| {
            let section = self.section(n)?;
            let position = section.len().checked_sub(1)?;
            Some(Place {
                number: n,
                section,
                position,
            })
        })
    }

    /// The segment after the one at `place`.
    pub(crate) fn next(&self, place: Place<'_, P>) -> Option<Place<'_, P>> {
        let start = place.run().start;
        (place.number..self.sections.len()).find_map(|n| {
            let section = self.section(n)?;
            let position = section.runs[..section.len()].partition_point(|r| r.start <= start);
            (position < section.len()).then_some(Place {
                number: n,
                section,
                position,
            })
        })
    }

    /// The segment before the one at `place`.
    pub(crate) fn prev(&self, place: Place<'_, P>) -> Option<Place<'_, P>> {
        let start = place.run().start;
        (0..=place.number).rev().find_map(|n| {
            let section = self.section(n)?;
            let position = section.runs[..section.len()]
                .partition_point(|r| r.start < start)
                .checked_sub(1)?;
            Some(Place {
                number: n,
                section,
                position,
            })
        })
    }

    /// What section `n` lists at position `i`.
    pub(crate) fn listing(&self, n: usize, i: usize) -> Listing<'_, P> {
        match self.section(n) {
            Some(section) if i < section.len() => {
                if section.owns(i, self.section_start(n)) {
                    Listing::Owned(Place {
                        number: n,
                        section,
                        position: i,
                    })
                } else {
                    Listing::Continued
                }
            }
            _ => Listing::Past,
        }
    }

    /// Runs listed in section `n` (0 when it has none).
    pub(crate) fn runs_in(&self, n: usize) -> usize {
        self.section(n).map_or(0, Section::len)
    }

    /// Number of sections in the table.
    pub(crate) fn section_count(&self) -> usize {
        self.sections.len()
    }

    /// Sets a segment's start hint in every section listing it (writer only).
    pub(crate) fn set_start_hint(&self, handle: SegmentHandle, hint: u64) {
        let Some(place) = self.resolve(handle) else {
            return;
        };
        let end = place.run().end;
        let mut n = place.number;
        while let Some(section) = self.section(n) {
            let Some(i) = (0..section.len()).find(|&i| section.run(i).slot == handle.slot) else {
                break;
            };
            section.detail(i).start_hint.store(hint, Ordering::Relaxed);
            if self.section_start(n) + (1 << self.shift) >= end {
                break;
            }
            n += 1;
        }
    }

    /// Bytes of the section table and sections, for the benchmark.
    pub(crate) fn table_bytes(&self) -> usize {
        // Shared sections sit in consecutive entries: count each once.
        let mut previous = ptr::null();
        let sections: usize = (0..self.sections.len())
            .filter(|&n| {
                let listed = self.sections.get(n).unwrap_or(ptr::null());
                let fresh = listed != previous;
                previous = listed;
                fresh
            })
            .filter_map(|n| self.section(n))
            .map(Section::bytes)
            .sum();
        self.sections.bytes() + sections
    }
}

mod directory;
mod sections;
#[cfg(all(test, not(loom)))]
mod tests;
