//! The two changes every write of [`Physmem`] comes down to: a segment
//! added (its descriptors on the heap or on memory the caller gives) and a
//! range taken out (a whole segment, its front or back, or a hole that
//! splits it), each built aside and published in one step.

use super::*;

impl<P: Page, R: RawMutex, const BOOT: usize> Physmem<P, R, BOOT> {
    /// Adds `record` as a new segment, its descriptors in a heap slab, or
    /// in `memory` (the caller's, made at once rather than on first use).
    pub(crate) fn insert(
        &self,
        writer: &mut Writer<P, BOOT>,
        mut record: Record,
        memory: Option<NonNull<P>>,
    ) -> Result<SegmentHandle, PhysmemError> {
        let existing = match Self::current(&self.published, writer) {
            Some(index) => write::overlap(index, &writer.table, record.start, record.end),
            None => writer.table.overlap(record.start, record.end),
        };
        if let Some(existing) = existing {
            return Err(PhysmemError::Overlap {
                existing_start: Pfn(existing.start),
                existing_end: Pfn(existing.end),
            });
        }
        let slot = writer.table.reserve_slot()?;
        if !writer.initialized {
            return Ok(writer.table.insert(slot, record));
        }
        collect(&self.domain, writer);
        let (slab, first) = match memory {
            Some(base) => writer.slabs.alloc_on_memory(base, record.len())?,
            None => writer.slabs.alloc(record.len())?,
        };
        // More than one chunk: make the descriptors on first use
        // (`deferred`), not here; in the caller's memory they are made
        // here, so the plug takes no heap for chunk states.
        let deferred = if memory.is_none()
            && deferred::deferrable::<P>()
            && record.len() > deferred::CHUNK_FRAMES
        {
            let base = writer.slabs.get(slab).at(first);
            match Deferred::new(record.start, record.end, slab, first, base) {
                Ok(deferred) => Some(deferred),
                Err(error) => {
                    writer.slabs.cancel(slab, first, record.len());
                    return Err(error);
                }
            }
        } else {
            None
        };
        record.slab = slab;
        record.first = first;
        record.deferred = deferred.as_deref().map_or(ptr::null(), ptr::from_ref);
        let change = Change::new(record.frames(), &[(slot, Some(record))]);
        let index = match self.prepare(writer, &change, 0) {
            Ok(index) => index,
            Err(error) => {
                writer.slabs.cancel(slab, first, record.len());
                return Err(error);
            }
        };
        match deferred {
            // The record owns the states from here on (see `free`).
            Some(deferred) => drop(Box::into_raw(deferred)),
            // SAFETY: just allocated from the slab, so in bounds and not
            // initialised yet.
            None => unsafe {
                writer
                    .slabs
                    .get(slab)
                    .init(first, record.len(), Pfn(record.start))
            },
        }
        change.apply(&mut writer.table);
        self.publish(writer, index, None);
        Ok(writer.table.handle(slot))
    }

    pub(super) fn remove_range(
        &self,
        writer: &mut Writer<P, BOOT>,
        pfn: Pfn,
        npages: PageCount,
    ) -> Result<(), PhysmemError> {
        let end = checked_end(pfn, npages)?.0;
        let outside = PhysmemError::NotInOneSegment { pfn, npages };
        let found = match Self::current(&self.published, writer) {
            Some(index) => write::containing(index, &writer.table, pfn.0),
            None => writer.table.containing(pfn.0),
        };
        let (slot, record) = found.ok_or(outside)?;
        if end > record.end {
            return Err(outside);
        }
        let (start, stop) = (pfn.0, end);
        let whole = start == record.start && stop == record.end;
        let on_memory = writer.initialized && writer.slabs.on_memory(record.slab);
        if on_memory {
            // The plug's descriptors live in its own first frames: those
            // frames go last, with the plug's last piece, as Linux offlines
            // a memmap_on_memory block's vmemmap pages last. Any other part
            // may go first; its descriptors stay in the slab until then.
            let slab = writer.slabs.get(record.slab);
            let plug_start = record.start - record.first;
            let holding_end = plug_start + Self::descriptor_frames(PageCount(slab.capacity())).0;
            if start < holding_end && !(whole && slab.pieces == 1) {
                return Err(PhysmemError::DescriptorsOnMemory {
                    start: Pfn(record.start),
                    end: Pfn(record.end),
                });
            }
        }
        let frames = record.frames();
        let change = match (start == record.start, stop == record.end) {
            (true, true) => {
                if writer.table.count() == 1 {
                    return Err(PhysmemError::LastSegment);
                }
                writer.table.reserve_remove()?;
                Change::new(frames, &[(slot, None)])
            }
            (true, false) => Change::new(frames, &[(slot, Some(record.cut(stop, record.end)))]),
            (false, true) => Change::new(frames, &[(slot, Some(record.cut(record.start, start)))]),
            (false, false) => {
                let upper = writer.table.reserve_slot()?;
                let mut right = record.cut(stop, record.end);
                right.start_hint = 0;
                let left = record.cut(record.start, start);
                Change::new(frames, &[(slot, Some(left)), (upper, Some(right))])
            }
        };
        if !writer.initialized {
            change.apply(&mut writer.table);
            return Ok(());
        }
        writer.slabs.reserve_free(record.slab)?;
        let index = self.prepare(writer, &change, 1)?;
        change.apply(&mut writer.table);
        if on_memory {
            let pieces = match (start == record.start, stop == record.end) {
                (true, true) => -1,
                (false, false) => 1,
                _ => 0,
            };
            writer.slabs.add_pieces(record.slab, pieces);
        }
        // SAFETY: a live record's states, alive while any piece of its
        // plug is; the writer lock is held.
        let garbage = match unsafe { record.deferred.as_ref() } {
            None => Some(Garbage::Pages {
                slab: record.slab,
                first: record.first + (start - record.start),
                count: stop - start,
                deferred: ptr::null(),
            }),
            // A deferred plug's descriptor space goes back whole, with its
            // states, when its last piece goes (see `Deferred`); a cut
            // changes only the number of pieces.
            Some(deferred) => {
                let pieces = match (start == record.start, stop == record.end) {
                    (true, true) => deferred.pieces() - 1,
                    (false, false) => deferred.pieces() + 1,
                    _ => deferred.pieces(),
                };
                deferred.set_pieces(pieces);
                (pieces == 0).then_some(Garbage::Pages {
                    slab: deferred.slab,
                    first: deferred.first,
                    count: deferred.end - deferred.start,
                    deferred: record.deferred,
                })
            }
        };
        self.publish(writer, index, garbage);
        Ok(())
    }
}
