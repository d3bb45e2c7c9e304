//! The owner table's slots, made a chunk at a time as owners come, off
//! the hot-plugged memory: an owner keeps its slot while a shrink moves
//! its frame to another block and unplugs the old one, so the slot must
//! outlive every block.
//!
//! A directory sized for the whole region holds one pointer per chunk of
//! [`CHUNK_SLOTS`] slots (8 bytes per 4096 frames: 32 KiB for 64 GiB);
//! a chunk (64 KiB) is allocated when the free slots run out. Readers
//! find a slot without a lock: the chunk's pointer is stored with release
//! after its slots are made and loaded with acquire, and a chunk lives
//! until the table is dropped, so a reader holding a stale slot index
//! reads a slot, never freed memory. Linux's `struct page` array grows
//! with the memory it describes in the same way (`sparse_add_section`),
//! and is likewise never shrunk under a reader.
//!
//! A free slot holds no frame: its frame word has [`NO_FRAME`] set, and
//! its low 32 bits link the free list, so the list costs no memory of its
//! own.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::fmt;
use core::ptr;

use crate::sync::{AtomicPtr, AtomicU64, Mutex, Ordering};

/// Slots in a chunk: 64 KiB of slots, the heap a 16 MiB region's owners
/// need when every frame is owned.
#[cfg(not(loom))]
pub(super) const CHUNK_SLOTS: usize = 4096;
/// Under loom a chunk is one slot, so that a model of two owners reaches
/// a chunk's publication.
#[cfg(loom)]
pub(super) const CHUNK_SLOTS: usize = 1;

/// Set in a slot's frame word when the slot holds no frame.
pub(super) const NO_FRAME: u64 = 1 << 63;

/// The end of the free list.
const END: u32 = u32::MAX;

/// One slot: a sequence word and the frame (see the module protocol of
/// [`crate::movable`]).
pub(super) struct Entry {
    pub(super) sequence: AtomicU64,
    pub(super) frame: AtomicU64,
}

/// Why an owned frame could not be had.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum AllocError {
    /// No block handed over and not isolated has a free frame (or the
    /// one asked for has none).
    NoFrame,
    /// Every slot is in use and the heap could not hold another chunk of
    /// them: nothing changed.
    NoSlotMemory,
}

impl fmt::Display for AllocError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AllocError::NoFrame => "no free movable frame",
            AllocError::NoSlotMemory => "the heap cannot hold another chunk of owner slots",
        })
    }
}

struct FreeSlots {
    /// The first free slot, or [`END`].
    head: u32,
    /// Slots below this were handed out at least once; the ones above, in
    /// chunks made already, never were (they are on no list).
    fresh: u32,
    /// Chunks made.
    chunks: usize,
}

/// The slots, their chunks and their free list.
pub(super) struct Slots {
    chunk_slots: usize,
    directory: Box<[AtomicPtr<Entry>]>,
    free: Mutex<FreeSlots>,
}

impl Slots {
    /// A table for up to `frames` owners, no chunk made yet; `None` if the
    /// heap cannot hold the directory or the slots overflow a `u32` (the
    /// reverse map's word, which holds a slot plus one).
    pub(super) fn new(frames: usize) -> Option<Self> {
        // A region smaller than a chunk gets one chunk its size.
        let chunk_slots = CHUNK_SLOTS.min(frames.max(1));
        let chunks = frames.div_ceil(chunk_slots);
        if chunks.checked_mul(chunk_slots)? >= END as usize {
            return None;
        }
        let mut directory = Vec::new();
        directory.try_reserve_exact(chunks).ok()?;
        directory.extend((0..chunks).map(|_| AtomicPtr::new(ptr::null_mut())));
        Some(Slots {
            chunk_slots,
            directory: directory.into_boxed_slice(),
            free: Mutex::new(FreeSlots {
                head: END,
                fresh: 0,
                chunks: 0,
            }),
        })
    }

    /// Slot `index`, if its chunk is made: no lock, as a reader needs.
    pub(super) fn entry(&self, index: u32) -> Option<&Entry> {
        let index = index as usize;
        let chunk = self
            .directory
            .get(index / self.chunk_slots)?
            // Pairs with the release store in `grow`: the slots are made.
            .load(Ordering::Acquire);
        if chunk.is_null() {
            return None;
        }
        // SAFETY: a non-null pointer is a chunk of `chunk_slots` slots,
        // made in `grow` and freed only in `drop`, which `&self` excludes.
        Some(unsafe { &*chunk.add(index % self.chunk_slots) })
    }

    /// Takes a free slot for the frame `pick` hands out (given the slot,
    /// so it can write the frame's owner word), making a chunk if every
    /// slot is in use. A chunk that cannot be made changes nothing; if
    /// `pick` finds no frame, the slot stays free (in a chunk made for
    /// it, if one was).
    pub(super) fn claim(
        &self,
        pick: impl FnOnce(u32) -> Option<u64>,
    ) -> Result<(u32, &Entry), AllocError> {
        let mut free = self.free.lock();
        let slot = match free.head {
            END => {
                if free.fresh as usize == free.chunks * self.chunk_slots {
                    self.grow(&mut free)?;
                }
                free.fresh
            }
            head => head,
        };
        let entry = self.entry(slot).ok_or(AllocError::NoSlotMemory)?;
        let frame = pick(slot).ok_or(AllocError::NoFrame)?;
        if slot == free.head {
            // The link a free slot keeps in its frame word.
            free.head = entry.frame.load(Ordering::Relaxed) as u32;
        } else {
            free.fresh += 1;
        }
        entry.frame.store(frame, Ordering::Relaxed);
        Ok((slot, entry))
    }

    /// Makes the next chunk and publishes it; an error changes nothing.
    fn grow(&self, free: &mut FreeSlots) -> Result<(), AllocError> {
        let pointer = self
            .directory
            .get(free.chunks)
            .ok_or(AllocError::NoSlotMemory)?;
        let mut chunk = Vec::new();
        chunk
            .try_reserve_exact(self.chunk_slots)
            .map_err(|_| AllocError::NoSlotMemory)?;
        chunk.extend((0..self.chunk_slots).map(|_| Entry {
            sequence: AtomicU64::new(0),
            frame: AtomicU64::new(NO_FRAME | u64::from(END)),
        }));
        let chunk = Box::into_raw(chunk.into_boxed_slice()).cast::<Entry>();
        // Release: a reader that loads the pointer sees the slots made.
        pointer.store(chunk, Ordering::Release);
        free.chunks += 1;
        Ok(())
    }

    /// Puts `slot` (whose frame the caller freed, holding its sequence) on
    /// the free list.
    pub(super) fn release(&self, slot: u32, entry: &Entry) {
        let mut free = self.free.lock();
        entry
            .frame
            .store(NO_FRAME | u64::from(free.head), Ordering::Relaxed);
        free.head = slot;
    }

    /// Heap bytes: the directory and the chunks made.
    pub(super) fn heap_bytes(&self) -> u64 {
        let chunks = self.free.lock().chunks;
        let chunk_bytes = self.chunk_slots * core::mem::size_of::<Entry>();
        (self.directory.len() * core::mem::size_of::<usize>() + chunks * chunk_bytes) as u64
    }
}

impl Drop for Slots {
    fn drop(&mut self) {
        for pointer in self.directory.iter() {
            let chunk = pointer.load(Ordering::Acquire);
            if !chunk.is_null() {
                // SAFETY: made in `grow` as a boxed slice of `chunk_slots`
                // slots; no reader is left (`&mut self`).
                drop(unsafe {
                    Box::from_raw(ptr::slice_from_raw_parts_mut(chunk, self.chunk_slots))
                });
            }
        }
    }
}
