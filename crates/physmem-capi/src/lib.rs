//! hotkern-physmem for C: NetBSD's `uvm_physseg.h` interface over one
//! global [`Physmem`].
//!
//! The header is `include/uvm_physseg.h` (written by hand, documented per
//! function); this crate implements it as `extern "C"` functions and is
//! built as a static library:
//!
//! ```text
//! cargo rustc -p hotkern-physmem-capi --profile capi --crate-type staticlib
//! cc -std=c11 -Icrates/physmem-capi/include boot.c target/capi/libhotkern_physmem_capi.a
//! ```
//!
//! Design, and where it differs from NetBSD's `uvm_physseg.c`:
//!
//! - **Handles** (`uvm_physseg_t`) are 64-bit integers with no meaning to C
//!   ([`SegmentHandle::to_bits`]). Unlike NetBSD's rbtree pointers they never
//!   dangle: a handle whose segment is gone is just invalid.
//! - **Page descriptors** are physmem's: fixed-size, aligned storage
//!   ([`VmPage`], [`VM_PAGE_SIZE`] bytes apart) that C reads as its own
//!   `struct vm_page` through `uvm_physseg_get_pg`; C pads its struct to
//!   exactly that size so that its `pgs[i]` arithmetic matches. Each is made by the C
//!   hook `hotkern_physseg_page_init` (zeroed first, as NetBSD's
//!   `kmem_zalloc`ed arrays are) and then moved into place, so the hook must
//!   not keep the descriptor's address. The C side's own boot array
//!   (`uvm_physseg_seg_chomp_slab`) is not used.
//! - **Memory** comes from the C hooks `hotkern_physseg_alloc` /
//!   `hotkern_physseg_free` (kmem_alloc / kmem_free shaped, with an
//!   alignment), through this crate's `#[global_allocator]`; before page
//!   init nothing is allocated.
//! - **Errors** are NetBSD's: `false`, an invalid handle, `(paddr_t)-1` or
//!   `NULL`. Every argument is checked; a refused call changes nothing and
//!   nothing panics across the boundary (a panic inside calls the C hook
//!   `hotkern_physseg_panic` and never returns).
#![cfg_attr(not(test), no_std)]

extern crate alloc;

mod boot;
mod page;
mod physseg;
mod runtime;

use core::sync::atomic::{AtomicBool, Ordering};

use hotkern_physmem::{DefaultRawMutex, Physmem, SegmentHandle, SegmentInfo};

pub use page::{VmPage, VM_PAGE_ALIGN, VM_PAGE_SIZE};

/// `uvm_physseg_t`: a segment handle as C carries it.
pub type PhysSegT = u64;

/// Boot segments `uvm_page_physload` can hold before page init (NetBSD's
/// `VM_PHYSSEG_MAX` on most ports).
pub const VM_PHYSSEG_MAX: usize = 32;

/// `UVM_PHYSSEG_TYPE_INVALID`: names no segment. Every invalid constant has
/// all ones in its low 32 bits, a slot physmem never uses.
pub const UVM_PHYSSEG_TYPE_INVALID: PhysSegT = u64::MAX;
/// `UVM_PHYSSEG_TYPE_INVALID_EMPTY`: asked for a segment where there is none
/// (`get_first` with no segments, `get_prev` of the first).
pub const UVM_PHYSSEG_TYPE_INVALID_EMPTY: PhysSegT = 0xffff_fffe_ffff_ffff;
/// `UVM_PHYSSEG_TYPE_INVALID_OVERFLOW`: ran off the end (`get_next` of the last).
pub const UVM_PHYSSEG_TYPE_INVALID_OVERFLOW: PhysSegT = 0xffff_fffd_ffff_ffff;

/// The one set of segments the C interface works on, as NetBSD has one
/// `uvm_physseg_graph`.
pub(crate) static PHYSMEM: Physmem<VmPage, DefaultRawMutex, VM_PHYSSEG_MAX> = Physmem::new();

/// NetBSD's `uvm.page_init_done`: set once page init has run. Only this
/// crate runs page init, so it can keep the flag without taking the lock.
pub(crate) static PAGE_INIT_DONE: AtomicBool = AtomicBool::new(false);

pub(crate) fn page_init_done() -> bool {
    PAGE_INIT_DONE.load(Ordering::Acquire)
}

/// The handle C gave, or `None` for the invalid constants.
pub(crate) fn handle(upm: PhysSegT) -> Option<SegmentHandle> {
    // Slot u32::MAX is never used: no live segment has these bits.
    (upm as u32 != u32::MAX).then(|| SegmentHandle::from_bits(upm))
}

/// The attributes of the segment `upm` names: from a lock-free read once
/// page init has run, from the writer's records before it.
pub(crate) fn info(upm: PhysSegT) -> Option<SegmentInfo> {
    let handle = handle(upm)?;
    if page_init_done() {
        if let Ok(segment) = PHYSMEM.read().segment(handle) {
            return Some(segment.info());
        }
    }
    PHYSMEM.segment_info(handle).ok()
}

#[cfg(test)]
mod tests {
    use core::ptr;

    use super::*;
    use crate::boot::*;
    use crate::physseg::*;

    /// One test: the library has one global segment set.
    #[test]
    fn bad_pointers_and_handles_are_refused_and_change_nothing() {
        let upm = uvm_page_physload(0x100, 0x110, 0x100, 0x110, 0);
        assert!(uvm_physseg_valid_p(upm));
        // SAFETY: NULL is allowed (and refused) for `paddrp`.
        assert!(!unsafe { uvm_page_physunload(upm, 0, ptr::null_mut()) });
        // SAFETY: as above.
        assert!(!unsafe { uvm_page_physunload_force(upm, 0, ptr::null_mut()) });
        assert_eq!(uvm_physseg_get_start(upm), 0x100);
        assert!(!uvm_physseg_valid_p(UVM_PHYSSEG_TYPE_INVALID_OVERFLOW));
        assert!(hotkern_physseg_init_pages());
        let page = uvm_physseg_get_pg(upm, 3);
        // SAFETY: a live descriptor, written by the stand-in page hook.
        assert_eq!(unsafe { page.cast::<u64>().read() }, 0x103 << 12);
        assert!(uvm_physseg_get_pg(upm, 0x10).is_null());
        // SAFETY: NULL `offp` and `psp` are allowed.
        unsafe {
            assert_eq!(uvm_physseg_find(0x105, ptr::null_mut()), upm);
            assert!(uvm_physseg_plug(0x200, 1, ptr::null_mut()));
        }
        assert!(!uvm_physseg_unplug(0x100, 0x11));
        assert_eq!(uvm_physseg_get_end(upm), 0x110);
    }
}
