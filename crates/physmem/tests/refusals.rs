//! Every refused physmem operation — overlaps, out-of-range frames, stale
//! handles, full boot storage — with a check that nothing observable
//! changed, as NetBSD's t_uvm_physseg checks its error returns.
// These use real threads and atomics; the loom build runs only tests/loom.rs.
#![cfg(not(loom))]

mod common;

use common::{running, state};
use hotkern_physmem::{
    BasicPage, BootRange, FreeList, PageCount, Pfn, Physmem, PhysmemError, PFN_LIMIT,
};

#[test]
fn every_refused_operation_changes_nothing() {
    let (mem, h) = running(&[(100, 50), (300, 10)]);
    let before = state(&mem);
    macro_rules! check {
        ($op:expr, $expected:expr) => {
            assert_eq!($op.map(drop), Err($expected), "{}", stringify!($op));
            assert_eq!(state(&mem), before, "{} changed the state", stringify!($op));
        };
    }
    use PhysmemError::*;
    check!(mem.plug(Pfn(0), PageCount(0)), ZeroPages);
    check!(mem.unplug(Pfn(100), PageCount(0)), ZeroPages);
    let (start, end) = (Pfn(u64::MAX - 1), Pfn(u64::MAX));
    check!(mem.plug(start, PageCount(4)), InvalidRange { start, end });
    let (start, end) = (Pfn(PFN_LIMIT - 1), Pfn(PFN_LIMIT + 1));
    check!(mem.plug(start, PageCount(2)), InvalidRange { start, end });
    // physload checks the limit again; unplug has only this check.
    check!(mem.unplug(start, PageCount(2)), InvalidRange { start, end });
    let (start, end) = (Pfn(10), Pfn(10));
    check!(
        mem.physload(
            BootRange {
                start,
                end,
                avail_start: start,
                avail_end: end
            },
            FreeList(0)
        ),
        InvalidRange { start, end }
    );
    let (start, end) = (Pfn(10), Pfn(20));
    check!(
        mem.physload(
            BootRange {
                start,
                end,
                avail_start: Pfn(5),
                avail_end: end
            },
            FreeList(0)
        ),
        InvalidRange { start, end }
    );
    check!(
        mem.physload(
            BootRange {
                start,
                end,
                avail_start: Pfn(15),
                avail_end: Pfn(12)
            },
            FreeList(0)
        ),
        InvalidRange { start, end }
    );
    check!(
        mem.physload(
            BootRange {
                start,
                end,
                avail_start: start,
                avail_end: Pfn(21)
            },
            FreeList(0)
        ),
        InvalidRange { start, end }
    );
    // Overlap on the first frame, on the last frame, and all around.
    let (existing_start, existing_end) = (Pfn(100), Pfn(150));
    check!(
        mem.plug(Pfn(149), PageCount(10)),
        Overlap {
            existing_start,
            existing_end
        }
    );
    check!(
        mem.plug(Pfn(90), PageCount(11)),
        Overlap {
            existing_start,
            existing_end
        }
    );
    let (existing_start, existing_end) = (Pfn(300), Pfn(310));
    check!(
        mem.plug(Pfn(250), PageCount(100)),
        Overlap {
            existing_start,
            existing_end
        }
    );
    // Unplug ranges not inside one segment: across its end, in a hole,
    // from a hole into it, over all of it and more.
    for (pfn, npages) in [(140, 20), (200, 1), (99, 2), (100, 300)] {
        let (pfn, npages) = (Pfn(pfn), PageCount(npages));
        check!(mem.unplug(pfn, npages), NotInOneSegment { pfn, npages });
    }
    // Descriptors for 2^39 frames (4 TiB of them) cannot be allocated.
    check!(
        mem.plug(Pfn(1 << 39), PageCount(1 << 39)),
        DescriptorAllocation
    );
    check!(mem.init_pages(), AlreadyInitialized);
    check!(mem.physunload(h[0], FreeList(9)), FreeListMismatch);
    // The last segment cannot go.
    mem.unplug(Pfn(300), PageCount(10)).unwrap();
    let before = state(&mem);
    assert_eq!(
        mem.unplug(Pfn(100), PageCount(50)),
        Err(PhysmemError::LastSegment)
    );
    assert_eq!(state(&mem), before);
}

#[test]
fn boot_storage_full_refuses_physload_and_middle_unplug_without_change() {
    let mem: Physmem<BasicPage, hotkern_physmem::DefaultRawMutex, 2> = Physmem::new();
    let a = mem
        .physload(
            BootRange {
                start: Pfn(0),
                end: Pfn(10),
                avail_start: Pfn(0),
                avail_end: Pfn(10),
            },
            FreeList(0),
        )
        .unwrap();
    mem.physload(
        BootRange {
            start: Pfn(20),
            end: Pfn(30),
            avail_start: Pfn(20),
            avail_end: Pfn(30),
        },
        FreeList(0),
    )
    .unwrap();
    assert_eq!(
        mem.physload(
            BootRange {
                start: Pfn(40),
                end: Pfn(50),
                avail_start: Pfn(40),
                avail_end: Pfn(50)
            },
            FreeList(0)
        ),
        Err(PhysmemError::StorageFull)
    );
    assert_eq!(
        mem.unplug(Pfn(4), PageCount(2)),
        Err(PhysmemError::StorageFull)
    );
    assert_eq!(mem.physunload_force(a), Ok(Pfn(0)));
    assert_eq!(mem.segment_info(a).unwrap().start, Pfn(1));
    assert_eq!(mem.len(), 2);
    // After page init the records are on the heap: no such limit.
    mem.init_pages().unwrap();
    mem.plug(Pfn(40), PageCount(10)).unwrap();
    mem.unplug(Pfn(4), PageCount(2)).unwrap();
    assert_eq!(mem.len(), 4);
}
