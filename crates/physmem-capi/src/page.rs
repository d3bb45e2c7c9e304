//! [`VmPage`]: storage for the C side's `struct vm_page`.

use core::cell::UnsafeCell;
use core::mem::MaybeUninit;

use hotkern_physmem::{Page, PhysAddr};

use crate::runtime;

/// Bytes of a page descriptor, fixed when the library is built. The header's
/// `HOTKERN_VM_PAGE_SIZE` must equal it (`hotkern_physseg_vm_page_size()`
/// lets C check), and C's `struct vm_page` must fit in it
/// (`HOTKERN_VM_PAGE_FITS`).
pub const VM_PAGE_SIZE: usize = 128;

/// Alignment of a page descriptor; the header's `HOTKERN_VM_PAGE_ALIGN`.
pub const VM_PAGE_ALIGN: usize = 16;

/// One page descriptor: opaque, aligned bytes that C reads and writes as its
/// `struct vm_page`.
///
/// The bytes sit in an `UnsafeCell`: physmem hands out shared references,
/// and C writes through the pointer `uvm_physseg_get_pg` gives. Which
/// fields C changes, and how it synchronises them, is C's business, as in
/// NetBSD.
#[repr(C, align(16))]
pub struct VmPage(UnsafeCell<[MaybeUninit<u8>; VM_PAGE_SIZE]>);

const _: () = assert!(core::mem::size_of::<VmPage>() == VM_PAGE_SIZE);
const _: () = assert!(core::mem::align_of::<VmPage>() == VM_PAGE_ALIGN);

// SAFETY: physmem only moves descriptors and hands out their addresses; all
// reads and writes of the bytes are C's, which does its own locking (NetBSD's
// `uvm_pageqlock` and friends).
unsafe impl Sync for VmPage {}

impl Page for VmPage {
    fn new(phys_addr: PhysAddr) -> Self {
        let page = VmPage(UnsafeCell::new([MaybeUninit::new(0); VM_PAGE_SIZE]));
        runtime::page_init(page.0.get().cast(), phys_addr.0);
        page
    }
}
