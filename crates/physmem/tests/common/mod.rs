//! What the physmem integration tests share: a physmem of basic pages,
//! one made from ranges, and its observable state.
#![allow(dead_code)] // each test crate uses its own part

pub mod counting;

use hotkern_physmem::{BasicPage, PageCount, Pfn, Physmem, SegmentHandle, SegmentInfo};

/// The physmem every test here builds.
pub type Mem = Physmem<BasicPage>;

/// Everything observable: segments (with handles) in order, slab count.
pub fn state(mem: &Mem) -> (Vec<(SegmentHandle, SegmentInfo)>, usize, usize) {
    let guard = mem.read();
    let segments = guard.segments().map(|s| (s.handle(), s.info())).collect();
    (segments, mem.len(), mem.slab_count())
}

/// A physmem with each (first frame, frames) range plugged, and the
/// handles in order.
pub fn running(ranges: &[(u64, u64)]) -> (Mem, Vec<SegmentHandle>) {
    let mem = Mem::initialized();
    let handles = ranges
        .iter()
        .map(|&(start, pages)| mem.plug(Pfn(start), PageCount(pages)).unwrap())
        .collect();
    (mem, handles)
}

/// A segment's first frame and its end.
pub fn bounds(mem: &Mem, handle: SegmentHandle) -> (u64, u64) {
    let info = mem.segment_info(handle).unwrap();
    (info.start.0, info.end.0)
}
