//! A global allocator that counts the bytes this thread holds and their
//! high-water mark, for the tests that bound a write's heap. A test file
//! installs it with `#[global_allocator] static GLOBAL: Counting = Counting;`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

/// Counts the bytes this thread has allocated and not freed, and their
/// high-water mark.
pub struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

// SAFETY: every allocation is `System`'s; the bookkeeping touches only
// thread-locals.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: our caller's guarantees about `layout` are `System`'s.
        let ptr = unsafe { System.alloc(layout) };
        if !ptr.is_null() {
            let live = LIVE.with(|live| {
                live.set(live.get() + layout.size() as isize);
                live.get()
            });
            PEAK.with(|peak| peak.set(peak.get().max(live)));
        }
        ptr
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.with(|live| live.set(live.get() - layout.size() as isize));
        // SAFETY: from `System` in `alloc` above, with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// Bytes this thread holds now.
pub fn live() -> isize {
    LIVE.with(Cell::get)
}

/// Restarts the high-water mark from what is held now, and returns that.
pub fn reset_peak() -> isize {
    let now = live();
    PEAK.with(|peak| peak.set(now));
    now
}

/// The most this thread held since the last [`reset_peak`].
pub fn peak() -> isize {
    PEAK.with(Cell::get)
}
