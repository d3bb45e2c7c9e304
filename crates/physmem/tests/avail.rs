//! `set_avail` and `for_each_segment`: the writer-side calls boot code
//! uses (NetBSD's `uvm_physseg_set_avail_start` / `_end` and its walks
//! before page init).

use hotkern_physmem::{
    BasicPage, BootRange, FreeList, PageCount, Pfn, PfnRange, Physmem, PhysmemError,
};

fn range(start: u64, end: u64) -> PfnRange {
    PfnRange {
        start: Pfn(start),
        end: Pfn(end),
    }
}

#[test]
fn readers_see_a_new_avail_range_at_once_and_bad_ones_change_nothing() {
    let mem: Physmem<BasicPage> = Physmem::initialized();
    let segment = mem.plug(Pfn(0x100), PageCount(0x100)).unwrap();
    let other = mem.plug(Pfn(0x400), PageCount(4)).unwrap();
    mem.set_avail(segment, range(0x120, 0x1f0)).unwrap();
    {
        let guard = mem.read();
        let seen = guard.segment(segment).unwrap();
        assert_eq!(
            (seen.avail_start(), seen.avail_end()),
            (Pfn(0x120), Pfn(0x1f0))
        );
        // Lookups still find every frame, avail or not.
        assert_eq!(guard.find(Pfn(0x100)).unwrap().segment, segment);
        assert_eq!(guard.find(Pfn(0x1ff)).unwrap().offset, PageCount(0xff));
    }
    for bad in [range(0xff, 0x1f0), range(0x120, 0x201), range(0x130, 0x120)] {
        assert!(matches!(
            mem.set_avail(segment, bad),
            Err(PhysmemError::InvalidRange { .. })
        ));
    }
    let info = mem.segment_info(segment).unwrap();
    assert_eq!((info.avail_start, info.avail_end), (Pfn(0x120), Pfn(0x1f0)));
    assert_eq!(mem.read().segment(other).unwrap().avail_start(), Pfn(0x400));

    mem.unplug(Pfn(0x400), PageCount(4)).unwrap();
    assert_eq!(
        mem.set_avail(other, range(0x400, 0x401)),
        Err(PhysmemError::StaleHandle)
    );
}

#[test]
fn boot_walk_sees_every_segment_before_page_init() {
    let mem: Physmem<BasicPage> = Physmem::new();
    let high = mem
        .physload(BootRange::available(range(0x800, 0x900)), FreeList(2))
        .unwrap();
    let low = mem
        .physload(BootRange::available(range(0x10, 0x20)), FreeList(1))
        .unwrap();
    mem.set_avail(low, range(0x18, 0x20)).unwrap();
    assert!(mem.read().first().is_none(), "readers wait for page init");
    let mut seen = Vec::new();
    mem.for_each_segment(|handle, info| seen.push((handle, info.avail_start, info.free_list)));
    seen.sort_by_key(|&(_, avail_start, _)| avail_start);
    assert_eq!(
        seen,
        [
            (low, Pfn(0x18), FreeList(1)),
            (high, Pfn(0x800), FreeList(2))
        ]
    );
    mem.init_pages().unwrap();
    assert_eq!(mem.read().segment(low).unwrap().avail_start(), Pfn(0x18));
}
