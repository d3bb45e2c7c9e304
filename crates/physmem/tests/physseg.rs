//! The semantics NetBSD's t_uvm_physseg checks, as tests of our API (the
//! error paths are in `refusals.rs`).
// These use real threads and atomics; the loom build runs only tests/loom.rs.
#![cfg(not(loom))]

use hotkern_physmem::baseline::{RbTreeSegments, StaticSegments};
use hotkern_physmem::{
    BasicPage, BootRange, FreeList, Lookup, PageCount, Pfn, PhysSegments, Physmem, PhysmemError,
    SegmentHandle, PFN_LIMIT,
};

mod common;

use common::{bounds, running, Mem};

// --- handles -------------------------------------------------------------

/// t_uvm_physseg's handle_immutable: a handle taken before out-of-order
/// inserts still names the same segment afterwards.
fn handle_survives_out_of_order_inserts<S: PhysSegments>(set: &mut S) -> bool {
    let handle = set.plug(Pfn(100), PageCount(10)).unwrap();
    let before = set.bounds(handle);
    set.plug(Pfn(10), PageCount(10)).unwrap(); // below: shifts an array
    set.plug(Pfn(50), PageCount(10)).unwrap(); // between
    set.plug(Pfn(300), PageCount(10)).unwrap(); // above
    set.bounds(handle) == before && before == Some((Pfn(100), Pfn(110)))
}

#[test]
fn handle_immutability_holds_for_hotkern_and_rbtree_and_fails_for_static() {
    assert!(handle_survives_out_of_order_inserts(&mut Mem::initialized()));
    assert!(handle_survives_out_of_order_inserts(&mut RbTreeSegments::<
        BasicPage,
    >::new()));
    // The paper found the same: array indices move.
    assert!(!handle_survives_out_of_order_inserts(
        &mut StaticSegments::<BasicPage>::new(16)
    ));
}

#[test]
fn implementations_go_by_the_names_the_benchmark_reports_use() {
    assert_eq!(PhysSegments::name(&Mem::new()), "hotkern");
    assert_eq!(RbTreeSegments::<BasicPage>::new().name(), "rbtree");
    assert_eq!(StaticSegments::<BasicPage>::new(1).name(), "static");
}

#[test]
fn boot_handles_survive_page_init_and_out_of_order_physload() {
    let mem = Mem::new();
    let b = mem
        .physload(
            BootRange {
                start: Pfn(200),
                end: Pfn(300),
                avail_start: Pfn(200),
                avail_end: Pfn(300),
            },
            FreeList(0),
        )
        .unwrap();
    let a = mem
        .physload(
            BootRange {
                start: Pfn(0),
                end: Pfn(100),
                avail_start: Pfn(0),
                avail_end: Pfn(100),
            },
            FreeList(0),
        )
        .unwrap();
    // Its own avail range and free list, which readers must see too.
    let c = mem
        .physload(
            BootRange {
                start: Pfn(100),
                end: Pfn(150),
                avail_start: Pfn(110),
                avail_end: Pfn(140),
            },
            FreeList(3),
        )
        .unwrap();
    mem.init_pages().unwrap();
    assert_eq!(bounds(&mem, a), (0, 100));
    assert_eq!(bounds(&mem, b), (200, 300));
    assert_eq!(bounds(&mem, c), (100, 150));
    // One slab holds every boot segment's descriptors.
    assert_eq!(mem.slab_count(), 1);
    let guard = mem.read();
    assert_eq!(
        guard.find(Pfn(120)),
        Some(Lookup {
            segment: c,
            offset: PageCount(20)
        })
    );
    let segment = guard.segment(c).unwrap();
    assert_eq!(
        (
            segment.avail_start(),
            segment.avail_end(),
            segment.free_list()
        ),
        (Pfn(110), Pfn(140), FreeList(3))
    );
    for pfn in [0, 99, 100, 149, 200, 299] {
        assert_eq!(
            guard.page(Pfn(pfn)).unwrap().phys_addr,
            Pfn(pfn).phys_addr()
        );
    }
}

#[test]
fn a_removed_segments_handle_is_stale_even_after_its_slot_is_reused() {
    let (mem, h) = running(&[(0, 10), (100, 10)]);
    mem.unplug(Pfn(100), PageCount(10)).unwrap();
    let new = mem.plug(Pfn(500), PageCount(10)).unwrap();
    assert_ne!(new, h[1]);
    assert_eq!(mem.segment_info(h[1]), Err(PhysmemError::StaleHandle));
    let guard = mem.read();
    assert!(matches!(
        guard.segment(h[1]),
        Err(PhysmemError::StaleHandle)
    ));
    assert!(matches!(guard.next(h[1]), Err(PhysmemError::StaleHandle)));
    assert!(matches!(guard.prev(h[1]), Err(PhysmemError::StaleHandle)));
    assert_eq!(
        mem.physunload(h[1], FreeList(0)),
        Err(PhysmemError::StaleHandle)
    );
    assert_eq!(mem.physunload_force(h[1]), Err(PhysmemError::StaleHandle));
    assert_eq!(mem.set_start_hint(h[1], 1), Err(PhysmemError::StaleHandle));
    assert_eq!(bounds(&mem, new), (500, 510));
}

// --- iteration -----------------------------------------------------------

#[test]
fn first_last_next_prev_at_the_ends_and_on_an_empty_set() {
    let empty = Mem::initialized();
    let guard = empty.read();
    assert!(empty.is_empty() && guard.is_empty());
    assert_eq!((empty.len(), guard.len()), (0, 0));
    assert!(guard.first().is_none());
    assert!(guard.last().is_none());
    assert_eq!(guard.highest_frame(), None);
    assert_eq!(guard.segments().count(), 0);
    drop(guard);

    let (mem, h) = running(&[(300, 5), (100, 5), (200, 5)]);
    let guard = mem.read();
    assert!(!mem.is_empty() && !guard.is_empty());
    assert_eq!((mem.len(), guard.len()), (3, 3));
    assert_eq!(guard.first().unwrap().handle(), h[1]);
    assert_eq!(guard.last().unwrap().handle(), h[0]);
    assert_eq!(guard.next(h[1]).unwrap().unwrap().handle(), h[2]);
    assert_eq!(guard.next(h[2]).unwrap().unwrap().handle(), h[0]);
    assert!(guard.next(h[0]).unwrap().is_none());
    assert_eq!(guard.prev(h[0]).unwrap().unwrap().handle(), h[2]);
    assert!(guard.prev(h[1]).unwrap().is_none());
    let order: Vec<_> = guard.segments().map(|s| s.handle()).collect();
    assert_eq!(order, [h[1], h[2], h[0]]);
    let reversed: Vec<_> = guard.segments().rev().map(|s| s.handle()).collect();
    assert_eq!(reversed, [h[0], h[2], h[1]]);
    assert_eq!(guard.segments().len(), 3);
    assert_eq!(guard.highest_frame(), Some(Pfn(304)));
}

#[test]
fn iteration_from_both_ends_stops_where_the_ends_meet() {
    // Two segments in one section, a third two sections further on.
    let (mem, h) = running(&[(0, 4), (10, 4), (1100, 4)]);
    let guard = mem.read();
    let mut segments = guard.segments();
    assert_eq!(segments.next().unwrap().handle(), h[0]);
    assert_eq!(segments.next_back().unwrap().handle(), h[2]);
    assert_eq!(segments.len(), 1);
    assert_eq!(segments.next_back().unwrap().handle(), h[1]);
    // Both ends have met: the front must not find h[1] again.
    assert_eq!(segments.len(), 0);
    assert!(segments.next().is_none());
    assert!(segments.next_back().is_none());
}

// --- find ---------------------------------------------------------------

#[test]
fn find_hits_every_frame_and_misses_holes_and_the_outside() {
    let (mem, h) = running(&[(8, 8), (32, 1), (1 << 20, 3)]);
    let guard = mem.read();
    for pfn in 8..16 {
        assert_eq!(
            guard.find(Pfn(pfn)),
            Some(Lookup {
                segment: h[0],
                offset: PageCount(pfn - 8)
            })
        );
    }
    assert_eq!(
        guard.find(Pfn(32)),
        Some(Lookup {
            segment: h[1],
            offset: PageCount(0)
        })
    );
    assert_eq!(
        guard.find(Pfn((1 << 20) + 2)),
        Some(Lookup {
            segment: h[2],
            offset: PageCount(2)
        })
    );
    for miss in [
        0,
        7,
        16,
        31,
        33,
        (1 << 20) - 1,
        (1 << 20) + 3,
        PFN_LIMIT,
        u64::MAX,
    ] {
        assert_eq!(guard.find(Pfn(miss)), None, "pfn {miss}");
        assert!(guard.page(Pfn(miss)).is_none());
    }
    let segment = guard.segment(h[0]).unwrap();
    assert_eq!(segment.page(3).unwrap().phys_addr, Pfn(11).phys_addr());
    assert!(segment.page(8).is_none());
    assert!(!segment.is_empty());
}

#[test]
fn the_benchmarks_section_search_agrees_with_find() {
    let (mem, h) = running(&[(8, 8), (600, 3), (1 << 20, 3)]);
    let guard = mem.read();
    let mut hits = 0;
    for pfn in (0..700).chain((1 << 20) - 2..(1 << 20) + 5) {
        let found = guard.find(Pfn(pfn));
        assert_eq!(guard.find_by_section_search(Pfn(pfn)), found, "pfn {pfn}");
        let bounds = found.map(|found| {
            let segment = guard.segment(found.segment).unwrap();
            (found.segment, segment.start(), segment.end())
        });
        let by_search = guard.find_bounds_by_section_search(Pfn(pfn));
        assert_eq!(by_search, bounds, "pfn {pfn}");
        hits += usize::from(found.is_some());
    }
    assert_eq!(hits, 8 + 3 + 3);
    assert_eq!(
        guard.find_bounds_by_section_search(Pfn(601)),
        Some((h[1], Pfn(600), Pfn(603)))
    );
}

#[test]
fn table_bytes_count_at_least_the_table_blocks_and_runs() {
    assert_eq!(Mem::initialized().read().table_bytes(), 0, "no sections");
    // One section: its table entry (8 bytes), one block (4), the run and
    // the sentinel (32 each), plus the run's detail.
    let (mem, _) = running(&[(8, 8)]);
    assert!(mem.read().table_bytes() >= 8 + 4 + 2 * 32);
}

// --- unplug -------------------------------------------------------------

#[test]
fn unplug_whole_front_back_and_middle() {
    let (mem, h) = running(&[(0, 100), (1000, 10)]);
    // Front.
    mem.unplug(Pfn(0), PageCount(10)).unwrap();
    assert_eq!(bounds(&mem, h[0]), (10, 100));
    // Back.
    mem.unplug(Pfn(90), PageCount(10)).unwrap();
    assert_eq!(bounds(&mem, h[0]), (10, 90));
    // Middle: the handle keeps the lower part; the upper part is new.
    mem.unplug(Pfn(40), PageCount(20)).unwrap();
    assert_eq!(bounds(&mem, h[0]), (10, 40));
    let guard = mem.read();
    let Lookup {
        segment: upper,
        offset,
    } = guard.find(Pfn(60)).unwrap();
    assert_eq!(offset, PageCount(0));
    assert_eq!(guard.segment(upper).unwrap().end(), Pfn(90));
    assert!(guard.find(Pfn(50)).is_none());
    // Both halves still have the right descriptors, from one shared slab.
    assert_eq!(guard.page(Pfn(39)).unwrap().phys_addr, Pfn(39).phys_addr());
    assert_eq!(guard.page(Pfn(60)).unwrap().phys_addr, Pfn(60).phys_addr());
    let lower_base = guard.segment(h[0]).unwrap().pages().as_ptr();
    let upper_base = guard.segment(upper).unwrap().pages().as_ptr();
    assert_eq!(
        upper_base as usize - lower_base as usize,
        50 * size_of::<BasicPage>()
    );
    drop(guard);
    assert_eq!(mem.slab_count(), 2);
    // Whole.
    mem.unplug(Pfn(1000), PageCount(10)).unwrap();
    assert_eq!(mem.segment_info(h[1]), Err(PhysmemError::StaleHandle));
    assert_eq!(mem.len(), 2);
    // The emptied slab is freed (NetBSD keeps it).
    assert_eq!(mem.slab_count(), 1);
}

#[test]
fn descriptor_space_is_reused_after_unplug_before_a_new_slab() {
    let (mem, h) = running(&[(0, 64), (1000, 8)]);
    let base = mem.read().segment(h[0]).unwrap().pages().as_ptr() as usize;
    mem.unplug(Pfn(16), PageCount(16)).unwrap();
    assert_eq!(mem.slab_count(), 2);
    // Two plugs fill the hole; the slab keeps offering its space until
    // the second has used it up.
    let reused = mem.plug(Pfn(5000), PageCount(8)).unwrap();
    let again = mem.plug(Pfn(6000), PageCount(8)).unwrap();
    assert_eq!(mem.slab_count(), 2, "no new slab");
    let guard = mem.read();
    let at = |h| guard.segment(h).unwrap().pages().as_ptr() as usize;
    assert_eq!(at(reused), base + 16 * size_of::<BasicPage>());
    assert_eq!(at(again), base + 24 * size_of::<BasicPage>());
    assert_eq!(
        guard.page(Pfn(5003)).unwrap().phys_addr,
        Pfn(5003).phys_addr()
    );
    drop(guard);
    // A plug larger than any hole gets a slab of its own.
    mem.plug(Pfn(9000), PageCount(17)).unwrap();
    assert_eq!(mem.slab_count(), 3);
}

#[test]
fn unplugged_descriptors_outlive_the_readers_that_can_see_them() {
    let (mem, _) = running(&[(0, 8), (100, 8)]);
    let guard = mem.read();
    let page = guard.page(Pfn(101)).unwrap();
    mem.unplug(Pfn(100), PageCount(8)).unwrap();
    assert!(mem.pending_reclaim() > 0);
    assert_eq!(mem.slab_count(), 2, "slab kept while a reader may use it");
    // The old snapshot still answers, and its descriptor is intact.
    assert_eq!(page.phys_addr, Pfn(101).phys_addr());
    assert!(guard.find(Pfn(101)).is_some());
    assert!(
        mem.read().find(Pfn(101)).is_none(),
        "new readers see the unplug"
    );
    drop(guard);
    mem.reclaim();
    assert_eq!(mem.pending_reclaim(), 0);
    assert_eq!(mem.slab_count(), 1);
}

#[test]
fn start_hint_is_kept_across_unrelated_writes() {
    let (mem, h) = running(&[(0, 100), (200, 10)]);
    mem.set_start_hint(h[0], 42).unwrap();
    assert_eq!(mem.read().segment(h[0]).unwrap().start_hint(), 42);
    mem.plug(Pfn(500), PageCount(1)).unwrap();
    assert_eq!(mem.read().segment(h[0]).unwrap().start_hint(), 42);
    assert_eq!(mem.segment_info(h[0]).unwrap().start_hint, 42);
    // A hint past a shrunken segment's end is reset.
    mem.unplug(Pfn(40), PageCount(60)).unwrap();
    assert_eq!(mem.read().segment(h[0]).unwrap().start_hint(), 0);
}

#[test]
fn start_hint_survives_a_cut_only_while_it_is_inside_the_segment() {
    let hint = |mem: &Mem, h| {
        let from_reader = mem.read().segment(h).unwrap().start_hint();
        assert_eq!(mem.segment_info(h).unwrap().start_hint, from_reader);
        from_reader
    };
    // Away from frame 0, so that the segment's length is not its end.
    let (mem, h) = running(&[(100, 100), (500, 10)]);
    mem.set_start_hint(h[0], 29).unwrap();
    // [100, 130): 30 pages, hint 29 is the last one and is kept.
    mem.unplug(Pfn(130), PageCount(70)).unwrap();
    assert_eq!(hint(&mem, h[0]), 29);
    // [100, 129): 29 pages, hint 29 is one past the end.
    mem.unplug(Pfn(129), PageCount(1)).unwrap();
    assert_eq!(hint(&mem, h[0]), 0);
    // A front cut keeps a hint below the new length.
    mem.set_start_hint(h[0], 3).unwrap();
    mem.unplug(Pfn(100), PageCount(9)).unwrap();
    assert_eq!(hint(&mem, h[0]), 3);
}

#[test]
fn start_hint_reads_the_same_from_every_section_a_segment_spans() {
    // Sections hold 512 frames: the first segment spans sections 0 to 3,
    // the second starts in section 3, where `prev` finds the first.
    let (mem, h) = running(&[(100, 1900), (2010, 10)]);
    mem.set_start_hint(h[0], 77).unwrap();
    let guard = mem.read();
    assert_eq!(guard.segment(h[0]).unwrap().start_hint(), 77);
    let before = guard.prev(h[1]).unwrap().unwrap();
    assert_eq!((before.handle(), before.start_hint()), (h[0], 77));
    drop(guard);
    // Once the second goes, `last` finds the first in section 3.
    mem.unplug(Pfn(2010), PageCount(10)).unwrap();
    let guard = mem.read();
    let last = guard.last().unwrap();
    assert_eq!((last.handle(), last.start_hint()), (h[0], 77));
}

#[test]
fn handles_past_the_first_slot_chunk_survive_a_rebuild_from_scratch() {
    // Slots 0..600: the slot map needs two chunks of 512.
    let mem = Mem::initialized();
    let handles: Vec<SegmentHandle> = (0..600u64)
        .map(|i| mem.plug(Pfn(i * 2), PageCount(1)).unwrap())
        .collect();
    mem.unplug(Pfn(0), PageCount(1)).unwrap();
    // Far enough that sections must grow: the index (and its slot map) is
    // built from scratch, for the reused slot 0 and every live one.
    let far = mem.plug(Pfn(1 << 34), PageCount(1)).unwrap();
    let guard = mem.read();
    for (i, &handle) in handles.iter().enumerate().skip(1) {
        let segment = guard.segment(handle).unwrap();
        assert_eq!(segment.start(), Pfn(i as u64 * 2));
    }
    assert_eq!(guard.segment(far).unwrap().start(), Pfn(1 << 34));
    assert!(guard.segment(handles[0]).is_err());
}

#[test]
fn descriptors_are_dropped_exactly_once() {
    use std::sync::atomic::{AtomicI64, Ordering};
    static LIVE: AtomicI64 = AtomicI64::new(0);
    struct Counted;
    impl hotkern_physmem::Page for Counted {
        fn new(_: hotkern_physmem::PhysAddr) -> Self {
            LIVE.fetch_add(1, Ordering::SeqCst);
            Counted
        }
    }
    impl Drop for Counted {
        fn drop(&mut self) {
            LIVE.fetch_sub(1, Ordering::SeqCst);
        }
    }
    {
        let mem: Physmem<Counted> = Physmem::new();
        mem.physload(
            BootRange {
                start: Pfn(0),
                end: Pfn(10),
                avail_start: Pfn(0),
                avail_end: Pfn(10),
            },
            FreeList(0),
        )
        .unwrap();
        mem.init_pages().unwrap();
        mem.plug(Pfn(100), PageCount(20)).unwrap();
        assert_eq!(LIVE.load(Ordering::SeqCst), 30);
        mem.unplug(Pfn(105), PageCount(5)).unwrap();
        assert_eq!(LIVE.load(Ordering::SeqCst), 25);
        mem.unplug(Pfn(0), PageCount(10)).unwrap();
        assert_eq!(LIVE.load(Ordering::SeqCst), 15);
    }
    assert_eq!(LIVE.load(Ordering::SeqCst), 0);
}

#[test]
fn thousands_of_handles_resolve_and_go_stale_individually() {
    let mem = Mem::initialized();
    let handles: Vec<SegmentHandle> = (0..1500u64)
        .map(|i| mem.plug(Pfn(i * 4), PageCount(2)).unwrap())
        .collect();
    // Remove every third segment, scattered over several slot chunks.
    for i in (0..1500u64).step_by(3) {
        mem.unplug(Pfn(i * 4), PageCount(2)).unwrap();
    }
    let reused: Vec<SegmentHandle> = (0..500u64)
        .map(|i| mem.plug(Pfn(10_000 + i * 4), PageCount(1)).unwrap())
        .collect();
    let guard = mem.read();
    for (i, &handle) in handles.iter().enumerate() {
        let segment = guard.segment(handle);
        if i % 3 == 0 {
            assert!(segment.is_err(), "handle {i} should be stale");
        } else {
            assert_eq!(segment.unwrap().start(), Pfn(i as u64 * 4));
        }
    }
    for (i, &handle) in reused.iter().enumerate() {
        assert_eq!(
            guard.segment(handle).unwrap().start(),
            Pfn(10_000 + i as u64 * 4)
        );
    }
    assert_eq!(guard.segments().count(), 1500);
}
