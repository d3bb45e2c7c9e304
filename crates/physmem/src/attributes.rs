//! Writer-side segment walks and avail-range changes: what boot code
//! needs before page init, when readers see no segments yet (NetBSD's
//! `pmap_steal_memory` walks `uvm_physseg_get_first` / `_next` and moves
//! `avail_start` through `uvm_physseg_set_avail_start`).

use lock_api::RawMutex;

use crate::error::PhysmemError;
use crate::page::Page;
use crate::physmem::Physmem;
use crate::range::PfnRange;
use crate::types::{Pfn, SegmentHandle, SegmentInfo};
use crate::write::Change;

impl<P: Page, R: RawMutex, const BOOT: usize> Physmem<P, R, BOOT> {
    /// Calls `visit` with every segment's handle and attributes, in no
    /// particular order, under the writer lock, before or after
    /// [`init_pages`](Self::init_pages). Readers ([`read`](Self::read)) see
    /// segments only after page init; boot code walks them with this.
    /// `visit` must not call back into this `Physmem`'s writers (the lock is
    /// held).
    ///
    /// ```
    /// use hotkern_physmem::{BasicPage, BootRange, FreeList, Pfn, PfnRange, Physmem};
    ///
    /// let mem: Physmem<BasicPage> = Physmem::new();
    /// for (start, end) in [(0x300, 0x400), (0x100, 0x200)] {
    ///     let frames = PfnRange { start: Pfn(start), end: Pfn(end) };
    ///     mem.physload(BootRange::available(frames), FreeList::DEFAULT).unwrap();
    /// }
    /// let mut starts = Vec::new();
    /// mem.for_each_segment(|_, info| starts.push(info.start.0));
    /// starts.sort();
    /// assert_eq!(starts, [0x100, 0x300]);
    /// ```
    pub fn for_each_segment(&self, mut visit: impl FnMut(SegmentHandle, &SegmentInfo)) {
        let writer = self.writer.lock();
        for (slot, record) in writer.table.each_live() {
            visit(writer.table.handle(slot), &record.info());
        }
    }

    /// Sets the frames of the segment the page allocator may hand out
    /// (NetBSD's `uvm_physseg_set_avail_start` / `_end`, which boot code uses
    /// to take pages for itself). `avail` must lie inside the segment;
    /// otherwise [`PhysmemError::InvalidRange`] and nothing changes.
    ///
    /// ```
    /// use hotkern_physmem::{BasicPage, BootRange, FreeList, Pfn, PfnRange, Physmem, PhysmemError};
    ///
    /// let mem: Physmem<BasicPage> = Physmem::new();
    /// let frames = PfnRange { start: Pfn(0x100), end: Pfn(0x200) };
    /// let segment = mem.physload(BootRange::available(frames), FreeList::DEFAULT)?;
    /// // Boot code took the first 16 frames.
    /// mem.set_avail(segment, PfnRange { start: Pfn(0x110), end: Pfn(0x200) })?;
    /// assert_eq!(mem.segment_info(segment)?.avail_start, Pfn(0x110));
    /// let outside = PfnRange { start: Pfn(0x110), end: Pfn(0x201) };
    /// assert!(matches!(mem.set_avail(segment, outside), Err(PhysmemError::InvalidRange { .. })));
    /// # Ok::<(), PhysmemError>(())
    /// ```
    pub fn set_avail(&self, handle: SegmentHandle, avail: PfnRange) -> Result<(), PhysmemError> {
        let mut guard = self.writer.lock();
        let writer = &mut *guard;
        let mut record = writer.table.get(handle)?;
        let (start, end) = (avail.start.0, avail.end.0);
        if !(record.start <= start && start <= end && end <= record.end) {
            return Err(PhysmemError::InvalidRange {
                start: Pfn(start),
                end: Pfn(end),
            });
        }
        record.avail_start = start;
        record.avail_end = end;
        let change = Change::new(record.frames(), &[(handle.slot, Some(record))]);
        if !writer.initialized {
            change.apply(&mut writer.table);
            return Ok(());
        }
        // Readers copy the avail range into each index entry: publish a new
        // index, as a cut does, so that they see the change at once.
        let index = self.prepare(writer, &change, 0)?;
        change.apply(&mut writer.table);
        self.publish(writer, index, None);
        Ok(())
    }
}
