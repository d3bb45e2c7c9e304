//! The kernel's page frames, one definition for every architecture: the
//! page descriptor physmem keeps per frame, the physmem instance, and the
//! layout an architecture's `memory::bring_up` reports.

use core::sync::atomic::AtomicU32;

use hotkern_physmem::{Page, Pfn, PhysAddr, Physmem};

use crate::arch::ranges::{FrameRanges, PAGE_SIZE};

/// The kernel's page descriptor (NetBSD's `struct vm_page`): physmem makes
/// one per frame, in the heap. Eight bytes: its frame number in 32 bits
/// (the kernel takes no RAM at or above [`FRAME_LIMIT`]) beside its flags.
/// Half of a 64-bit address's sixteen, it halves what a plug's deferred
/// descriptor making writes, which under TCG is most of what a lookup
/// that reaches a fresh chunk pays.
pub struct KernelPage {
    frame: u32,
    /// Per-page state; the self test marks the frames it touched.
    pub flags: AtomicU32,
}

/// The first frame a [`KernelPage`] cannot name: 16 TiB.
pub const FRAME_LIMIT: u64 = 1 << 32;

impl KernelPage {
    /// The frame's physical address.
    pub fn phys_addr(&self) -> PhysAddr {
        Pfn(u64::from(self.frame)).phys_addr()
    }
}

impl Page for KernelPage {
    fn new(phys_addr: PhysAddr) -> Self {
        KernelPage {
            // Below FRAME_LIMIT: `ram_frames` leaves RAM above it out, and
            // virtio-mem's region must end below 512 GiB.
            frame: (phys_addr.0 / PAGE_SIZE) as u32,
            flags: AtomicU32::new(0),
        }
    }
}

/// Every page frame the kernel manages.
pub static PHYSMEM: Physmem<KernelPage> = Physmem::new();

/// What the bring-up did, for the checks and the summary.
pub struct Layout {
    /// Every whole frame of RAM in the boot information's map.
    pub ram: FrameRanges,
    /// What went to `physload`: RAM less the first MiB and the kernel.
    pub loaded: FrameRanges,
    /// What physmem holds after the heap was taken: `loaded` less the heap.
    pub managed: FrameRanges,
    /// The kernel image, in frames.
    pub kernel: (u64, u64),
    /// The heap, in frames.
    pub heap: (u64, u64),
    /// Microseconds spent in `physload`, stealing the heap, `init_pages`.
    pub micros: [Option<u64>; 3],
}
