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
//!
//! After a crash ([`enter_crash_mode`]) the lock is taken with a bounded
//! number of tries: the crashing CPU, or another one that stopped, may hold
//! it for good. An allocation that cannot get it fails (null), which the
//! crash dump's second-crash guard turns into an abandoned dump, not a hang.

use core::alloc::{GlobalAlloc, Layout};
use core::ptr::{self, NonNull};
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use linked_list_allocator::Heap;
use spin::{Mutex, MutexGuard};

/// Tries of the lock in crash mode before an allocation gives up: tens of
/// milliseconds, far more than any holder that is still running needs.
const CRASH_LOCK_TRIES: u32 = 1 << 22;

/// Set once a CPU has crashed: the lock is then taken with bounded tries.
static CRASH_MODE: AtomicBool = AtomicBool::new(false);

/// Makes every later allocation and free wait a bounded time for the heap
/// lock (see the module documentation).
pub fn enter_crash_mode() {
    CRASH_MODE.store(true, Ordering::Release);
}

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

/// Restarts the high-water mark from what is in use now, and returns
/// that: for a caller that measures what a phase of the run allocates.
pub fn reset_peak() -> usize {
    let heap = HEAP.heap.lock();
    let used = heap.used();
    HEAP.peak.store(used, Ordering::Relaxed);
    used
}

impl KernelHeap {
    /// The free list: waits for it as long as it takes, except in crash
    /// mode, where it gives up after [`CRASH_LOCK_TRIES`].
    fn lock(&self) -> Option<MutexGuard<'_, Heap>> {
        if !CRASH_MODE.load(Ordering::Acquire) {
            return Some(self.heap.lock());
        }
        (0..CRASH_LOCK_TRIES).find_map(|_| {
            let guard = self.heap.try_lock();
            if guard.is_none() {
                core::hint::spin_loop();
            }
            guard
        })
    }
}

// SAFETY: `allocate_first_fit` returns blocks of at least the layout's size
// and alignment, disjoint from every live block, inside the region `init`
// was given; the lock serialises every change to the free list.
unsafe impl GlobalAlloc for KernelHeap {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let Some(mut heap) = self.lock() else {
            return ptr::null_mut();
        };
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
            // Without the lock (crash mode only) the block is leaked: the
            // run is ending.
            if let Some(mut heap) = self.lock() {
                // SAFETY: `GlobalAlloc`'s contract: the block came from
                // `alloc` with this layout and is not used again.
                unsafe { heap.deallocate(block, layout) };
            }
        }
    }
}
