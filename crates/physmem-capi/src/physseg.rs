//! The running-system half of `uvm_physseg.h`: lookup, getters, walks,
//! plug and unplug. After page init, lookups and walks take no lock.

use core::ffi::{c_int, c_uint};
use core::ptr;

use hotkern_physmem::{PageCount, Pfn, SegmentHandle, SegmentInfo};

use crate::{
    handle, info, page_init_done, PhysSegT, VmPage, PHYSMEM, UVM_PHYSSEG_TYPE_INVALID,
    UVM_PHYSSEG_TYPE_INVALID_EMPTY, UVM_PHYSSEG_TYPE_INVALID_OVERFLOW,
};

/// What the getters return for an invalid handle (NetBSD's `(paddr_t)-1`).
const NO_FRAME: u64 = u64::MAX;

/// Before page init readers see nothing: boot code's walks and lookups
/// scan the (at most `VM_PHYSSEG_MAX`) boot records under the writer lock,
/// keeping the lowest (`lowest`) or highest start among the `eligible`.
fn boot_pick(
    eligible: impl Fn(&SegmentInfo) -> bool,
    lowest: bool,
) -> Option<(SegmentHandle, SegmentInfo)> {
    let mut best: Option<(SegmentHandle, SegmentInfo)> = None;
    PHYSMEM.for_each_segment(|handle, info| {
        let better = match &best {
            None => true,
            Some((_, kept)) if lowest => info.start < kept.start,
            Some((_, kept)) => info.start > kept.start,
        };
        if eligible(info) && better {
            best = Some((handle, *info));
        }
    });
    best
}

fn bits(found: Option<SegmentHandle>, none: PhysSegT) -> PhysSegT {
    found.map_or(none, SegmentHandle::to_bits)
}

/// `bool uvm_physseg_valid_p(uvm_physseg_t)`.
#[no_mangle]
pub extern "C" fn uvm_physseg_valid_p(upm: PhysSegT) -> bool {
    info(upm).is_some()
}

/// `paddr_t uvm_physseg_get_start(uvm_physseg_t)`: first frame, or -1.
#[no_mangle]
pub extern "C" fn uvm_physseg_get_start(upm: PhysSegT) -> u64 {
    info(upm).map_or(NO_FRAME, |i| i.start.0)
}

/// `paddr_t uvm_physseg_get_end(uvm_physseg_t)`: one past the last frame, or -1.
#[no_mangle]
pub extern "C" fn uvm_physseg_get_end(upm: PhysSegT) -> u64 {
    info(upm).map_or(NO_FRAME, |i| i.end.0)
}

/// `paddr_t uvm_physseg_get_avail_start(uvm_physseg_t)`, or -1.
#[no_mangle]
pub extern "C" fn uvm_physseg_get_avail_start(upm: PhysSegT) -> u64 {
    info(upm).map_or(NO_FRAME, |i| i.avail_start.0)
}

/// `paddr_t uvm_physseg_get_avail_end(uvm_physseg_t)`, or -1.
#[no_mangle]
pub extern "C" fn uvm_physseg_get_avail_end(upm: PhysSegT) -> u64 {
    info(upm).map_or(NO_FRAME, |i| i.avail_end.0)
}

/// `int uvm_physseg_get_free_list(uvm_physseg_t)`, or -1.
#[no_mangle]
pub extern "C" fn uvm_physseg_get_free_list(upm: PhysSegT) -> c_int {
    info(upm).map_or(-1, |i| i.free_list.0 as c_int)
}

/// `u_int uvm_physseg_get_start_hint(uvm_physseg_t)`, or 0.
#[no_mangle]
pub extern "C" fn uvm_physseg_get_start_hint(upm: PhysSegT) -> c_uint {
    info(upm).map_or(0, |i| i.start_hint as c_uint)
}

/// `bool uvm_physseg_set_start_hint(uvm_physseg_t, u_int)`.
#[no_mangle]
pub extern "C" fn uvm_physseg_set_start_hint(upm: PhysSegT, start_hint: c_uint) -> bool {
    handle(upm).is_some_and(|h| PHYSMEM.set_start_hint(h, u64::from(start_hint)).is_ok())
}

/// `struct vm_page *uvm_physseg_get_pg(uvm_physseg_t, paddr_t idx)`: the
/// descriptor `idx` frames into the segment, NULL if there is none.
#[no_mangle]
pub extern "C" fn uvm_physseg_get_pg(upm: PhysSegT, idx: u64) -> *mut VmPage {
    let Some(handle) = handle(upm) else {
        return ptr::null_mut();
    };
    let guard = PHYSMEM.read();
    let Ok(segment) = guard.segment(handle) else {
        return ptr::null_mut();
    };
    if idx >= segment.len().0 {
        return ptr::null_mut();
    }
    guard
        .page(Pfn(segment.start().0 + idx))
        .map_or(ptr::null_mut(), |page| ptr::from_ref(page).cast_mut())
}

/// `struct pmap_physseg *uvm_physseg_get_pmseg(uvm_physseg_t)`: always
/// NULL, physmem keeps no pmap data per segment.
#[no_mangle]
pub extern "C" fn uvm_physseg_get_pmseg(_upm: PhysSegT) -> *mut u8 {
    ptr::null_mut()
}

/// `uvm_physseg_t uvm_physseg_get_first(void)`.
#[no_mangle]
pub extern "C" fn uvm_physseg_get_first() -> PhysSegT {
    let found = if page_init_done() {
        PHYSMEM.read().first().map(|s| s.handle())
    } else {
        boot_pick(|_| true, true).map(|(h, _)| h)
    };
    bits(found, UVM_PHYSSEG_TYPE_INVALID_EMPTY)
}

/// `uvm_physseg_t uvm_physseg_get_last(void)`.
#[no_mangle]
pub extern "C" fn uvm_physseg_get_last() -> PhysSegT {
    let found = if page_init_done() {
        PHYSMEM.read().last().map(|s| s.handle())
    } else {
        boot_pick(|_| true, false).map(|(h, _)| h)
    };
    bits(found, UVM_PHYSSEG_TYPE_INVALID_EMPTY)
}

/// `uvm_physseg_t uvm_physseg_get_next(uvm_physseg_t)`.
#[no_mangle]
pub extern "C" fn uvm_physseg_get_next(upm: PhysSegT) -> PhysSegT {
    let Some(current) = info(upm) else {
        return UVM_PHYSSEG_TYPE_INVALID;
    };
    let found = if page_init_done() {
        let guard = PHYSMEM.read();
        match handle(upm).map(|h| guard.next(h)) {
            Some(Ok(next)) => next.map(|s| s.handle()),
            _ => return UVM_PHYSSEG_TYPE_INVALID,
        }
    } else {
        boot_pick(|i| i.start > current.start, true).map(|(h, _)| h)
    };
    bits(found, UVM_PHYSSEG_TYPE_INVALID_OVERFLOW)
}

/// `uvm_physseg_t uvm_physseg_get_prev(uvm_physseg_t)`.
#[no_mangle]
pub extern "C" fn uvm_physseg_get_prev(upm: PhysSegT) -> PhysSegT {
    let Some(current) = info(upm) else {
        return UVM_PHYSSEG_TYPE_INVALID;
    };
    let found = if page_init_done() {
        let guard = PHYSMEM.read();
        match handle(upm).map(|h| guard.prev(h)) {
            Some(Ok(prev)) => prev.map(|s| s.handle()),
            _ => return UVM_PHYSSEG_TYPE_INVALID,
        }
    } else {
        boot_pick(|i| i.start < current.start, false).map(|(h, _)| h)
    };
    bits(found, UVM_PHYSSEG_TYPE_INVALID_EMPTY)
}

/// `paddr_t uvm_physseg_get_highest_frame(void)`, or -1 with no segments.
#[no_mangle]
pub extern "C" fn uvm_physseg_get_highest_frame() -> u64 {
    info(uvm_physseg_get_last()).map_or(NO_FRAME, |last| last.end.0 - 1)
}

/// `uvm_physseg_t uvm_physseg_find(paddr_t pframe, psize_t *offp)`: the
/// segment holding frame `pframe`; `*offp` (if not NULL) gets its offset.
///
/// # Safety
/// `offp` is NULL or points at a writable `psize_t`.
#[no_mangle]
pub unsafe extern "C" fn uvm_physseg_find(pframe: u64, offp: *mut u64) -> PhysSegT {
    let found = match PHYSMEM.read().find(Pfn(pframe)) {
        Some(found) => Some((found.segment, found.offset.0)),
        None if !page_init_done() => boot_pick(|i| i.start.0 <= pframe && pframe < i.end.0, true)
            .map(|(h, i)| (h, pframe - i.start.0)),
        None => None,
    };
    let Some((segment, offset)) = found else {
        return UVM_PHYSSEG_TYPE_INVALID;
    };
    if !offp.is_null() {
        // SAFETY: not NULL, so writable, per the contract.
        unsafe { offp.write(offset) };
    }
    segment.to_bits()
}

/// `bool uvm_physseg_plug(paddr_t pfn, size_t pages, uvm_physseg_t *psp)`.
///
/// # Safety
/// `psp` is NULL or points at a writable `uvm_physseg_t`.
#[no_mangle]
pub unsafe extern "C" fn uvm_physseg_plug(pfn: u64, pages: usize, psp: *mut PhysSegT) -> bool {
    let Ok(segment) = PHYSMEM.plug(Pfn(pfn), PageCount(pages as u64)) else {
        return false;
    };
    if !psp.is_null() {
        // SAFETY: not NULL, so writable, per the contract.
        unsafe { psp.write(segment.to_bits()) };
    }
    true
}

/// `bool uvm_physseg_unplug(paddr_t pfn, size_t pages)`.
#[no_mangle]
pub extern "C" fn uvm_physseg_unplug(pfn: u64, pages: usize) -> bool {
    PHYSMEM.unplug(Pfn(pfn), PageCount(pages as u64)).is_ok()
}
