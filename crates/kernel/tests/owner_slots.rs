//! A chunk of owner slots the heap cannot hold: the allocation fails with
//! a typed error and changes nothing. The failure is injected below the
//! kernel, in the global allocator, so the code under test is the one the
//! kernels run.
#![cfg(not(loom))]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use hotkern_kernel::movable::{AllocError, MovableFrames, Slot};
use hotkern_physmem::Pfn;

/// The system allocator, failing this thread's allocations of at least
/// [`FAIL_FROM`] bytes while it is set.
struct Failing;

thread_local! {
    static FAIL_FROM: Cell<usize> = const { Cell::new(usize::MAX) };
}

// SAFETY: forwards to `System`, or returns null, which `GlobalAlloc`
// allows for a failed allocation.
unsafe impl GlobalAlloc for Failing {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() >= FAIL_FROM.with(Cell::get) {
            return std::ptr::null_mut();
        }
        // SAFETY: the caller's contract, passed on.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Failing = Failing;

/// A chunk of slots: 4096 of 16 bytes.
const CHUNK_BYTES: usize = 4096 * 16;

#[test]
fn a_chunk_the_heap_cannot_hold_fails_typed_and_changes_nothing() {
    let frames = MovableFrames::new(Pfn(0x1000), 2, 4096).unwrap();
    assert!(frames.blocks().add_blocks(0, 2));
    let slots: Vec<Slot> = (0..4096).map(|_| frames.alloc().unwrap()).collect();
    let (table, counts) = (frames.owner_table_bytes(), frames.blocks().counts());
    assert_eq!(counts, (4096, 8192));

    FAIL_FROM.with(|fail| fail.set(CHUNK_BYTES));
    let refused = frames.try_alloc();
    let refused_in = frames.try_alloc_in(1);
    FAIL_FROM.with(|fail| fail.set(usize::MAX));
    assert_eq!(refused, Err(AllocError::NoSlotMemory));
    assert_eq!(refused_in, Err(AllocError::NoSlotMemory));
    assert_eq!(frames.owner_table_bytes(), table, "no chunk kept");
    assert_eq!(frames.blocks().counts(), counts, "no frame taken");
    assert_eq!(frames.owner_of(Pfn(0x1000 + 4096)), None);
    assert_eq!(frames.frame_of(Slot::from_index(4096)), None);

    // A freed slot needs no chunk, so it is handed out even now.
    assert!(frames.free(slots[5]));
    FAIL_FROM.with(|fail| fail.set(CHUNK_BYTES));
    let reused = frames.try_alloc();
    FAIL_FROM.with(|fail| fail.set(usize::MAX));
    assert_eq!(reused, Ok(slots[5]));

    // With the heap back, the next slot is the new chunk's first, on the
    // first free frame.
    let next = frames.try_alloc().unwrap();
    assert_eq!(next.index(), 4096);
    assert_eq!(frames.frame_of(next), Some(Pfn(0x1000 + 4096)));
    assert_eq!(frames.owner_table_bytes(), table + CHUNK_BYTES as u64);
}
