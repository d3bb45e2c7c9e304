//! NetBSD's two designs, as the uvm_hotplug paper (Raju and Mathew, 2017)
//! describes them: the static `vm_physmem[VM_PHYSSEG_MAX]` array and the
//! `rbtree(3)` of `uvm_hotplug(9)` / `uvm_physseg` that replaced it. Kept
//! as baselines behind [`PhysSegments`](crate::PhysSegments) so that
//! benchmarks compare old and new in one run.
//!
//! Both allocate page descriptors on plug (one slab per plug, shared by the
//! halves of a split) so that plug costs compare fairly; they validate inputs
//! as hotkern does, so that all three can be checked against one model.
//! Neither is safe to read while another thread writes: NetBSD has no
//! locking there.

mod rbtree;
mod static_array;

pub use rbtree::{RbTreeHandle, RbTreeSegments};
pub use static_array::StaticSegments;

use alloc::rc::Rc;
use alloc::vec::Vec;

use crate::error::PhysmemError;
use crate::page::Page;
use crate::types::{PageCount, Pfn, PFN_LIMIT};

/// A descriptor slab shared by the segments carved from it.
pub(crate) type Descriptors<P> = Rc<[P]>;

pub(crate) fn descriptors<P: Page>(pfn: Pfn, npages: u64) -> Descriptors<P> {
    (0..npages)
        .map(|i| P::new(Pfn(pfn.0 + i).phys_addr()))
        .collect::<Vec<P>>()
        .into()
}

pub(crate) fn checked_range(pfn: Pfn, npages: PageCount) -> Result<u64, PhysmemError> {
    if npages.0 == 0 {
        return Err(PhysmemError::ZeroPages);
    }
    match pfn.0.checked_add(npages.0) {
        Some(end) if end <= PFN_LIMIT => Ok(end),
        _ => Err(PhysmemError::InvalidRange {
            start: pfn,
            end: Pfn(pfn.0.saturating_add(npages.0)),
        }),
    }
}
