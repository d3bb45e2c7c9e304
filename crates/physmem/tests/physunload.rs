//! NetBSD's `uvm_page_physunload` and `uvm_page_physunload_force`: a page
//! taken from the front or back of a segment's avail range, or from
//! wherever the range starts, before and after page init.
// These use real threads and atomics; the loom build runs only tests/loom.rs.
#![cfg(not(loom))]

use hotkern_physmem::{BasicPage, BootRange, FreeList, Pfn, Physmem, PhysmemError, SegmentHandle};

type Mem = Physmem<BasicPage>;

fn bounds(mem: &Mem, handle: SegmentHandle) -> (u64, u64) {
    let info = mem.segment_info(handle).unwrap();
    (info.start.0, info.end.0)
}

fn boot(segments: &[(u64, u64, u64, u64, u32)]) -> (Mem, Vec<SegmentHandle>) {
    let mem = Mem::new();
    let handles = segments
        .iter()
        .map(|&(s, e, a, b, list)| {
            mem.physload(
                BootRange {
                    start: Pfn(s),
                    end: Pfn(e),
                    avail_start: Pfn(a),
                    avail_end: Pfn(b),
                },
                FreeList(list),
            )
            .unwrap()
        })
        .collect();
    (mem, handles)
}

#[test]
fn physunload_front_back_none_delete_and_force_before_and_after_page_init() {
    for init in [false, true] {
        let (mem, h) = boot(&[
            (0, 10, 0, 10, 0),       // avail from the front
            (100, 110, 105, 110, 0), // avail reaches only the back
            (200, 210, 202, 208, 0), // avail reaches neither end
            (300, 301, 300, 301, 1), // one page
        ]);
        if init {
            mem.init_pages().unwrap();
        }
        // Front.
        assert_eq!(mem.physunload(h[0], FreeList(0)), Ok(Pfn(0)));
        let info = mem.segment_info(h[0]).unwrap();
        assert_eq!((info.start, info.avail_start), (Pfn(1), Pfn(1)));
        // Back.
        assert_eq!(mem.physunload(h[1], FreeList(0)), Ok(Pfn(109)));
        let info = mem.segment_info(h[1]).unwrap();
        assert_eq!((info.end, info.avail_end), (Pfn(109), Pfn(109)));
        // None: nothing changes.
        let before = mem.segment_info(h[2]).unwrap();
        assert_eq!(
            mem.physunload(h[2], FreeList(0)),
            Err(PhysmemError::NoPageAtEnds)
        );
        assert_eq!(mem.segment_info(h[2]), Ok(before));
        // Wrong free list.
        assert_eq!(
            mem.physunload(h[3], FreeList(0)),
            Err(PhysmemError::FreeListMismatch)
        );
        // Delete: the last page of a segment takes the segment.
        assert_eq!(mem.physunload(h[3], FreeList(1)), Ok(Pfn(300)));
        assert_eq!(mem.segment_info(h[3]), Err(PhysmemError::StaleHandle));
        assert_eq!(mem.len(), 3);
        // Force takes the first available page even mid-segment (a split).
        assert_eq!(mem.physunload_force(h[2]), Ok(Pfn(202)));
        let info = mem.segment_info(h[2]).unwrap();
        assert_eq!((info.start, info.end), (Pfn(200), Pfn(202)));
        assert_eq!(mem.len(), 4);
        if init {
            let guard = mem.read();
            let upper = guard.find(Pfn(203)).unwrap().segment;
            let upper = guard.segment(upper).unwrap();
            assert_eq!(
                (upper.start(), upper.avail_start(), upper.avail_end()),
                (Pfn(203), Pfn(203), Pfn(208))
            );
            assert!(guard.find(Pfn(0)).is_none());
            assert!(guard.find(Pfn(1)).is_some());
        }
        // Force on an empty avail range.
        let (lower_avail_start, lower_avail_end) = (info.avail_start, info.avail_end);
        assert_eq!(lower_avail_start, lower_avail_end);
        assert_eq!(
            mem.physunload_force(h[2]),
            Err(PhysmemError::NoAvailablePages)
        );
    }
}

#[test]
fn physunload_of_the_last_page_of_the_last_segment_is_refused() {
    let (mem, h) = boot(&[(7, 8, 7, 8, 0)]);
    assert_eq!(
        mem.physunload(h[0], FreeList(0)),
        Err(PhysmemError::LastSegment)
    );
    assert_eq!(mem.physunload_force(h[0]), Err(PhysmemError::LastSegment));
    assert_eq!(bounds(&mem, h[0]), (7, 8));
}

#[test]
fn physunload_stops_when_the_avail_range_at_an_end_is_used_up() {
    for init in [false, true] {
        let (mem, h) = boot(&[
            (0, 10, 0, 3, 0),        // three available pages at the front
            (100, 110, 100, 100, 0), // an empty avail range at the front
            (200, 210, 210, 210, 0), // an empty avail range at the back
        ]);
        if init {
            mem.init_pages().unwrap();
        }
        for pfn in 0..3 {
            assert_eq!(mem.physunload(h[0], FreeList(0)), Ok(Pfn(pfn)));
        }
        // The avail range is now empty and still starts at the segment's
        // start: no page is available at either end.
        for &handle in &h {
            let before = mem.segment_info(handle).unwrap();
            assert_eq!(before.avail_start, before.avail_end);
            assert_eq!(
                mem.physunload(handle, FreeList(0)),
                Err(PhysmemError::NoPageAtEnds)
            );
            assert_eq!(mem.segment_info(handle), Ok(before));
        }
        assert_eq!(bounds(&mem, h[0]), (3, 10));
        assert_eq!(mem.len(), 3);
    }
}
