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
//! the first reader to reach the chunk does.
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
use core::cell::Cell;
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

/// The chunk states of one plugged segment with deferred init, shared by
/// the segments unplugs cut from it (as NetBSD's split segments share
/// their `pgs` slab). Chunks count from the plug's first frame, and a
/// chunk's making covers all of it that the plug had, cut away or not:
/// the descriptor space of the whole plug stays allocated until its last
/// piece is unplugged, so that making a chunk never writes space that was
/// given back, and cutting a segment needs no chunk made (a writer never
/// waits for a reader that is making one).
pub(crate) struct Deferred {
    /// The plug's frames.
    pub(crate) start: u64,
    pub(crate) end: u64,
    /// The plug's descriptor space: slab and index of `start`'s.
    pub(crate) slab: u32,
    pub(crate) first: u64,
    /// Live segments cut from the plug; only the writer, under its lock,
    /// reads or changes it.
    pieces: Cell<u32>,
    states: Box<[AtomicU8]>,
    /// Under loom, init writes a chunk's cell and every hand-out reads it,
    /// so the model reports a descriptor handed out before it was made.
    #[cfg(loom)]
    cells: Box<[loom::cell::UnsafeCell<()>]>,
}

impl Deferred {
    /// All chunks of the plug of frames `[start, end)`, whose descriptors
    /// are `first..` of slab `slab`, fresh; one piece. Allocation failure
    /// is reported, not fatal.
    pub(crate) fn new(
        start: u64,
        end: u64,
        slab: u32,
        first: u64,
    ) -> Result<Box<Self>, PhysmemError> {
        let chunks = usize::try_from((end - start).div_ceil(CHUNK_FRAMES))
            .map_err(|_| PhysmemError::OutOfMemory)?;
        let mut states: Vec<AtomicU8> = try_vec(chunks)?;
        states.extend((0..chunks).map(|_| AtomicU8::new(FRESH)));
        #[cfg(loom)]
        let cells = (0..chunks)
            .map(|_| loom::cell::UnsafeCell::new(()))
            .collect();
        crate::fallible::boxed(Deferred {
            start,
            end,
            slab,
            first,
            pieces: Cell::new(1),
            states: states.into_boxed_slice(),
            #[cfg(loom)]
            cells,
        })
    }

    /// Live pieces of the plug (writer only).
    pub(crate) fn pieces(&self) -> u32 {
        self.pieces.get()
    }

    /// Records that a split made one piece more or an unplug took one away
    /// (writer only).
    pub(crate) fn set_pieces(&self, pieces: u32) {
        self.pieces.set(pieces);
    }

    /// Makes sure the descriptor of frame `pfn` is made: the whole chunk
    /// holding it.
    ///
    /// # Safety
    /// `pfn` is a frame of a live piece of the plug whose first frame is
    /// `run_start`, with descriptor `run_pages` (unmarked); the plug's
    /// descriptor space is live, and every descriptor of it is either in a
    /// `READY` chunk or not initialised and not referenced.
    #[inline]
    pub(crate) unsafe fn ensure<P: Page>(&self, pfn: u64, run_start: u64, run_pages: *const P) {
        let chunk = ((pfn - self.start) >> CHUNK_SHIFT) as usize;
        let state = &self.states[chunk];
        if state.load(Ordering::Acquire) != READY {
            // The plug's first descriptor: the same allocation as the
            // run's, `run_start - start` descriptors before it.
            let base = run_pages.wrapping_sub((run_start - self.start) as usize);
            // SAFETY: forwarded contract.
            unsafe { self.make(chunk, base) };
        }
        #[cfg(loom)]
        self.cells[chunk].with(|_| ());
    }

    #[cold]
    unsafe fn make<P: Page>(&self, chunk: usize, base: *const P) {
        let state = &self.states[chunk];
        match state.compare_exchange(FRESH, BUSY, Ordering::Acquire, Ordering::Acquire) {
            Ok(_) => {
                #[cfg(loom)]
                self.cells[chunk].with_mut(|_| ());
                let first = self.start + ((chunk as u64) << CHUNK_SHIFT);
                let last = (first + CHUNK_FRAMES).min(self.end);
                let base = base.cast_mut();
                for pfn in first..last {
                    // SAFETY: a frame of the plug, so in its descriptor
                    // space, which stays allocated while any piece lives;
                    // this thread alone moved the chunk out of FRESH, so
                    // nobody else writes or references these descriptors.
                    unsafe {
                        base.add((pfn - self.start) as usize)
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

    /// [`ensure`](Self::ensure) for every frame of the piece
    /// `[run_start, run_end)`.
    ///
    /// # Safety
    /// As for [`ensure`](Self::ensure), for every frame of the piece.
    pub(crate) unsafe fn ensure_piece<P: Page>(
        &self,
        run_start: u64,
        run_end: u64,
        run_pages: *const P,
    ) {
        let mut pfn = run_start;
        while pfn < run_end {
            // SAFETY: forwarded contract.
            unsafe { self.ensure(pfn, run_start, run_pages) };
            // The next chunk's first frame.
            pfn = self.start + ((((pfn - self.start) >> CHUNK_SHIFT) + 1) << CHUNK_SHIFT);
        }
    }
}
