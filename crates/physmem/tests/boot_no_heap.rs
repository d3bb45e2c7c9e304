//! Boot-time loading needs no heap: a counting allocator sees no allocation
//! from `new`, `physload`, `physunload`, a boot-time split or a boot-time
//! removal of a whole segment, and page init
//! makes one slab for all boot segments.
// These use real threads and atomics; the loom build runs only tests/loom.rs.
#![cfg(not(loom))]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use hotkern_physmem::{BasicPage, BootRange, FreeList, PageCount, Pfn, Physmem, PhysmemError};

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed on unchanged to `System`, which upholds the
// `GlobalAlloc` contract; counting touches only an atomic.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::SeqCst);
        // SAFETY: our caller's guarantees about `layout` are `System`'s.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `alloc` above, that is from `System`,
        // with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

// A `static`, as a kernel would have it: `new` is a const fn.
static MEMORY: Physmem<BasicPage> = Physmem::new();

#[test]
fn boot_phase_allocates_nothing_and_page_init_uses_one_slab() {
    let before = ALLOCATIONS.load(Ordering::SeqCst);
    let a = MEMORY
        .physload(
            BootRange {
                start: Pfn(0x100),
                end: Pfn(0x200),
                avail_start: Pfn(0x100),
                avail_end: Pfn(0x200),
            },
            FreeList(0),
        )
        .unwrap();
    let b = MEMORY
        .physload(
            BootRange {
                start: Pfn(0),
                end: Pfn(0x80),
                avail_start: Pfn(0),
                avail_end: Pfn(0x80),
            },
            FreeList(0),
        )
        .unwrap();
    let c = MEMORY
        .physload(
            BootRange {
                start: Pfn(0x300),
                end: Pfn(0x310),
                avail_start: Pfn(0x300),
                avail_end: Pfn(0x310),
            },
            FreeList(0),
        )
        .unwrap();
    let stolen = MEMORY.physunload(a, FreeList(0)).unwrap();
    MEMORY.unplug(Pfn(0x40), PageCount(8)).unwrap();
    // A whole segment: its slot is freed in boot storage, not in a list.
    MEMORY.unplug(Pfn(0x300), PageCount(0x10)).unwrap();
    let info = MEMORY.segment_info(b).unwrap();
    let after = ALLOCATIONS.load(Ordering::SeqCst);
    assert_eq!(after, before, "boot operations touched the heap");
    assert_eq!(stolen, Pfn(0x100));
    assert_eq!((info.start, info.end), (Pfn(0), Pfn(0x40)));
    assert_eq!(MEMORY.segment_info(c), Err(PhysmemError::StaleHandle));
    assert!(
        MEMORY.read().find(Pfn(0x10)).is_none(),
        "readers wait for page init"
    );

    MEMORY.init_pages().unwrap();
    assert!(ALLOCATIONS.load(Ordering::SeqCst) > after);
    assert_eq!(MEMORY.slab_count(), 1);
    assert_eq!(MEMORY.len(), 3);
    let guard = MEMORY.read();
    assert_eq!(
        guard.page(Pfn(0x150)).unwrap().phys_addr,
        Pfn(0x150).phys_addr()
    );
    assert_eq!(guard.find(Pfn(0x48)).unwrap().offset, PageCount(0));
}
