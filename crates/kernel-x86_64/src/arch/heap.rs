//! The kernel heap: a first-fit free list (`linked_list_allocator`) over
//! one contiguous run of frames that the boot code takes out of physmem
//! (see [`crate::arch::memory`]).
//!
//! Until [`init`] runs every allocation fails (returns null), which is what
//! physmem's boot phase relies on never happening: `physload` and
//! `physunload` need no heap.
//!
//! The lock is a plain spin lock: no interrupt handler allocates (the tick
//! and the cross-CPU call take no lock, see [`crate::arch::smp`]), so a handler
//! never waits for a lock its own CPU holds. Once handlers allocate, it
//! must also mask interrupts while held.

use core::alloc::{GlobalAlloc, Layout};
use core::ptr::{self, NonNull};
use core::sync::atomic::{AtomicUsize, Ordering};

use linked_list_allocator::Heap;
use spin::Mutex;

/// The global allocator: the free list and its high-water mark.
pub struct KernelHeap {
    heap: Mutex<Heap>,
    peak: AtomicUsize,
}

#[global_allocator]
static HEAP: KernelHeap = KernelHeap {
    heap: Mutex::new(Heap::empty()),
    peak: AtomicUsize::new(0),
};

/// Hands `[start, start + bytes)` to the heap.
///
/// # Safety
/// The memory is mapped, writable, unused by anything else for the rest of
/// the run, and `init` has not run before.
pub unsafe fn init(start: u64, bytes: usize) {
    // SAFETY: the caller gives the region to the heap for good.
    unsafe { HEAP.heap.lock().init(start as *mut u8, bytes) };
}

/// The heap's figures: `(size, in use now, most ever in use)` in bytes.
pub fn usage() -> (usize, usize, usize) {
    let heap = HEAP.heap.lock();
    (heap.size(), heap.used(), HEAP.peak.load(Ordering::Relaxed))
}

// SAFETY: `allocate_first_fit` returns blocks of at least the layout's size
// and alignment, disjoint from every live block, inside the region `init`
// was given; the lock serialises every change to the free list.
unsafe impl GlobalAlloc for KernelHeap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let mut heap = self.heap.lock();
        match heap.allocate_first_fit(layout) {
            Ok(block) => {
                self.peak.fetch_max(heap.used(), Ordering::Relaxed);
                block.as_ptr()
            }
            Err(()) => ptr::null_mut(),
        }
    }

    unsafe fn dealloc(&self, block: *mut u8, layout: Layout) {
        if let Some(block) = NonNull::new(block) {
            // SAFETY: `GlobalAlloc`'s contract: the block came from `alloc`
            // with this layout and is not used again.
            unsafe { self.heap.lock().deallocate(block, layout) };
        }
    }
}
