//! The boot half of `uvm_physseg.h`: loading and stealing memory before
//! page init, and page init itself (NetBSD's `uvm_page_init` "init dance").

use core::ffi::c_int;
use core::ptr;
use core::sync::atomic::Ordering;

use hotkern_physmem::{BootRange, FreeList, Pfn, PfnRange, PhysmemError};

use crate::physseg::uvm_physseg_get_pg;
use crate::{handle, info, page_init_done, PhysSegT, VmPage, PAGE_INIT_DONE, PHYSMEM};
use crate::{UVM_PHYSSEG_TYPE_INVALID, VM_PAGE_ALIGN, VM_PAGE_SIZE};

/// `void uvm_physseg_init(void)`: nothing to do, the segment set is a
/// static that needs no set-up; kept for NetBSD's boot order.
#[no_mangle]
pub extern "C" fn uvm_physseg_init() {}

/// `uvm_physseg_t uvm_page_physload(paddr_t start, paddr_t end, paddr_t
/// avail_start, paddr_t avail_end, int free_list)`: all frames. Invalid
/// after page init, for a negative free list, a bad range, an overlap or a
/// full boot table (NetBSD panics on these).
#[no_mangle]
pub extern "C" fn uvm_page_physload(
    start: u64,
    end: u64,
    avail_start: u64,
    avail_end: u64,
    free_list: c_int,
) -> PhysSegT {
    let Ok(free_list) = u32::try_from(free_list) else {
        return UVM_PHYSSEG_TYPE_INVALID;
    };
    if page_init_done() {
        return UVM_PHYSSEG_TYPE_INVALID;
    }
    let range = BootRange {
        start: Pfn(start),
        end: Pfn(end),
        avail_start: Pfn(avail_start),
        avail_end: Pfn(avail_end),
    };
    PHYSMEM
        .physload(range, FreeList(free_list))
        .map_or(UVM_PHYSSEG_TYPE_INVALID, |h| h.to_bits())
}

/// Shared by the two unloads: refused after page init (NetBSD panics),
/// with no place for the answer, or when physmem refuses.
fn unload(paddrp: *mut u64, take: impl FnOnce() -> Result<Pfn, PhysmemError>) -> Result<u64, ()> {
    if page_init_done() || paddrp.is_null() {
        return Err(());
    }
    take().map(|pfn| pfn.phys_addr().0).map_err(drop)
}

/// `bool uvm_page_physunload(uvm_physseg_t, int freelist, paddr_t *paddrp)`:
/// takes the first or else the last frame of the segment, if available and
/// on `freelist`; `*paddrp` gets its byte address.
///
/// # Safety
/// `paddrp` is NULL (refused) or points at a writable `paddr_t`.
#[no_mangle]
pub unsafe extern "C" fn uvm_page_physunload(
    upm: PhysSegT,
    freelist: c_int,
    paddrp: *mut u64,
) -> bool {
    let (Some(segment), Ok(freelist)) = (handle(upm), u32::try_from(freelist)) else {
        return false;
    };
    match unload(paddrp, || PHYSMEM.physunload(segment, FreeList(freelist))) {
        // SAFETY: checked not NULL in `unload`; writable per the contract.
        Ok(paddr) => unsafe { paddrp.write(paddr) },
        Err(()) => return false,
    }
    true
}

/// `bool uvm_page_physunload_force(uvm_physseg_t, int freelist, paddr_t
/// *paddrp)`: takes the first available frame wherever it is; `freelist` is
/// ignored, as in NetBSD.
///
/// # Safety
/// `paddrp` is NULL (refused) or points at a writable `paddr_t`.
#[no_mangle]
pub unsafe extern "C" fn uvm_page_physunload_force(
    upm: PhysSegT,
    _freelist: c_int,
    paddrp: *mut u64,
) -> bool {
    let Some(segment) = handle(upm) else {
        return false;
    };
    match unload(paddrp, || PHYSMEM.physunload_force(segment)) {
        // SAFETY: checked not NULL in `unload`; writable per the contract.
        Ok(paddr) => unsafe { paddrp.write(paddr) },
        Err(()) => return false,
    }
    true
}

/// `bool uvm_physseg_set_avail_start(uvm_physseg_t, paddr_t)` (void in
/// NetBSD): refused unless `start <= avail_start <= avail_end`.
#[no_mangle]
pub extern "C" fn uvm_physseg_set_avail_start(upm: PhysSegT, avail_start: u64) -> bool {
    let (Some(segment), Some(info)) = (handle(upm), info(upm)) else {
        return false;
    };
    let avail = PfnRange {
        start: Pfn(avail_start),
        end: info.avail_end,
    };
    PHYSMEM.set_avail(segment, avail).is_ok()
}

/// `bool uvm_physseg_set_avail_end(uvm_physseg_t, paddr_t)` (void in
/// NetBSD): refused unless `avail_start <= avail_end <= end`.
#[no_mangle]
pub extern "C" fn uvm_physseg_set_avail_end(upm: PhysSegT, avail_end: u64) -> bool {
    let (Some(segment), Some(info)) = (handle(upm), info(upm)) else {
        return false;
    };
    let avail = PfnRange {
        start: info.avail_start,
        end: Pfn(avail_end),
    };
    PHYSMEM.set_avail(segment, avail).is_ok()
}

/// `bool hotkern_physseg_init_pages(void)`: page init, once: descriptors
/// for every boot segment, made through `hotkern_physseg_page_init`. True
/// if page init has run (now or before).
#[no_mangle]
pub extern "C" fn hotkern_physseg_init_pages() -> bool {
    if page_init_done() {
        return true;
    }
    match PHYSMEM.init_pages() {
        Ok(()) | Err(PhysmemError::AlreadyInitialized) => {
            PAGE_INIT_DONE.store(true, Ordering::Release);
            true
        }
        Err(_) => false,
    }
}

/// `void uvm_physseg_init_seg(uvm_physseg_t, struct vm_page *pgs)`: runs
/// page init (for all boot segments at once) if it has not run. `pgs` is
/// not used: the descriptors are physmem's.
#[no_mangle]
pub extern "C" fn uvm_physseg_init_seg(_upm: PhysSegT, _pgs: *mut VmPage) {
    hotkern_physseg_init_pages();
}

/// `void uvm_physseg_seg_chomp_slab(uvm_physseg_t, struct vm_page *pgs,
/// size_t n)`: does nothing; physmem allocates its descriptor slabs through
/// `hotkern_physseg_alloc`, so the caller's array stays the caller's.
#[no_mangle]
pub extern "C" fn uvm_physseg_seg_chomp_slab(_upm: PhysSegT, _pgs: *mut VmPage, _n: usize) {}

/// `struct vm_page *uvm_physseg_seg_alloc_from_slab(uvm_physseg_t, size_t
/// pages)`: runs page init if needed and returns the segment's descriptor
/// array, if `pages` is its length; NULL otherwise.
#[no_mangle]
pub extern "C" fn uvm_physseg_seg_alloc_from_slab(upm: PhysSegT, pages: usize) -> *mut VmPage {
    let Some(info) = info(upm) else {
        return ptr::null_mut();
    };
    if info.pages().0 != pages as u64 || !hotkern_physseg_init_pages() {
        return ptr::null_mut();
    }
    uvm_physseg_get_pg(upm, 0)
}

/// `size_t hotkern_physseg_vm_page_size(void)`: bytes of a descriptor in
/// this build (the header's `HOTKERN_VM_PAGE_SIZE` must match).
#[no_mangle]
pub extern "C" fn hotkern_physseg_vm_page_size() -> usize {
    VM_PAGE_SIZE
}

/// `size_t hotkern_physseg_vm_page_align(void)`: a descriptor's alignment.
#[no_mangle]
pub extern "C" fn hotkern_physseg_vm_page_align() -> usize {
    VM_PAGE_ALIGN
}
