//! Running out of memory in the middle of a write is refused like bad input:
//! a global allocator fails the N-th allocation of one operation, for every
//! N until the operation allocates no more, and each time the operation must
//! return an allocation error and leave segments, lookups, handles and slabs
//! exactly as they were, and leak nothing. Then it must succeed.
// These use a real global allocator; the loom build runs only tests/loom.rs.
#![cfg(not(loom))]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use hotkern_physmem::extent::Extent;
use hotkern_physmem::{
    BasicPage, BootRange, DefaultRawMutex, FreeList, Lookup, PageCount, Pfn, Physmem, PhysmemError,
    SegmentHandle, SegmentInfo,
};

/// Fails allocation number `FAIL_AT` (counted from 1) made by the thread
/// that armed it, once.
struct Failing;

// Per thread, so that tests running in parallel do not count each other's
// allocations.
thread_local! {
    static ARMED: Cell<bool> = const { Cell::new(false) };
    static FAIL_AT: Cell<usize> = const { Cell::new(0) };
    static SEEN: Cell<usize> = const { Cell::new(0) };
    static FAILED: Cell<bool> = const { Cell::new(false) };
    /// Bytes this thread has allocated and not freed.
    static LIVE: Cell<isize> = const { Cell::new(0) };
}

// SAFETY: every allocation is `System`'s or a null pointer, which the
// `GlobalAlloc` contract allows as failure; the bookkeeping touches only
// thread-locals.
unsafe impl GlobalAlloc for Failing {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if ARMED.with(Cell::get) {
            let n = SEEN.with(|seen| seen.get()) + 1;
            SEEN.with(|seen| seen.set(n));
            if n == FAIL_AT.with(Cell::get) {
                FAILED.with(|failed| failed.set(true));
                return std::ptr::null_mut();
            }
        }
        // SAFETY: our caller's guarantees about `layout` are `System`'s.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            LIVE.with(|live| live.set(live.get() + layout.size() as isize));
        }
        ptr
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.with(|live| live.set(live.get() - layout.size() as isize));
        // SAFETY: `ptr` is non-null, so it came from `System` in `alloc`
        // above, with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Failing = Failing;

/// Runs `operation` with allocation `n` failing; returns its result and
/// whether the failure was injected.
fn failing_at<T>(n: usize, operation: impl FnOnce() -> T) -> (T, bool) {
    FAIL_AT.with(|at| at.set(n));
    SEEN.with(|seen| seen.set(0));
    FAILED.with(|failed| failed.set(false));
    ARMED.with(|armed| armed.set(true));
    let result = operation();
    ARMED.with(|armed| armed.set(false));
    (result, FAILED.with(Cell::get))
}

/// Runs `test` and checks that everything it allocated was freed: a refused
/// write must not leave a section, chunk or index behind.
fn without_leaks(test: impl FnOnce()) {
    let before = LIVE.with(Cell::get);
    test();
    assert_eq!(LIVE.with(Cell::get), before, "bytes leaked");
}

/// One probed frame: its segment and offset, and its descriptor's address.
type Probe = (Option<Lookup>, Option<usize>);

/// Everything a reader or the writer's getters can see.
#[derive(Debug, PartialEq)]
struct Snapshot {
    segments: Vec<(SegmentHandle, SegmentInfo, usize)>,
    lookups: Vec<Probe>,
    infos: Vec<Result<SegmentInfo, PhysmemError>>,
    len: usize,
    reader_len: usize,
    highest: Option<Pfn>,
    slabs: usize,
    initialized: bool,
}

/// A set with room for `BOOT` boot segments.
type Mem<const BOOT: usize> = Physmem<BasicPage, DefaultRawMutex, BOOT>;

fn snapshot<const BOOT: usize>(
    mem: &Mem<BOOT>,
    handles: &[SegmentHandle],
    probe_to: u64,
) -> Snapshot {
    let guard = mem.read();
    let segments = guard
        .segments()
        .map(|s| (s.handle(), s.info(), s.pages().as_ptr() as usize))
        .collect();
    let lookups = (0..probe_to)
        .map(|pfn| {
            let page = guard.page(Pfn(pfn)).map(|p| {
                assert_eq!(p.phys_addr, Pfn(pfn).phys_addr());
                p as *const BasicPage as usize
            });
            (guard.find(Pfn(pfn)), page)
        })
        .collect();
    Snapshot {
        segments,
        lookups,
        infos: handles.iter().map(|&h| mem.segment_info(h)).collect(),
        len: mem.len(),
        reader_len: guard.len(),
        highest: guard.highest_frame(),
        slabs: mem.slab_count(),
        initialized: mem.is_initialized(),
    }
}

/// Fails every allocation of `operation` in turn, checking it is refused
/// with nothing changed, then lets it succeed; returns its result.
fn refused_until_memory<T: std::fmt::Debug>(
    mem: &Physmem<BasicPage>,
    handles: &[SegmentHandle],
    probe_to: u64,
    mut operation: impl FnMut() -> Result<T, PhysmemError>,
) -> T {
    let before = snapshot(mem, handles, probe_to);
    for n in 1.. {
        let (result, failed) = failing_at(n, &mut operation);
        if !failed {
            assert!(n > 1, "the operation allocates");
            let value = result.expect("succeeds once memory is there");
            assert_ne!(snapshot(mem, handles, probe_to), before, "it did something");
            return value;
        }
        match result {
            Err(PhysmemError::OutOfMemory) | Err(PhysmemError::DescriptorAllocation) => {}
            other => panic!("allocation {n} failed but the operation returned {other:?}"),
        }
        assert_eq!(mem.pending_reclaim(), 0, "allocation {n}: garbage was left");
        assert_eq!(
            snapshot(mem, handles, probe_to),
            before,
            "allocation {n} failed and the state changed"
        );
    }
    unreachable!()
}

fn running() -> (Physmem<BasicPage>, Vec<SegmentHandle>) {
    let mem: Physmem<BasicPage> = Physmem::initialized();
    let handles = vec![
        mem.plug(Pfn(0x100), PageCount(0x50)).unwrap(),
        // Spans several sections: shared, uniform ones.
        mem.plug(Pfn(0x400), PageCount(0x1000)).unwrap(),
        mem.plug(Pfn(0x2000), PageCount(0x10)).unwrap(),
    ];
    (mem, handles)
}

const PROBE_TO: u64 = 0x2400;

#[test]
fn plug_out_of_memory_changes_nothing() {
    without_leaks(|| {
        let (mem, mut handles) = running();
        let handle = refused_until_memory(&mem, &handles, PROBE_TO, || {
            mem.plug(Pfn(0x1800), PageCount(0x300))
        });
        handles.push(handle);
        let guard = mem.read();
        assert_eq!(
            guard.find(Pfn(0x1900)),
            Some(Lookup {
                segment: handle,
                offset: PageCount(0x100)
            })
        );
        assert_eq!(guard.len(), 4);
    });
}

#[test]
fn plug_that_rebuilds_the_whole_index_out_of_memory_changes_nothing() {
    without_leaks(|| {
        // So far away that the section size must grow: a build from scratch.
        let (mem, handles) = running();
        let far = Pfn(1 << 34);
        let handle = refused_until_memory(&mem, &handles, PROBE_TO, || mem.plug(far, PageCount(8)));
        assert_eq!(
            mem.read().find(far),
            Some(Lookup {
                segment: handle,
                offset: PageCount(0)
            })
        );
        assert_eq!(mem.read().highest_frame(), Some(Pfn(far.0 + 7)));
    });
}

#[test]
fn middle_unplug_out_of_memory_changes_nothing() {
    without_leaks(|| {
        let (mem, handles) = running();
        refused_until_memory(&mem, &handles, PROBE_TO, || {
            mem.unplug(Pfn(0x600), PageCount(0x20))
        });
        let guard = mem.read();
        assert_eq!(guard.find(Pfn(0x610)), None);
        assert_eq!(guard.segment(handles[1]).unwrap().end(), Pfn(0x600));
        assert_eq!(guard.find(Pfn(0x620)).unwrap().offset, PageCount(0));
        assert_eq!(guard.len(), 4);
    });
}

#[test]
fn whole_unplug_out_of_memory_changes_nothing() {
    without_leaks(|| {
        let (mem, handles) = running();
        refused_until_memory(&mem, &handles, PROBE_TO, || {
            mem.unplug(Pfn(0x100), PageCount(0x50))
        });
        assert_eq!(mem.segment_info(handles[0]), Err(PhysmemError::StaleHandle));
        assert_eq!(mem.len(), 2);
    });
}

#[test]
fn extent_frees_within_a_reservation_allocate_nothing() {
    // Slabs reserve room in their extent before an unplug, so that giving
    // the descriptors back later, when no reader can see them, cannot fail.
    let mut extent = Extent::new(100);
    for start in (0..100).step_by(5) {
        assert_eq!(extent.alloc(5), Ok(start));
    }
    extent.reserve(10).unwrap();
    // Every other range: each free is a region of its own. The results go
    // to an array: collecting them would allocate.
    let starts: [u64; 10] = std::array::from_fn(|i| 10 * i as u64);
    let (freed, failed) = failing_at(1, || starts.map(|start| extent.free(start, 5)));
    assert!(!failed, "a free allocated");
    assert!(freed.iter().all(Result::is_ok), "{freed:?}");
    assert_eq!(extent.free_regions().len(), 10);
}

#[test]
fn whole_unplug_retiring_every_section_reserves_room_for_all_it_retires() {
    without_leaks(|| {
        // Two segments in two sections, neither covering one whole: the
        // unplug of the upper one retires both sections, the slot chunk,
        // the old index and the descriptors, the most the index's bound
        // allows. Publishing must not allocate; if the room reserved
        // before it falls one short, the retire bag grows while
        // publishing, and failing that allocation aborts.
        let mem: Physmem<BasicPage> = Physmem::initialized();
        let handles = vec![
            mem.plug(Pfn(0), PageCount(10)).unwrap(),
            mem.plug(Pfn(500), PageCount(20)).unwrap(),
        ];
        refused_until_memory(&mem, &handles, 600, || mem.unplug(Pfn(500), PageCount(20)));
        assert_eq!(mem.segment_info(handles[1]), Err(PhysmemError::StaleHandle));
        assert_eq!(mem.read().highest_frame(), Some(Pfn(9)));
    });
}

#[test]
fn middle_unplug_into_a_new_slot_chunk_out_of_memory_leaks_nothing() {
    without_leaks(|| {
        // Slots 0 to 511 fill the first slot chunk: the upper half of a
        // split takes slot 512, so the write makes a second chunk and then
        // copies the first. When the copy fails, the new chunk must go too.
        let mem: Physmem<BasicPage> = Physmem::initialized();
        let handles: Vec<SegmentHandle> = (0..512u64)
            .map(|i| mem.plug(Pfn(i * 4), PageCount(3)).unwrap())
            .collect();
        refused_until_memory(&mem, &handles[..1], 8, || mem.unplug(Pfn(1), PageCount(1)));
        let guard = mem.read();
        let Lookup {
            segment: upper,
            offset,
        } = guard.find(Pfn(2)).unwrap();
        assert!(!handles.contains(&upper));
        assert_eq!(offset, PageCount(0));
        assert_eq!(guard.len(), 513);
    });
}

#[test]
fn whole_unplug_onto_a_full_free_slot_list_out_of_memory_changes_nothing() {
    without_leaks(|| {
        // Page init lists the 32 boot slots as free, with room for 32.
        let mem: Physmem<BasicPage> = Physmem::initialized();
        let handles: Vec<SegmentHandle> = (0..34u64)
            .map(|i| mem.plug(Pfn(i * 4), PageCount(2)).unwrap())
            .collect();
        // Freeing 32 slots fills the list to its room: the next needs more.
        for i in 0..32u64 {
            mem.unplug(Pfn(i * 4), PageCount(2)).unwrap();
        }
        refused_until_memory(&mem, &handles, 34 * 4, || {
            mem.unplug(Pfn(32 * 4), PageCount(2))
        });
        assert_eq!(
            mem.segment_info(handles[32]),
            Err(PhysmemError::StaleHandle)
        );
        assert_eq!(mem.len(), 1);
        // The freed slot list works on.
        let again = mem.plug(Pfn(1000), PageCount(1)).unwrap();
        assert_eq!(mem.read().segment(again).unwrap().start(), Pfn(1000));
    });
}

#[test]
fn init_pages_out_of_memory_changes_nothing() {
    without_leaks(|| {
        let mem: Physmem<BasicPage> = Physmem::new();
        let handles = vec![
            mem.physload(
                BootRange {
                    start: Pfn(0x200),
                    end: Pfn(0x300),
                    avail_start: Pfn(0x210),
                    avail_end: Pfn(0x300),
                },
                FreeList(0),
            )
            .unwrap(),
            mem.physload(
                BootRange {
                    start: Pfn(0x1000),
                    end: Pfn(0x1800),
                    avail_start: Pfn(0x1000),
                    avail_end: Pfn(0x1800),
                },
                FreeList(1),
            )
            .unwrap(),
        ];
        refused_until_memory(&mem, &handles, PROBE_TO, || mem.init_pages());
        assert!(mem.is_initialized());
        assert_eq!(mem.slab_count(), 1);
        let guard = mem.read();
        assert_eq!(
            guard.find(Pfn(0x1400)),
            Some(Lookup {
                segment: handles[1],
                offset: PageCount(0x400)
            })
        );
        // Writes work on the moved records.
        drop(guard);
        mem.unplug(Pfn(0x1100), PageCount(0x10)).unwrap();
        assert_eq!(mem.len(), 3);
    });
}

#[test]
fn try_initialized_reports_out_of_memory() {
    without_leaks(|| {
        let (refused, failed) = failing_at(1, Physmem::<BasicPage>::try_initialized);
        assert!(failed);
        assert_eq!(refused.err(), Some(PhysmemError::OutOfMemory));
        let (fallback, _) = failing_at(1, Physmem::<BasicPage>::initialized);
        assert!(!fallback.is_initialized(), "boot mode, as documented");
        let mem = Physmem::<BasicPage>::try_initialized().unwrap();
        assert!(mem.is_initialized());
        mem.plug(Pfn(8), PageCount(8)).unwrap();
        assert_eq!(mem.read().len(), 1);
    });
}

/// The world an operation starts from: a set and its segments' handles.
type Setup<const BOOT: usize> = (Mem<BOOT>, Vec<SegmentHandle>);

/// As [`refused_until_memory`], but each attempt runs on a fresh `setup()`.
/// A refused attempt may leave a vector with more capacity than before
/// (state unchanged, room grown), so that in the next attempt an allocation
/// the operation makes later is no longer needed and never gets failed;
/// starting every attempt from the same state fails each allocation of the
/// successful run once, including those made after the point of no return.
fn refused_from_scratch<const BOOT: usize>(
    setup: impl Fn() -> Setup<BOOT>,
    probe_to: u64,
    operation: impl Fn(&Mem<BOOT>) -> Result<(), PhysmemError>,
) -> Setup<BOOT> {
    for n in 1.. {
        let (mem, handles) = setup();
        let before = snapshot(&mem, &handles, probe_to);
        let (result, failed) = failing_at(n, || operation(&mem));
        if !failed {
            assert!(n > 1, "the operation allocates");
            result.expect("succeeds once memory is there");
            return (mem, handles);
        }
        match result {
            Err(PhysmemError::OutOfMemory) | Err(PhysmemError::DescriptorAllocation) => {}
            other => panic!("allocation {n} failed but the operation returned {other:?}"),
        }
        assert_eq!(mem.pending_reclaim(), 0, "allocation {n}: garbage was left");
        assert_eq!(
            snapshot(&mem, &handles, probe_to),
            before,
            "allocation {n} failed and the state changed"
        );
    }
    unreachable!()
}

#[test]
fn first_reclaim_into_the_only_slab_lists_it_without_allocating() {
    without_leaks(|| {
        // The first plug makes slab 0, and the slab id lists must then have
        // room for one id: reclaiming the unplugged head, while publishing,
        // lists the slab as having space again. Were that room one short,
        // the list would grow there, and failing that allocation aborts.
        let setup = || {
            let mem: Physmem<BasicPage> = Physmem::initialized();
            let handles = vec![mem.plug(Pfn(0x10), PageCount(8)).unwrap()];
            (mem, handles)
        };
        let (mem, handles) =
            refused_from_scratch(setup, 0x20, |mem| mem.unplug(Pfn(0x10), PageCount(2)));
        assert_eq!(
            mem.read().find(Pfn(0x12)),
            Some(Lookup {
                segment: handles[0],
                offset: PageCount(0)
            })
        );
        assert_eq!(mem.slab_count(), 1);
    });
}

#[test]
fn middle_unplugs_reserve_the_free_region_their_reclaim_records() {
    without_leaks(|| {
        // Each unplug of one frame inside the upper part frees one more
        // separate range of the same slab, so its free-region list outgrows
        // its first allocation on the way. The room must be taken before the
        // unplug commits: taken during the reclaim, failing it could not
        // refuse the unplug, which would succeed with the range lost to
        // later plugs.
        for holes in 0..7u64 {
            let setup = || {
                let mem: Physmem<BasicPage> = Physmem::initialized();
                let handles = vec![mem.plug(Pfn(0x10), PageCount(0x10)).unwrap()];
                for hole in 0..holes {
                    mem.unplug(Pfn(0x11 + 2 * hole), PageCount(1)).unwrap();
                }
                (mem, handles)
            };
            let next = Pfn(0x11 + 2 * holes);
            let (mem, _) = refused_from_scratch(setup, 0x20, |mem| mem.unplug(next, PageCount(1)));
            assert_eq!(mem.read().find(next), None);
            assert_eq!(mem.len() as u64, holes + 2);
            assert_eq!(mem.slab_count(), 1);
        }
    });
}

#[test]
fn split_changing_both_slot_chunks_reserves_room_for_both() {
    without_leaks(|| {
        // 600 boot slots make a slot map of two 512-slot chunks. Segment A
        // (slot 0) spans sections 0 and 1, and 512 one-frame segments
        // around it use slots 1 to 512, so the upper half of a split of A
        // takes slot 514 (a plug took 513), in the second chunk: the split
        // retires the old index, both sections, both chunks and the freed
        // descriptors, 6 items. The bound counting one chunk would reserve
        // 5, and the retire bag, unused until this write, would get room
        // for exactly 5: it grows while publishing, and failing that
        // allocation aborts.
        let setup = || {
            let mem: Mem<600> = Physmem::new();
            let load = |start: u64, end: u64| {
                mem.physload(
                    BootRange {
                        start: Pfn(start),
                        end: Pfn(end),
                        avail_start: Pfn(start),
                        avail_end: Pfn(end),
                    },
                    FreeList(0),
                )
                .unwrap()
            };
            let mut handles = vec![load(256, 700)];
            handles.extend((0..256).chain(700..956).map(|pfn| load(pfn, pfn + 1)));
            mem.init_pages().unwrap();
            // The init wrote to one retire bag; this plug writes to it again
            // and leaves the other, empty one for the split.
            handles.push(mem.plug(Pfn(1000), PageCount(1)).unwrap());
            (mem, handles)
        };
        let (mem, handles) =
            refused_from_scratch(setup, 1024, |mem| mem.unplug(Pfn(400), PageCount(1)));
        let guard = mem.read();
        let Lookup {
            segment: upper,
            offset,
        } = guard.find(Pfn(401)).unwrap();
        assert!(!handles.contains(&upper));
        assert_eq!(offset, PageCount(0));
        assert_eq!(guard.segment(handles[0]).unwrap().end(), Pfn(400));
        assert_eq!(guard.len(), 515);
    });
}

#[test]
fn cutting_a_plug_on_its_own_memory_out_of_memory_changes_nothing() {
    // The plug's first two frames, for its 1,024 descriptors; made before
    // counting, and outliving the `Physmem`.
    let mut memory = vec![0u64; 1024];
    let base = std::ptr::NonNull::new(memory.as_mut_ptr().cast::<u8>()).unwrap();
    without_leaks(|| {
        let (mem, mut handles) = running();
        // SAFETY: the buffer is this plug's alone and outlives `mem`.
        let handle = unsafe { mem.plug_on_memory(Pfn(0x3000), PageCount(1024), base) };
        handles.push(handle.unwrap());
        refused_until_memory(&mem, &handles, 0x3400, || {
            mem.unplug(Pfn(0x3100), PageCount(0x100))
        });
        // Had a refused cut counted a piece, the front, which holds the
        // descriptors, would be refused after the back goes.
        mem.unplug(Pfn(0x3200), PageCount(0x200)).unwrap();
        mem.unplug(Pfn(0x3000), PageCount(0x100)).unwrap();
        mem.reclaim();
        assert!(!mem.holds_memory(base));
    });
}
