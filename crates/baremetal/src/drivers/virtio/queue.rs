//! One split virtqueue (virtio 1.2, 2.7; the legacy interface's is the
//! same ring), polled, one request in flight: what both transports drive,
//! the legacy one for virtio-blk and the modern one for virtio-mem.
//!
//! The rings live in one zeroed, page-aligned heap allocation. The kernel's
//! identity map makes a heap address its physical address, so the device
//! is given the allocation's addresses as they are. Where the used ring
//! sits is the transport's to say ([`RingLayout`]): the legacy interface
//! fixes it on a page boundary after the available ring, the modern one
//! takes any address, so there the whole queue (and the buffers a
//! transport keeps beside it) fits in one page.
//!
//! Who writes what: the driver writes descriptors and the available ring,
//! the device the used ring. The driver publishes a request's descriptors
//! before the available index that names them, and reads the used index
//! before what the device wrote (the fences below name their partner: the
//! device's reads and writes of the rings).

use alloc::alloc::{alloc_zeroed, dealloc, Layout};
use core::ptr::{read_volatile, write_volatile};
use core::sync::atomic::{fence, Ordering};

use crate::arch::clock;

/// A descriptor's flags (virtio 1.2, 2.7.5).
pub const DESCRIPTOR_NEXT: u16 = 1;
/// The device writes the buffer (else it reads it).
pub const DESCRIPTOR_WRITE: u16 = 2;

/// VIRTQ_AVAIL_F_NO_INTERRUPT: the driver polls the used ring.
const AVAIL_NO_INTERRUPT: u16 = 1;

const PAGE: usize = 4096;

/// One entry of the descriptor table.
#[repr(C)]
pub struct Descriptor {
    /// The buffer's physical address.
    pub address: u64,
    /// Its length in bytes.
    pub len: u32,
    /// [`DESCRIPTOR_NEXT`], [`DESCRIPTOR_WRITE`].
    pub flags: u16,
    /// The next descriptor of the chain, with [`DESCRIPTOR_NEXT`].
    pub next: u16,
}

/// Where the used ring goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RingLayout {
    /// The legacy interface's: descriptors and the available ring padded
    /// to a page, then the used ring, so the device finds all three from
    /// one page number.
    Legacy,
    /// Right after the available ring, in one page with the rest.
    Compact,
}

/// A split virtqueue in its own heap allocation.
pub struct SplitQueue {
    ring: *mut u8,
    layout: Layout,
    size: u16,
    avail: usize,
    used: usize,
    last_used: u16,
}

// SAFETY: the ring is owned by this value, and the device is driven from
// one CPU at a time (whoever holds the queue's driver).
unsafe impl Send for SplitQueue {}

impl SplitQueue {
    /// A zeroed queue of `size` entries laid out as `layout` says; `None`
    /// if the heap cannot hold it.
    pub fn new(size: u16, layout: RingLayout) -> Option<SplitQueue> {
        let n = usize::from(size);
        let avail = 16 * n;
        let (used, total) = match layout {
            RingLayout::Legacy => {
                let used = (avail + 2 * (3 + n)).next_multiple_of(PAGE);
                (used, used + (6 + 8 * n).next_multiple_of(PAGE))
            }
            RingLayout::Compact => ((avail + 6 + 2 * n).next_multiple_of(4), PAGE),
        };
        let layout = Layout::from_size_align(total, PAGE).ok()?;
        // SAFETY: a non-zero size and a power-of-two alignment.
        let ring = unsafe { alloc_zeroed(layout) };
        if ring.is_null() {
            return None;
        }
        Some(SplitQueue {
            ring,
            layout,
            size,
            avail,
            used,
            last_used: 0,
        })
    }

    /// Entries in the queue.
    pub fn size(&self) -> u16 {
        self.size
    }

    /// The descriptor table's physical address (the whole queue's, for
    /// the legacy interface).
    pub fn address(&self) -> u64 {
        self.ring as u64
    }

    /// The available ring's physical address.
    pub fn avail_address(&self) -> u64 {
        self.ring as u64 + self.avail as u64
    }

    /// The used ring's physical address.
    pub fn used_address(&self) -> u64 {
        self.ring as u64 + self.used as u64
    }

    /// `len` bytes of the allocation from `offset` on, past the rings, for
    /// a transport's own buffers; `None` if they do not fit.
    pub fn spare(&self, offset: usize, len: usize) -> Option<*mut u8> {
        let rings_end = self.used + 6 + 8 * usize::from(self.size);
        (offset >= rings_end && offset + len <= self.layout.size())
            // SAFETY: inside the allocation, checked just above.
            .then(|| unsafe { self.ring.add(offset) })
    }

    /// Asks the device for no interrupt on completions (virtio 1.2, 2.7.7):
    /// the driver polls.
    pub fn suppress_interrupts(&mut self) {
        // SAFETY: the available ring's flags, inside the allocation.
        unsafe { write_volatile(self.ring.add(self.avail) as *mut u16, AVAIL_NO_INTERRUPT) };
    }

    /// Writes descriptor `index` (below [`SplitQueue::size`]).
    pub fn set(&mut self, index: u16, descriptor: Descriptor) {
        assert!(index < self.size, "descriptor {index} outside the queue");
        // SAFETY: inside the descriptor table; the device reads it only
        // after `publish` names it.
        unsafe {
            write_volatile(
                (self.ring as *mut Descriptor).add(usize::from(index)),
                descriptor,
            )
        };
    }

    /// Publishes the chain that starts at descriptor 0 in the available
    /// ring; the caller then notifies the device.
    pub fn publish(&mut self) {
        let base = self.ring as usize + self.avail;
        // SAFETY: the available ring's index and slots, inside the
        // allocation; only the driver writes them.
        unsafe {
            let index = read_volatile((base + 2) as *const u16);
            let slot = base + 4 + 2 * usize::from(index % self.size);
            write_volatile(slot as *mut u16, 0);
            // Release: the descriptors and the slot before the index that
            // publishes them (the device reads them after the index).
            fence(Ordering::SeqCst);
            write_volatile((base + 2) as *mut u16, index.wrapping_add(1));
            fence(Ordering::SeqCst);
        }
    }

    /// Spins until the device uses the published chain, or the TSC passes
    /// `deadline_ns`; returns the bytes the device says it wrote, `None`
    /// on the deadline (the request stays the device's).
    pub fn wait_used(&mut self, deadline_ns: u64) -> Option<u32> {
        let base = self.ring as usize + self.used;
        // SAFETY: the used ring's index and elements, inside the
        // allocation; the device writes them, the driver only reads.
        unsafe {
            while read_volatile((base + 2) as *const u16) == self.last_used {
                if clock::nanos() > deadline_ns {
                    return None;
                }
                core::hint::spin_loop();
            }
            // Acquire: the device writes the buffers before the used index.
            fence(Ordering::SeqCst);
            let element = base + 4 + 8 * usize::from(self.last_used % self.size);
            let written = read_volatile((element + 4) as *const u32);
            self.last_used = self.last_used.wrapping_add(1);
            Some(written)
        }
    }
}

impl Drop for SplitQueue {
    /// The owner resets the device first, which stops it using the rings.
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout.
        unsafe { dealloc(self.ring, self.layout) };
    }
}
