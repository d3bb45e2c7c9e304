//! The writer's segment records, by slot. Before page init they live in a
//! fixed array (no heap: NetBSD's `VM_PHYSSEG_MAX` boot storage); the init
//! step moves them, slots and generations unchanged, to the heap. From then
//! on the published index, not the table, finds segments by frame: the
//! table has no ordered map whose insert could need memory mid-write.

use alloc::vec::Vec;

use crate::deferred::Deferred;
use crate::error::PhysmemError;
use crate::fallible::{reserve, try_vec};
use crate::types::{FrameRange, FreeList, Pfn, SegmentHandle, SegmentInfo};

/// A segment as the writer keeps it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Record {
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) avail_start: u64,
    pub(crate) avail_end: u64,
    pub(crate) free_list: FreeList,
    pub(crate) start_hint: u64,
    /// Slab holding the descriptors (meaningful after page init).
    pub(crate) slab: u32,
    /// Index in the slab of the descriptor of `start`.
    pub(crate) first: u64,
    /// Chunk states while the descriptors are made on first use
    /// (`deferred` module), owned by the record; null once all are made or
    /// when they were made at plug time.
    pub(crate) deferred: *const Deferred,
}

impl Record {
    pub(crate) fn len(&self) -> u64 {
        self.end - self.start
    }

    /// The segment's frames.
    pub(crate) fn frames(&self) -> FrameRange {
        FrameRange {
            start: Pfn(self.start),
            end: Pfn(self.end),
        }
    }

    /// The record cut to `[start, end)`, its avail range clamped into it.
    pub(crate) fn cut(&self, start: u64, end: u64) -> Record {
        let avail_start = self.avail_start.clamp(start, end);
        let avail_end = self.avail_end.clamp(avail_start, end);
        let pages = end - start;
        Record {
            start,
            end,
            avail_start,
            avail_end,
            free_list: self.free_list,
            start_hint: if self.start_hint < pages {
                self.start_hint
            } else {
                0
            },
            slab: self.slab,
            first: self.first + (start - self.start),
            deferred: self.deferred,
        }
    }

    pub(crate) fn info(&self) -> SegmentInfo {
        SegmentInfo {
            start: Pfn(self.start),
            end: Pfn(self.end),
            avail_start: Pfn(self.avail_start),
            avail_end: Pfn(self.avail_end),
            free_list: self.free_list,
            start_hint: self.start_hint,
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Slot {
    pub(crate) generation: u32,
    /// Set when the generation is exhausted: the slot is never used again.
    retired: bool,
    pub(crate) record: Option<Record>,
}

impl Slot {
    const EMPTY: Slot = Slot {
        generation: 0,
        retired: false,
        record: None,
    };

    fn usable(&self) -> bool {
        self.record.is_none() && !self.retired
    }
}

/// The heap phase's storage, see [`Table::heap_parts`].
pub(crate) struct HeapParts {
    heap: Vec<Slot>,
    free_slots: Vec<u32>,
}

pub(crate) struct Table<const BOOT: usize> {
    boot: [Slot; BOOT],
    heap: Vec<Slot>,
    free_slots: Vec<u32>,
    on_heap: bool,
    count: usize,
}

impl<const BOOT: usize> Table<BOOT> {
    pub(crate) const fn new() -> Self {
        Table {
            boot: [Slot::EMPTY; BOOT],
            heap: Vec::new(),
            free_slots: Vec::new(),
            on_heap: false,
            count: 0,
        }
    }

    fn slots(&self) -> &[Slot] {
        if self.on_heap {
            &self.heap
        } else {
            &self.boot
        }
    }

    fn slots_mut(&mut self) -> &mut [Slot] {
        if self.on_heap {
            &mut self.heap
        } else {
            &mut self.boot
        }
    }

    pub(crate) fn count(&self) -> usize {
        self.count
    }

    pub(crate) fn slot_count(&self) -> usize {
        self.slots().len()
    }

    pub(crate) fn get(&self, handle: SegmentHandle) -> Result<Record, PhysmemError> {
        match self.slots().get(handle.slot as usize) {
            Some(Slot {
                generation,
                record: Some(record),
                ..
            }) if *generation == handle.generation => Ok(*record),
            _ => Err(PhysmemError::StaleHandle),
        }
    }

    /// The record of a live slot.
    pub(crate) fn record(&self, slot: u32) -> Record {
        self.slots()[slot as usize]
            .record
            .expect("slot found by lookup is live")
    }

    pub(crate) fn handle(&self, slot: u32) -> SegmentHandle {
        SegmentHandle {
            slot,
            generation: self.slots()[slot as usize].generation,
        }
    }

    /// The boot segment holding `pfn`: (slot, record). After page init the
    /// published index answers this (see `Physmem::containing`).
    pub(crate) fn containing(&self, pfn: u64) -> Option<(u32, Record)> {
        self.boot
            .iter()
            .enumerate()
            .find_map(|(i, s)| match s.record {
                Some(r) if r.start <= pfn && pfn < r.end => Some((i as u32, r)),
                _ => None,
            })
    }

    /// Some boot segment sharing a frame with `[start, end)`.
    pub(crate) fn overlap(&self, start: u64, end: u64) -> Option<Record> {
        self.boot.iter().find_map(|s| match s.record {
            Some(r) if r.start < end && start < r.end => Some(r),
            _ => None,
        })
    }

    /// A slot for a new segment, reserved (with its other room) so that
    /// `insert` cannot fail or allocate.
    pub(crate) fn reserve_slot(&mut self) -> Result<u32, PhysmemError> {
        if self.on_heap {
            if let Some(&slot) = self.free_slots.last() {
                return Ok(slot);
            }
            if self.heap.len() >= u32::MAX as usize {
                return Err(PhysmemError::StorageFull);
            }
            reserve(&mut self.heap, 1)?;
            Ok(self.heap.len() as u32)
        } else {
            self.boot
                .iter()
                .position(Slot::usable)
                .map(|i| i as u32)
                .ok_or(PhysmemError::StorageFull)
        }
    }

    /// Puts a new segment in `slot` (from `reserve_slot`).
    pub(crate) fn insert(&mut self, slot: u32, record: Record) -> SegmentHandle {
        if self.on_heap {
            if slot as usize == self.heap.len() {
                self.heap.push(Slot::EMPTY);
            } else if self.free_slots.last() == Some(&slot) {
                self.free_slots.pop();
            } else {
                self.free_slots.retain(|&s| s != slot);
            }
        }
        self.slots_mut()[slot as usize].record = Some(record);
        self.count += 1;
        self.handle(slot)
    }

    /// Replaces a live segment's record (its start may move).
    pub(crate) fn update(&mut self, slot: u32, record: Record) {
        self.slots_mut()[slot as usize].record = Some(record);
    }

    /// Room for [`remove`](Self::remove) to list a freed slot.
    pub(crate) fn reserve_remove(&mut self) -> Result<(), PhysmemError> {
        if self.on_heap {
            reserve(&mut self.free_slots, 1)?;
        }
        Ok(())
    }

    /// The generation a segment put in `slot` would have.
    pub(crate) fn generation(&self, slot: u32) -> u32 {
        self.slots().get(slot as usize).map_or(0, |s| s.generation)
    }

    /// Removes a live segment; its handles become stale for good.
    pub(crate) fn remove(&mut self, slot: u32) {
        let on_heap = self.on_heap;
        let entry = &mut self.slots_mut()[slot as usize];
        entry.record = None;
        match entry.generation.checked_add(1) {
            Some(next) => entry.generation = next,
            None => entry.retired = true,
        }
        let reusable = !entry.retired;
        if on_heap && reusable {
            self.free_slots.push(slot);
        }
        self.count -= 1;
    }

    /// The first frame of the segment in `slot`, if it is live.
    pub(crate) fn start_of(&self, slot: u32) -> Option<u64> {
        self.slots().get(slot as usize)?.record.map(|r| r.start)
    }

    /// Live segments, in no particular order: (slot, record), for teardown.
    pub(crate) fn each_live(&self) -> impl Iterator<Item = (u32, Record)> + '_ {
        self.slots()
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.record.map(|r| (i as u32, r)))
    }

    /// Boot records, without the heap (for page init).
    pub(crate) fn boot_records(&self) -> impl Iterator<Item = (u32, Record)> + '_ {
        self.boot
            .iter()
            .enumerate()
            .filter_map(|(i, s)| s.record.map(|r| (i as u32, r)))
    }

    /// The heap storage for the boot slots with `records` (slot → record
    /// with descriptors assigned, sorted by start), allocated before page
    /// init changes anything; [`adopt`](Self::adopt) puts it in place.
    pub(crate) fn heap_parts(&self, records: &[(u32, Record)]) -> Result<HeapParts, PhysmemError> {
        let mut heap = try_vec(BOOT.max(1))?;
        heap.extend_from_slice(&self.boot);
        for &(slot, record) in records {
            heap[slot as usize].record = Some(record);
        }
        let mut free_slots = try_vec(BOOT)?;
        for (i, slot) in heap.iter().enumerate().rev() {
            if slot.usable() {
                free_slots.push(i as u32);
            }
        }
        Ok(HeapParts { heap, free_slots })
    }

    /// Moves the boot slots to the heap; slots and generations are kept.
    pub(crate) fn adopt(&mut self, parts: HeapParts) {
        self.heap = parts.heap;
        self.free_slots = parts.free_slots;
        self.on_heap = true;
    }

    /// Records a start hint.
    pub(crate) fn set_start_hint(&mut self, slot: u32, hint: u64) {
        if let Some(record) = self.slots_mut()[slot as usize].record.as_mut() {
            record.start_hint = hint;
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    fn record(start: u64, end: u64) -> Record {
        Record {
            start,
            end,
            avail_start: start,
            avail_end: end,
            free_list: FreeList::DEFAULT,
            start_hint: 0,
            slab: 0,
            first: 0,
            deferred: core::ptr::null(),
        }
    }

    /// A table after page init with two boot slots, both free.
    fn on_heap() -> Table<2> {
        let mut table = Table::new();
        let parts = table.heap_parts(&[]).unwrap();
        table.adopt(parts);
        table
    }

    fn add<const BOOT: usize>(table: &mut Table<BOOT>, start: u64) -> SegmentHandle {
        let slot = table.reserve_slot().unwrap();
        table.insert(slot, record(start, start + 4))
    }

    #[test]
    fn a_freed_slot_is_reused_before_a_new_one_with_the_next_generation() {
        let mut table = on_heap();
        let handles: Vec<SegmentHandle> = (0..3).map(|i| add(&mut table, i * 10)).collect();
        let slots: Vec<u32> = handles.iter().map(|h| h.slot).collect();
        // The boot slots first, lowest first, then a new one.
        assert_eq!(slots, [0, 1, 2]);
        table.reserve_remove().unwrap();
        table.remove(1);
        assert_eq!(table.get(handles[1]), Err(PhysmemError::StaleHandle));
        let reused = add(&mut table, 100);
        assert_eq!((reused.slot, reused.generation), (1, 1));
        assert_eq!(table.get(reused).unwrap().start, 100);
        assert_eq!(table.get(handles[1]), Err(PhysmemError::StaleHandle));
        assert_eq!(add(&mut table, 200).slot, 3, "no free slot left");
        assert_eq!((table.count(), table.slot_count()), (4, 4));
    }

    #[test]
    fn a_slot_whose_generation_would_wrap_is_retired_for_good() {
        let mut heap = on_heap();
        let last = add(&mut heap, 0);
        heap.heap[last.slot as usize].generation = u32::MAX;
        let last = heap.handle(last.slot);
        heap.reserve_remove().unwrap();
        heap.remove(last.slot);
        assert_eq!(heap.get(last), Err(PhysmemError::StaleHandle));
        assert_eq!(heap.reserve_slot(), Ok(1), "the retired slot is skipped");
        // The same at boot, where free slots are found by a scan.
        let mut boot: Table<2> = Table::new();
        let first = add(&mut boot, 0);
        boot.boot[first.slot as usize].generation = u32::MAX;
        boot.remove(first.slot);
        assert_eq!(boot.reserve_slot(), Ok(1));
        add(&mut boot, 10);
        assert_eq!(boot.reserve_slot(), Err(PhysmemError::StorageFull));
    }
}
