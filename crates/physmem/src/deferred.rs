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

/// log2 of the frames whose descriptors are made together: 64 frames
/// (256 KiB of memory, 1 KiB of 16-byte descriptors). A reader that meets
/// a fresh chunk makes it before it goes on, so a chunk is kept small: a
/// few microseconds under QEMU's TCG at most, rather than the tens a
/// 2 MiB chunk (512 descriptors) took in the lookups timed during
/// resizes. A 128 MiB plug then has 512 one-byte states.
pub(crate) const CHUNK_SHIFT: u32 = 6;
/// Frames per chunk.
pub(crate) const CHUNK_FRAMES: u64 = 1 << CHUNK_SHIFT;

const FRESH: u8 = 0;
const BUSY: u8 = 1;
const READY: u8 = 2;

/// Whether physmem may defer the descriptors of `P`.
pub(crate) fn deferrable<P>() -> bool {
    !needs_drop::<P>() && align_of::<P>() >= 2 && size_of::<P>() > 0
}

/// What a published run of a deferred segment holds instead of its
/// descriptor pointer: its plug's states, with the low bit set (neither a
/// `Deferred` nor a deferrable `P` has it set at its address).
pub(crate) fn tag<P>(deferred: *const Deferred) -> *const P {
    deferred.cast::<P>().map_addr(|a| a | 1)
}

/// The states a run's `pages` names, if it carries the mark. Only runs of
/// a deferrable `P` can: a descriptor pointer of an odd-aligned `P` may
/// have its low bit set (the test then folds away).
#[inline]
pub(crate) fn marked<P>(pages: *const P) -> Option<*const Deferred> {
    (deferrable::<P>() && pages.addr() & 1 != 0)
        .then(|| pages.map_addr(|a| a & !1).cast::<Deferred>())
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
    /// The plug's descriptor space: slab and index of `start`'s, and the
    /// descriptor of `start` (a `*mut P`).
    pub(crate) slab: u32,
    pub(crate) first: u64,
    base: *mut (),
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
    /// are `first..` of slab `slab`, from `base` on, fresh; one piece.
    /// Allocation failure is reported, not fatal.
    pub(crate) fn new<P>(
        start: u64,
        end: u64,
        slab: u32,
        first: u64,
        base: *mut P,
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
            base: base.cast(),
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

    /// The descriptor of frame `pfn`, made first (with its whole chunk)
    /// if it was not.
    ///
    /// # Safety
    /// `pfn` is a frame of a live piece of the plug, `P` is the type the
    /// plug's descriptors were allocated for, and the plug's descriptor
    /// space is live: every descriptor of it is either in a `READY` chunk
    /// or not initialised and not referenced.
    #[inline]
    pub(crate) unsafe fn page<P: Page>(&self, pfn: u64) -> *const P {
        let chunk = ((pfn - self.start) >> CHUNK_SHIFT) as usize;
        let state = &self.states[chunk];
        if state.load(Ordering::Acquire) != READY {
            // SAFETY: forwarded contract.
            unsafe { self.make::<P>(chunk) };
        }
        #[cfg(loom)]
        self.cells[chunk].with(|_| ());
        // SAFETY: a frame of the plug: inside its descriptor space.
        unsafe { self.base.cast::<P>().add((pfn - self.start) as usize) }
    }

    #[cold]
    unsafe fn make<P: Page>(&self, chunk: usize) {
        let state = &self.states[chunk];
        match state.compare_exchange(FRESH, BUSY, Ordering::Acquire, Ordering::Acquire) {
            Ok(_) => {
                #[cfg(loom)]
                self.cells[chunk].with_mut(|_| ());
                let first = self.start + ((chunk as u64) << CHUNK_SHIFT);
                let last = (first + CHUNK_FRAMES).min(self.end);
                let base = self.base.cast::<P>();
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

    /// The descriptors of the piece `[run_start, run_end)`, every chunk
    /// of it made first.
    ///
    /// # Safety
    /// As for [`page`](Self::page), for every frame of the piece.
    pub(crate) unsafe fn pages<P: Page>(&self, run_start: u64, run_end: u64) -> *const P {
        let first = (run_start - self.start) >> CHUNK_SHIFT;
        let last = (run_end - 1 - self.start) >> CHUNK_SHIFT;
        for chunk in first..=last {
            let pfn = (self.start + (chunk << CHUNK_SHIFT)).max(run_start);
            // SAFETY: forwarded contract; `pfn`, the chunk's first frame
            // in the piece, is a frame of it.
            unsafe { self.page::<P>(pfn) };
        }
        // SAFETY: as in `page`.
        unsafe { self.page::<P>(run_start) }
    }
}
