//! The write path's two halves: [`Physmem::prepare`] works out and
//! allocates everything a write needs (the new index, room to retire the
//! old one) while nothing has changed yet, so running out of memory is
//! refused like bad input; [`Physmem::publish`] then commits without
//! allocating.

use alloc::boxed::Box;
use alloc::vec::Vec;

use lock_api::RawMutex;

use crate::deferred;
use crate::error::PhysmemError;
use crate::fallible::{try_box, try_vec};
use crate::index::{Entry, Index, Run, Unused, Update};
use crate::page::Page;
use crate::physmem::{collect, Garbage, Physmem, Writer};
use crate::sync::{AtomicPtr, Ordering};
use crate::table::{Record, Table};
use crate::types::{FrameRange, Pfn};

impl<P: Page, R: RawMutex, const BOOT: usize> Physmem<P, R, BOOT> {
    /// The published index, borrowed for as long as the writer lock (which
    /// keeps it alive) is held; `None` before page init.
    pub(crate) fn current<'w>(
        published: &AtomicPtr<Index<P>>,
        _writer: &'w Writer<P, BOOT>,
    ) -> Option<&'w Index<P>> {
        // SAFETY: only a writer replaces or frees the published index, and
        // `_writer` proves the lock is held for `'w`.
        unsafe { published.load(Ordering::Acquire).as_ref() }
    }

    /// The index entry of `record`, which is (or is about to be) in `slot`.
    pub(crate) fn entry(writer: &Writer<P, BOOT>, slot: u32, record: Record) -> Entry<P> {
        Entry {
            run: Run {
                start: record.start,
                end: record.end,
                pages: if record.deferred.is_null() {
                    writer.slabs.get(record.slab).at(record.first)
                } else {
                    deferred::tag(record.deferred)
                },
                slot,
                generation: writer.table.generation(slot),
            },
            avail_start: record.avail_start,
            avail_end: record.avail_end,
            free_list: record.free_list,
            start_hint: record.start_hint,
        }
    }

    /// Builds the index that reflects `change` (not applied to the table
    /// yet) and reserves everything publishing it needs, so that nothing
    /// after this can fail. On failure nothing has changed.
    pub(crate) fn prepare(
        &self,
        writer: &mut Writer<P, BOOT>,
        change: &Change,
        garbage: usize,
    ) -> Result<Box<Index<P>>, PhysmemError> {
        let current = self.published.load(Ordering::Acquire);
        // SAFETY: the writer lock keeps the published index alive.
        let current = unsafe { current.as_ref() };
        let changes = change.slots();
        let table = &writer.table;
        let slot_count = changes
            .iter()
            .map(|&(slot, _)| slot as usize + 1)
            .fold(table.slot_count(), usize::max);
        let mut len = table.count();
        for &(slot, record) in changes {
            match (table.start_of(slot).is_some(), record.is_some()) {
                (false, true) => len += 1,
                (true, false) => len -= 1,
                _ => {}
            }
        }
        let updated = match current {
            Some(current) => {
                let mut entries = try_vec(changes.len())?;
                for &(slot, record) in changes {
                    if let Some(record) = record {
                        let at = entries.partition_point(|e: &Entry<P>| e.run.start < record.start);
                        entries.insert(at, Self::entry(writer, slot, record));
                    }
                }
                let mut starts = [(0, None); 2];
                for (start, &(slot, record)) in starts.iter_mut().zip(changes) {
                    *start = (slot, record.map(|r| r.start));
                }
                current.update(Update {
                    frames: change.frames,
                    entries: &entries,
                    span: span_after(current, changes, table),
                    slots: &starts[..changes.len()],
                    slot_count,
                    len,
                })?
            }
            None => None,
        };
        let index = match updated {
            Some(index) => index,
            None => {
                let sorted = sorted_after(current, changes, table)?;
                let mut entries = try_vec(sorted.len())?;
                entries.extend(
                    sorted
                        .iter()
                        .map(|&(slot, record)| Self::entry(writer, slot, record)),
                );
                Index::build(&entries, slot_count)?
            }
        };
        self.finish(writer, index, garbage)
    }

    /// Boxes a new index and reserves room to retire what publishing it
    /// replaces plus `garbage` more items; frees the index on failure.
    pub(crate) fn finish(
        &self,
        writer: &mut Writer<P, BOOT>,
        index: Index<P>,
        garbage: usize,
    ) -> Result<Box<Index<P>>, PhysmemError> {
        let current = self.published.load(Ordering::Acquire);
        // SAFETY: the writer lock keeps the published index alive.
        let current = unsafe { current.as_ref() };
        let retiring = 1 + current.map_or(0, |c| c.release_bound(Some(&index))) + garbage;
        let boxed = match writer.retired.reserve(retiring) {
            Ok(()) => try_box(index),
            Err(_) => Err(index),
        };
        boxed.map_err(|index| {
            index.discard(current);
            PhysmemError::OutOfMemory
        })
    }

    /// Publishes `index` (from [`prepare`](Self::prepare)) with one atomic
    /// swap, then retires what readers can no longer reach (the old index,
    /// the sections and slot chunks only it used, `garbage`) and reclaims.
    /// Allocates nothing.
    pub(crate) fn publish(
        &self,
        writer: &mut Writer<P, BOOT>,
        index: Box<Index<P>>,
        garbage: Option<Garbage<P>>,
    ) {
        let index = Box::into_raw(index);
        let old = self.published.swap(index, Ordering::AcqRel);
        if !old.is_null() {
            // SAFETY: `old` came from `Box::into_raw` when it was published;
            // swapped out under the writer lock, it is owned here alone
            // (readers still inside are covered by retiring it below).
            let old = unsafe { Box::from_raw(old) };
            let retired = &mut writer.retired;
            // SAFETY: `index` came from `Box::into_raw` just above and, now
            // published, is freed only by a later write under this lock.
            let next = unsafe { &*index };
            old.release_for(Some(next), |unused| {
                retired.retire(match unused {
                    Unused::Section(section) => {
                        // SAFETY: from `Box::into_raw`; `release_for` passes
                        // a section once, when no published index lists it.
                        // It is retired, not freed, so readers still inside
                        // keep it.
                        Garbage::Section(unsafe { Box::from_raw(section.cast_mut()) })
                    }
                    Unused::Chunk(chunk) => {
                        // SAFETY: as for sections: from `Box::into_raw`,
                        // passed once, retired until no reader can see it.
                        Garbage::SlotChunk(unsafe { Box::from_raw(chunk.cast_mut()) })
                    }
                    // SAFETY: as for chunks.
                    Unused::Leaf(leaf) => Garbage::Leaf(unsafe { Box::from_raw(leaf.cast_mut()) }),
                })
            });
            retired.retire(Garbage::Index(old));
        }
        if let Some(garbage) = garbage {
            writer.retired.retire(garbage);
        }
        collect(&self.domain, writer);
    }
}

/// The live segment holding `pfn` (heap phase, from the published index):
/// (slot, record).
pub(crate) fn containing<P, const BOOT: usize>(
    index: &Index<P>,
    table: &Table<BOOT>,
    pfn: u64,
) -> Option<(u32, Record)> {
    let slot = index.find(pfn)?.slot;
    Some((slot, table.record(slot)))
}

/// Some live segment sharing a frame with `[start, end)` (heap phase).
pub(crate) fn overlap<P, const BOOT: usize>(
    index: &Index<P>,
    table: &Table<BOOT>,
    start: u64,
    end: u64,
) -> Option<Record> {
    let run = index.first_overlapping(start, end)?;
    Some(table.record(run.slot))
}

/// Lowest start and highest end of all segments once `changes` (slot, its
/// record after the write or `None`) are applied; `index` is the published
/// one.
fn span_after<P, const BOOT: usize>(
    index: &Index<P>,
    changes: &[(u32, Option<Record>)],
    table: &Table<BOOT>,
) -> Option<FrameRange> {
    let unchanged = |slot: u32| changes.iter().all(|&(s, _)| s != slot);
    // At most two segments changed: a couple of steps from either end.
    let mut low = index.first();
    while let Some(place) = low.filter(|p| !unchanged(p.run().slot)) {
        low = index.next(place);
    }
    let mut high = index.last();
    while let Some(place) = high.filter(|p| !unchanged(p.run().slot)) {
        high = index.prev(place);
    }
    let mut span = low.zip(high).map(|(low, high)| FrameRange {
        start: Pfn(low.run().start),
        end: Pfn(table.record(high.run().slot).end),
    });
    for record in changes.iter().filter_map(|(_, r)| r.as_ref()) {
        let frames = record.frames();
        span = Some(span.map_or(frames, |span| span.hull(frames)));
    }
    span
}

/// Live segments in address order once `changes` are applied to the
/// published `index`: (slot, record).
fn sorted_after<P, const BOOT: usize>(
    index: Option<&Index<P>>,
    changes: &[(u32, Option<Record>)],
    table: &Table<BOOT>,
) -> Result<Vec<(u32, Record)>, PhysmemError> {
    let mut sorted = try_vec(index.map_or(0, Index::len) + changes.len())?;
    if let Some(index) = index {
        let mut place = index.first();
        while let Some(at) = place {
            let slot = at.run().slot;
            if changes.iter().all(|&(s, _)| s != slot) {
                sorted.push((slot, table.record(slot)));
            }
            place = index.next(at);
        }
    }
    for &(slot, record) in changes {
        if let Some(record) = record {
            let at = sorted.partition_point(|(_, r)| r.start < record.start);
            sorted.insert(at, (slot, record));
        }
    }
    Ok(sorted)
}

/// A write worked out before anything changes: the frames whose segments
/// change (old and new extents together) and each touched slot's record
/// after it (`None`: removed).
pub(crate) struct Change {
    frames: FrameRange,
    slots: [(u32, Option<Record>); 2],
    count: usize,
}

impl Change {
    pub(crate) fn new(frames: FrameRange, changes: &[(u32, Option<Record>)]) -> Self {
        let mut slots = [(0, None); 2];
        slots[..changes.len()].copy_from_slice(changes);
        Change {
            frames,
            slots,
            count: changes.len(),
        }
    }

    fn slots(&self) -> &[(u32, Option<Record>)] {
        &self.slots[..self.count]
    }

    /// Makes the change in the table; its room was reserved, so this
    /// cannot fail or allocate.
    pub(crate) fn apply<const BOOT: usize>(&self, table: &mut Table<BOOT>) {
        for &(slot, record) in self.slots() {
            match (record, table.start_of(slot).is_some()) {
                (None, _) => table.remove(slot),
                (Some(record), true) => table.update(slot, record),
                (Some(record), false) => {
                    table.insert(slot, record);
                }
            }
        }
    }
}
