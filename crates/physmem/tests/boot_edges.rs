//! Boot-phase edges: before page init, `physload` checks overlaps and
//! `unplug` finds its segment in the fixed boot storage (not the published
//! index the heap phase uses), so the edges of those searches need tests of
//! their own. Ranges that touch an existing segment are accepted; ranges
//! that share a single frame with it at either end, equal it, lie inside it
//! or contain it are refused with the segment named and nothing changed.
// These use real threads and atomics; the loom build runs only tests/loom.rs.
#![cfg(not(loom))]

use hotkern_physmem::{
    BasicPage, BootRange, FreeList, Lookup, PageCount, Pfn, Physmem, PhysmemError, SegmentHandle,
};

type Mem = Physmem<BasicPage>;

fn physload(mem: &Mem, start: u64, end: u64) -> Result<SegmentHandle, PhysmemError> {
    mem.physload(
        BootRange {
            start: Pfn(start),
            end: Pfn(end),
            avail_start: Pfn(start),
            avail_end: Pfn(end),
        },
        FreeList(0),
    )
}

/// What the boot phase lets anyone observe: the segment count, each known
/// handle's bounds, and that page init has not run.
fn boot_state(mem: &Mem, handles: &[SegmentHandle]) -> (usize, Vec<(u64, u64)>, bool) {
    let bounds = handles
        .iter()
        .map(|&h| {
            let info = mem.segment_info(h).unwrap();
            (info.start.0, info.end.0)
        })
        .collect();
    (mem.len(), bounds, mem.is_initialized())
}

fn overlap(existing_start: u64, existing_end: u64) -> PhysmemError {
    PhysmemError::Overlap {
        existing_start: Pfn(existing_start),
        existing_end: Pfn(existing_end),
    }
}

#[test]
fn boot_physload_refuses_every_shared_frame_and_accepts_touching_ranges() {
    let mem = Mem::new();
    let mut handles = vec![
        physload(&mem, 100, 150).unwrap(),
        physload(&mem, 300, 310).unwrap(),
    ];
    let before = boot_state(&mem, &handles);
    // (start, end) of the refused range and the segment it collides with.
    let refused = [
        ((149, 159), (100, 150)), // the existing segment's last frame
        ((149, 150), (100, 150)), // only that frame
        ((90, 101), (100, 150)),  // its first frame
        ((100, 101), (100, 150)), // only that frame
        ((100, 150), (100, 150)), // the same range
        ((120, 130), (100, 150)), // inside it
        ((50, 200), (100, 150)),  // around it
        ((290, 301), (300, 310)), // the other segment's first frame
        ((309, 320), (300, 310)), // its last frame
        ((301, 309), (300, 310)), // inside, touching neither end
    ];
    for ((start, end), (existing_start, existing_end)) in refused {
        assert_eq!(
            physload(&mem, start, end),
            Err(overlap(existing_start, existing_end)),
            "[{start}, {end})"
        );
        assert_eq!(
            boot_state(&mem, &handles),
            before,
            "[{start}, {end}) changed the state"
        );
    }
    // Ranges ending where a segment starts or starting where one ends
    // share no frame: below, one frame between two (touching both), a
    // range between the two segments touching both, and above.
    for (start, end) in [(50, 99), (99, 100), (150, 300), (310, 400), (400, 401)] {
        handles
            .push(physload(&mem, start, end).unwrap_or_else(|e| panic!("[{start}, {end}): {e:?}")));
    }
    assert_eq!(mem.len(), 7);
    // Page init sees exactly the accepted segments, each frame in one place.
    mem.init_pages().unwrap();
    let guard = mem.read();
    let segments: Vec<(u64, u64)> = guard.segments().map(|s| (s.start().0, s.end().0)).collect();
    assert_eq!(
        segments,
        [
            (50, 99),
            (99, 100),
            (100, 150),
            (150, 300),
            (300, 310),
            (310, 400),
            (400, 401)
        ]
    );
    for (&(start, end), &handle) in [(100, 150), (300, 310)].iter().zip(&handles) {
        assert_eq!(
            guard.find(Pfn(start)),
            Some(Lookup {
                segment: handle,
                offset: PageCount(0)
            })
        );
        assert_eq!(
            guard.find(Pfn(end - 1)),
            Some(Lookup {
                segment: handle,
                offset: PageCount(end - 1 - start)
            })
        );
    }
}

#[test]
fn boot_unplug_from_a_segments_first_frame_is_not_taken_for_the_one_below() {
    let mem = Mem::new();
    // The lower segment comes first in boot storage and ends where the
    // upper one starts.
    let lower = physload(&mem, 0, 10).unwrap();
    let upper = physload(&mem, 10, 20).unwrap();
    mem.unplug(Pfn(10), PageCount(5)).unwrap();
    let bounds = |h| {
        let info = mem.segment_info(h).unwrap();
        (info.start.0, info.end.0)
    };
    assert_eq!((bounds(lower), bounds(upper)), ((0, 10), (15, 20)));
    // The frame one past the lower segment's end is not in it either.
    mem.unplug(Pfn(15), PageCount(5)).unwrap();
    assert_eq!(
        mem.unplug(Pfn(10), PageCount(1)),
        Err(PhysmemError::NotInOneSegment {
            pfn: Pfn(10),
            npages: PageCount(1)
        })
    );
    assert_eq!(bounds(lower), (0, 10));
    assert_eq!(mem.len(), 1);
}
