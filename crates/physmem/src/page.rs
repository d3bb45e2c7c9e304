//! The page descriptor: the kernel's own type (`struct vm_page`).

use crate::types::PhysAddr;

/// A page descriptor type chosen by the kernel. physmem creates one per
/// plugged frame, initialised with the frame's physical address, and hands
/// out shared references to it; put per-page mutable state in atomics or
/// locks inside it.
///
/// For a type without drop glue (and aligned to at least 2 bytes), a
/// [`plug`](crate::Physmem::plug) of more than 64 frames defers `new`:
/// the descriptors of each chunk of 64 frames are made when a lookup
/// ([`ReadGuard::page`](crate::ReadGuard::page),
/// [`Segment::pages`](crate::Segment::pages)) first reaches the chunk, on
/// that reader's thread (a chunk's making also covers frames an unplug cut
/// out of it meanwhile). So `new` should be cheap and must not take the
/// physmem's own writer lock.
///
/// ```
/// use core::sync::atomic::AtomicU32;
/// use hotkern_physmem::{Page, PhysAddr};
///
/// struct VmPage {
///     phys_addr: PhysAddr,
///     flags: AtomicU32,
/// }
///
/// impl Page for VmPage {
///     fn new(phys_addr: PhysAddr) -> Self {
///         VmPage { phys_addr, flags: AtomicU32::new(0) }
///     }
/// }
/// # let _ = VmPage::new(PhysAddr(0)).flags;
/// ```
pub trait Page: Send + Sync + Sized {
    /// The descriptor of the frame at `phys_addr`.
    fn new(phys_addr: PhysAddr) -> Self;
}

/// The smallest useful descriptor: just the physical address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BasicPage {
    /// The frame's physical address.
    pub phys_addr: PhysAddr,
}

impl Page for BasicPage {
    fn new(phys_addr: PhysAddr) -> Self {
        BasicPage { phys_addr }
    }
}
