//! Deferred descriptor init: a plugged segment's descriptors are made per
//! chunk of [`CHUNK_FRAMES`] frames on first use instead of all at plug
//! time, as Linux's `deferred_init_memmap` makes boot memory's struct
//! pages after boot rather than before.
//!
//! A plug of 128 MiB would otherwise write 32,768 descriptors while the
//! writer lock is held, most of which nothing may look at for a long time;
//! under an emulator (QEMU's TCG runs each guest store as several host
//! instructions) that was most of the plug. The segment is published at
//! once, whole (a lookup finds all of it or none of it, as before); what
//! is deferred is only the writing of each chunk's descriptors, which
//! the first reader to reach the chunk does (or the writer, before it cuts
//! the segment: see `Physmem::remove_range`).
//!
//! Each chunk has a state, `FRESH` → `BUSY` → `READY`. The one that moves
//! it from `FRESH` to `BUSY` (compare-and-swap) writes the descriptors and
//! publishes them by storing `READY` with release ordering; everyone else
//! waits for `READY` (acquire) before handing a descriptor out. Until a
//! chunk is `READY` nobody holds a reference into it, so writing through a
//! raw pointer races with no reader.
//!
//! Only descriptor types without drop glue are deferred: reclaiming a
//! segment then never needs to know which chunks were made. Their
//! alignment must leave the low bit of a descriptor pointer free, because
//! the published run carries the "deferred" mark there (see
//! [`tag`]): a lookup of an eagerly made segment pays one bit test.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::mem::{align_of, needs_drop, size_of};

use crate::error::PhysmemError;
use crate::fallible::try_vec;
use crate::page::Page;
use crate::sync::{AtomicU8, Ordering};
use crate::types::Pfn;

/// log2 of the frames whose descriptors are made together: 2 MiB, the
/// block size of QEMU's virtio-mem on x86-64 and physmem's section size.
pub(crate) const CHUNK_SHIFT: u32 = 9;
/// Frames per chunk.
pub(crate) const CHUNK_FRAMES: u64 = 1 << CHUNK_SHIFT;

const FRESH: u8 = 0;
const BUSY: u8 = 1;
const READY: u8 = 2;

/// Whether physmem may defer the descriptors of `P`.
pub(crate) fn deferrable<P>() -> bool {
    !needs_drop::<P>() && align_of::<P>() >= 2 && size_of::<P>() > 0
}

/// `pages` with the "deferred" mark.
pub(crate) fn tag<P>(pages: *mut P) -> *mut P {
    pages.map_addr(|a| a | 1)
}

/// Whether `pages` carries the mark, and the pointer without it.
#[inline]
pub(crate) fn untag<P>(pages: *const P) -> (bool, *const P) {
    (pages.addr() & 1 != 0, pages.map_addr(|a| a & !1))
}

/// The chunk states of one segment plugged with deferred init. Its
/// first chunk starts at the segment's first frame: the segment is never
/// cut while it has one (the writer makes every chunk first).
pub(crate) struct Deferred {
    states: Box<[AtomicU8]>,
    /// Under loom, init writes a chunk's cell and every hand-out reads it,
    /// so the model reports a descriptor handed out before it was made.
    #[cfg(loom)]
    cells: Box<[loom::cell::UnsafeCell<()>]>,
}

impl Deferred {
    /// All chunks of a segment of `frames` frames fresh; allocation
    /// failure is reported, not fatal.
    pub(crate) fn new(frames: u64) -> Result<Box<Self>, PhysmemError> {
        let chunks = usize::try_from(frames.div_ceil(CHUNK_FRAMES))
            .map_err(|_| PhysmemError::OutOfMemory)?;
        let mut states: Vec<AtomicU8> = try_vec(chunks)?;
        states.extend((0..chunks).map(|_| AtomicU8::new(FRESH)));
        #[cfg(loom)]
        let cells = (0..chunks)
            .map(|_| loom::cell::UnsafeCell::new(()))
            .collect();
        crate::fallible::boxed(Deferred {
            states: states.into_boxed_slice(),
            #[cfg(loom)]
            cells,
        })
    }

    /// Chunks in the segment.
    pub(crate) fn chunks(&self) -> usize {
        self.states.len()
    }

    /// Makes sure the descriptors of chunk `chunk` are initialised: those
    /// of frames `start + chunk * CHUNK_FRAMES ..` up to `end`.
    ///
    /// # Safety
    /// `pages` is the (unmarked) descriptor of `start`, `[start, end)` is
    /// the segment these states were made for, its descriptor space is
    /// live, and every descriptor of it is either in a `READY` chunk or
    /// not initialised and not referenced.
    #[inline]
    pub(crate) unsafe fn ensure<P: Page>(
        &self,
        chunk: usize,
        start: u64,
        end: u64,
        pages: *const P,
    ) {
        let state = &self.states[chunk];
        if state.load(Ordering::Acquire) != READY {
            // SAFETY: forwarded contract.
            unsafe { self.make(chunk, start, end, pages) };
        }
        #[cfg(loom)]
        self.cells[chunk].with(|_| ());
    }

    #[cold]
    unsafe fn make<P: Page>(&self, chunk: usize, start: u64, end: u64, pages: *const P) {
        let state = &self.states[chunk];
        match state.compare_exchange(FRESH, BUSY, Ordering::Acquire, Ordering::Acquire) {
            Ok(_) => {
                #[cfg(loom)]
                self.cells[chunk].with_mut(|_| ());
                let first = start + ((chunk as u64) << CHUNK_SHIFT);
                let last = (first + CHUNK_FRAMES).min(end);
                let pages = pages.cast_mut();
                for pfn in first..last {
                    // SAFETY: in the segment, so in its descriptor space;
                    // this thread alone moved the chunk out of FRESH, so
                    // nobody else writes or references these descriptors.
                    unsafe {
                        pages
                            .add((pfn - start) as usize)
                            .write(P::new(Pfn(pfn).phys_addr()))
                    };
                }
                state.store(READY, Ordering::Release);
            }
            Err(_) => {
                while state.load(Ordering::Acquire) != READY {
                    #[cfg(loom)]
                    loom::thread::yield_now();
                    #[cfg(not(loom))]
                    core::hint::spin_loop();
                }
            }
        }
    }

    /// [`ensure`](Self::ensure) for every chunk.
    ///
    /// # Safety
    /// As for [`ensure`](Self::ensure).
    pub(crate) unsafe fn ensure_all<P: Page>(&self, start: u64, end: u64, pages: *const P) {
        for chunk in 0..self.chunks() {
            // SAFETY: forwarded contract.
            unsafe { self.ensure(chunk, start, end, pages) };
        }
    }
}
