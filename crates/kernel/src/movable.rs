//! Movable frames and their owners: the reverse map a shrink needs to move
//! a frame that is in use, and the switch that makes the move invisible.
//!
//! # Design: an owner table of slots, read through
//!
//! An owner never holds a frame number. It holds a [`Slot`] handle, and
//! the slot holds the frame, as a page-table entry does for a task in
//! Linux: the task reaches its page only through the entry, so the kernel
//! can point the entry at a copy (mm/migrate.c's `remove_migration_ptes`).
//! The *reverse map* — frame to slot, a `u32` per frame — is what Linux
//! finds through `page->mapping` and the rmap walk: given a used frame in
//! a block being emptied, the slot to switch. Linux keeps that owner in
//! the frame's `struct page`, which with `memmap_on_memory` is on the
//! hot-plugged memory itself; here likewise the owner words are the
//! block allocator's ([`BlockFrames::map_words`]): in the memory each
//! block brings for an allocator made
//! [`BlockFrames::with_maps_on_blocks`], else on the heap for the whole
//! region. Writing one is part of handing the frame out, under the
//! allocator's lock.
//!
//! The slots themselves are on the heap, made a chunk of 4096 at a time
//! as owners come (`slots.rs`): a slot must outlive the block its frame
//! was in, and a region of 64 GiB that no one owns costs a directory of
//! 32 KiB, not a table of 28 bytes a frame.
//!
//! A callback design (a `FrameOwner` trait whose `relocate(old, new)` the
//! kernel calls) was the other choice. It was not taken because the
//! kernel would call into owner code while a block is isolated and under
//! its own locks, with one trait object per frame to keep alive; an owner
//! that does its own locking inside `relocate` can deadlock with the
//! shrink. A slot is a word the kernel owns: switching it needs no owner
//! code, and the protocol below is the whole contract.
//!
//! # Protocol: a sequence word per slot
//!
//! Each slot has a `sequence` (even = stable, odd = someone is writing)
//! and a `frame`. Writers — the owner writing its data, the shrink moving
//! it, the owner freeing it — are exclusive: each takes the slot by moving
//! the sequence from even to odd with a compare-exchange (acquire: it sees
//! the last writer's data), then a release fence (*W*), then writes, then
//! stores the sequence + 2 with release (*U*). The shrink's write is:
//! copy the old frame to the new, store the new frame number, unlock —
//! Linux's migration entry, which makes a faulting task wait, is the odd
//! sequence here.
//!
//! Readers never write: load the sequence with acquire (pairs with *U*:
//! a reader that sees the unlocked value sees the frame number and data
//! written before it), retry while odd, load the frame, read the data,
//! fence acquire (*R*), reload the sequence; retry if it moved. *R* pairs
//! with *W*: if a read saw any data written after a writer's *W* — the
//! shrink's copy, or a later owner of the old frame writing through its
//! own slot — the reload sees at least that writer's odd value, so a
//! reader never keeps a torn or stale frame. Data words are atomics
//! (relaxed) in [`Arena`], so an optimistic read racing a write is not a
//! data race.
//!
//! Lock order: a slot, then the free slots' lock, then the block
//! allocator's (the reverse map). The shrink never waits for a slot while
//! it holds a lock: it reads the owner word, lets the allocator's lock
//! go, then tries the slot once and backs off.
//!
//! ```
//! use hotkern_kernel::movable::{Arena, FrameMemory, MovableFrames};
//! use hotkern_physmem::Pfn;
//!
//! let frames = MovableFrames::new(Pfn(0), 2, 4)?;
//! let memory = Arena::new(Pfn(0), 8, 2);
//! assert!(frames.blocks().add_blocks(0, 2));
//! let slot = frames.alloc().unwrap();
//! assert!(frames.write(slot, &memory, &[7, 7]));
//! let mut seen = [0; 2];
//! frames.read(slot, &memory, &mut seen);
//! assert_eq!(seen, [7, 7]);
//! assert_eq!(frames.owner_of(frames.frame_of(slot).unwrap()), Some(slot));
//! assert!(frames.free(slot));
//! # Ok::<(), hotkern_kernel::blockframes::RegionError>(())
//! ```

use hotkern_physmem::Pfn;

use crate::blockframes::{BlockFrames, Mobility, RegionError};
use crate::sync::{fence, spin_wait, Ordering};

mod arena;
mod slots;

pub use arena::Arena;
pub use slots::AllocError;
use slots::{Entry, Slots, NO_FRAME};

/// The physical memory under the frames: on the machine and in tests a
/// heap arena ([`Arena`]); on x86-64 it would be the direct map.
pub trait FrameMemory {
    /// 64-bit words in a frame.
    fn words(&self) -> usize;
    /// A word of a frame (relaxed: readers check a sequence around it).
    fn load(&self, frame: Pfn, word: usize) -> u64;
    /// Writes a word of a frame.
    fn store(&self, frame: Pfn, word: usize, value: u64);
    /// Copies a frame whole; an error (an uncorrectable read, say) leaves
    /// `to` unspecified and `from` as it was.
    fn copy(&self, from: Pfn, to: Pfn) -> Result<(), CopyFault>;
}

/// A frame copy failed: the source could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyFault;

/// An owner's handle on one movable frame: an index in the owner table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Slot(u32);

impl Slot {
    /// The slot's index in the owner table, to publish it in a word
    /// other CPUs read.
    ///
    /// ```
    /// use hotkern_kernel::movable::{MovableFrames, Slot};
    /// use hotkern_physmem::Pfn;
    ///
    /// let frames = MovableFrames::new(Pfn(0), 1, 4)?;
    /// assert!(frames.blocks().add_blocks(0, 1));
    /// let slot = frames.alloc().unwrap();
    /// assert_eq!(Slot::from_index(slot.index()), slot);
    /// # Ok::<(), hotkern_kernel::blockframes::RegionError>(())
    /// ```
    pub fn index(self) -> u32 {
        self.0
    }

    /// The slot with index `index`, as [`Slot::index`] gave it. Reading
    /// through a slot that is not the caller's is safe (it sees that
    /// owner's data or no frame); an index past the table holds none.
    pub fn from_index(index: u32) -> Slot {
        Slot(index)
    }
}

/// The frame a slot's frame word holds, if any.
fn held(word: u64) -> Option<Pfn> {
    (word & NO_FRAME == 0).then_some(Pfn(word))
}

/// What [`MovableFrames::try_move`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Move {
    /// Copied and switched; the old frame is free.
    Moved,
    /// No owner any more: freed while the shrink looked.
    Gone,
    /// The owner is writing: try again after a back-off.
    Busy,
    /// In use with no owner to switch.
    Unowned,
    /// The copy failed; nothing changed.
    Fault,
}

/// A block allocator whose movable frames have owners: [`BlockFrames`]
/// with its reverse map, and the owner slots.
pub struct MovableFrames {
    blocks: BlockFrames,
    slots: Slots,
}

impl MovableFrames {
    /// Over `blocks` blocks of `block_frames` frames from `first`, the
    /// reverse map on the heap ([`BlockFrames::new`]).
    pub fn new(first: Pfn, blocks: usize, block_frames: u64) -> Result<Self, RegionError> {
        Self::over(BlockFrames::new(first, blocks, block_frames)?)
    }

    /// Over a block allocator the caller made, e.g. one whose bitmaps and
    /// reverse map come with each block
    /// ([`BlockFrames::with_maps_on_blocks`]). Only the slots' directory
    /// is allocated now, a pointer per 4096 frames; owned frames may come
    /// from every block.
    ///
    /// ```
    /// use hotkern_kernel::blockframes::BlockFrames;
    /// use hotkern_kernel::movable::MovableFrames;
    /// use hotkern_physmem::Pfn;
    ///
    /// let blocks = BlockFrames::with_maps_on_blocks(Pfn(0), 64, 512)?;
    /// let frames = MovableFrames::over(blocks)?;
    /// assert_eq!(frames.owner_table_bytes(), 8 * 8, "a pointer per 4096 frames");
    /// # Ok::<(), hotkern_kernel::blockframes::RegionError>(())
    /// ```
    pub fn over(inner: BlockFrames) -> Result<Self, RegionError> {
        let (blocks, block_frames) = inner.shape();
        let frames = (blocks as u64)
            .checked_mul(block_frames)
            .filter(|&frames| frames < u64::from(u32::MAX))
            .ok_or(RegionError::TooLarge)? as usize;
        let slots = Slots::new(frames).ok_or(RegionError::OutOfMemory)?;
        Ok(MovableFrames {
            blocks: inner,
            slots,
        })
    }

    /// Heap bytes the owner table holds: the slots' directory and the
    /// chunks of slots made so far (16 bytes a slot, 4096 a chunk), and
    /// the reverse map if it is on the heap (4 bytes a frame of the
    /// region, [`BlockFrames::owner_heap_bytes`]; the bitmaps are
    /// [`BlockFrames::heap_bytes`]).
    ///
    /// ```
    /// use hotkern_kernel::movable::MovableFrames;
    /// use hotkern_physmem::Pfn;
    ///
    /// let frames = MovableFrames::new(Pfn(0), 4, 2048)?;
    /// let reverse_map = 4 * 2048 * 4;
    /// assert_eq!(frames.owner_table_bytes(), 2 * 8 + reverse_map);
    /// assert!(frames.blocks().add_blocks(0, 4));
    /// frames.alloc().unwrap();
    /// assert_eq!(frames.owner_table_bytes(), 2 * 8 + 4096 * 16 + reverse_map, "a chunk");
    /// # Ok::<(), hotkern_kernel::blockframes::RegionError>(())
    /// ```
    pub fn owner_table_bytes(&self) -> u64 {
        self.slots.heap_bytes() + self.blocks.owner_heap_bytes()
    }

    /// The block allocator underneath: hand blocks over, allocate
    /// unmovable frames, read counts.
    pub fn blocks(&self) -> &BlockFrames {
        &self.blocks
    }

    /// A movable frame with a new owner slot, or `None` if no block that
    /// is handed over and not isolated has a free frame, or no slot can
    /// be had ([`MovableFrames::try_alloc`] says which).
    pub fn alloc(&self) -> Option<Slot> {
        self.try_alloc().ok()
    }

    /// [`MovableFrames::alloc`], with why not.
    ///
    /// ```
    /// use hotkern_kernel::movable::{AllocError, MovableFrames};
    /// use hotkern_physmem::Pfn;
    ///
    /// let frames = MovableFrames::new(Pfn(0), 2, 1)?;
    /// assert_eq!(frames.try_alloc(), Err(AllocError::NoFrame), "nothing handed over");
    /// assert!(frames.blocks().add_blocks(1, 1));
    /// let slot = frames.try_alloc().unwrap();
    /// assert_eq!(frames.frame_of(slot), Some(Pfn(1)));
    /// # Ok::<(), hotkern_kernel::blockframes::RegionError>(())
    /// ```
    pub fn try_alloc(&self) -> Result<Slot, AllocError> {
        self.claim(None)
    }

    /// A movable frame of block `block` with a new owner slot, or `None`
    /// if that block is not handed over, is isolated or is full, or no
    /// slot can be had.
    ///
    /// ```
    /// use hotkern_kernel::movable::MovableFrames;
    /// use hotkern_physmem::Pfn;
    ///
    /// let frames = MovableFrames::new(Pfn(0), 2, 4)?;
    /// assert!(frames.blocks().add_blocks(0, 2));
    /// let slot = frames.alloc_in(1).unwrap();
    /// assert_eq!(frames.frame_of(slot), Some(Pfn(4)));
    /// assert_eq!(frames.owner_of(Pfn(4)), Some(slot));
    /// # Ok::<(), hotkern_kernel::blockframes::RegionError>(())
    /// ```
    pub fn alloc_in(&self, block: usize) -> Option<Slot> {
        self.try_alloc_in(block).ok()
    }

    /// [`MovableFrames::alloc_in`], with why not.
    pub fn try_alloc_in(&self, block: usize) -> Result<Slot, AllocError> {
        self.claim(Some(block))
    }

    /// A slot and a frame (of `block`, or of the first block with one)
    /// whose owner word names it, written as the frame is taken.
    fn claim(&self, block: Option<usize>) -> Result<Slot, AllocError> {
        let (slot, _) = self
            .slots
            .claim(|slot| self.blocks.alloc_owned(block, slot).map(|frame| frame.0))?;
        Ok(Slot(slot))
    }

    /// Frees the slot's frame and the slot; false if the slot holds none.
    pub fn free(&self, slot: Slot) -> bool {
        let Some(entry) = self.slots.entry(slot.0) else {
            return false;
        };
        let sequence = self.lock_slot(entry);
        let freed = held(entry.frame.load(Ordering::Relaxed)).is_some_and(|frame| {
            // Clears the frame's owner word with its free bit.
            let freed = self.blocks.free(frame);
            self.slots.release(slot.0, entry);
            freed
        });
        entry.sequence.store(sequence + 2, Ordering::Release);
        freed
    }

    /// The frame a slot holds now (it may move at any time after).
    pub fn frame_of(&self, slot: Slot) -> Option<Pfn> {
        held(self.slots.entry(slot.0)?.frame.load(Ordering::Acquire))
    }

    /// The reverse map: the slot owning `frame`, if it is a movable frame
    /// with an owner.
    pub fn owner_of(&self, frame: Pfn) -> Option<Slot> {
        self.blocks.owner(frame).map(Slot)
    }

    /// Takes a slot for writing, spinning while another writer has it;
    /// returns the even sequence it found.
    fn lock_slot(&self, entry: &Entry) -> u64 {
        loop {
            if let Some(sequence) = Self::try_lock_slot(entry) {
                return sequence;
            }
            spin_wait();
        }
    }

    fn try_lock_slot(entry: &Entry) -> Option<u64> {
        let sequence = entry.sequence.load(Ordering::Relaxed);
        if sequence % 2 == 1 {
            return None;
        }
        entry
            .sequence
            .compare_exchange(sequence, sequence + 1, Ordering::Acquire, Ordering::Relaxed)
            .ok()?;
        // W: pairs with a reader's fence R; the writes below, seen by a
        // reader, make its sequence re-check see this odd value.
        fence(Ordering::Release);
        Some(sequence)
    }

    /// The owner writes its frame: `words` from the frame's first word,
    /// under the slot's lock; false if the slot holds no frame.
    pub fn write(&self, slot: Slot, memory: &impl FrameMemory, words: &[u64]) -> bool {
        let Some(entry) = self.slots.entry(slot.0) else {
            return false;
        };
        let sequence = self.lock_slot(entry);
        let frame = held(entry.frame.load(Ordering::Relaxed));
        if let Some(frame) = frame {
            for (at, &word) in words.iter().take(memory.words()).enumerate() {
                memory.store(frame, at, word);
            }
        }
        // U: pairs with a reader's first (acquire) load.
        entry.sequence.store(sequence + 2, Ordering::Release);
        frame.is_some()
    }

    /// Reads the slot's frame into `out` (up to a frame's words), retrying
    /// until the read saw no writer; false if the slot holds no frame.
    pub fn read(&self, slot: Slot, memory: &impl FrameMemory, out: &mut [u64]) -> bool {
        let Some(entry) = self.slots.entry(slot.0) else {
            return false;
        };
        loop {
            let before = entry.sequence.load(Ordering::Acquire);
            if before % 2 == 1 {
                spin_wait();
                continue;
            }
            let Some(frame) = held(entry.frame.load(Ordering::Relaxed)) else {
                return false;
            };
            for (at, word) in out.iter_mut().take(memory.words()).enumerate() {
                *word = memory.load(frame, at);
            }
            // R: pairs with a writer's fence W.
            fence(Ordering::Acquire);
            if entry.sequence.load(Ordering::Relaxed) == before {
                return true;
            }
            spin_wait();
        }
    }

    /// A free movable frame, where an owned frame may go.
    pub(crate) fn alloc_target(&self) -> Option<Pfn> {
        self.blocks.alloc_as(Mobility::Movable)
    }

    /// Moves `frame`'s contents to `target` and switches its owner's slot
    /// (see the module's protocol); frees `frame` on success. `target`
    /// must be a movable frame the caller allocated and owns.
    pub(crate) fn try_move(&self, frame: Pfn, target: Pfn, memory: &impl FrameMemory) -> Move {
        let owner = self
            .blocks
            .owner(frame)
            .and_then(|slot| self.slots.entry(slot));
        let Some(entry) = owner else {
            // Freed since the shrink listed it (its block is isolated, so
            // it stays free), or handed out without an owner.
            return if self.blocks.is_used(frame) {
                Move::Unowned
            } else {
                Move::Gone
            };
        };
        let Some(sequence) = Self::try_lock_slot(entry) else {
            return Move::Busy;
        };
        // Freed and the slot reused since the owner word was read: the
        // frame is free in its isolated block, the slot someone else's.
        let result = if entry.frame.load(Ordering::Relaxed) != frame.0 {
            Move::Gone
        } else if memory.copy(frame, target).is_err() {
            Move::Fault
        } else {
            self.blocks.move_owner(frame, target);
            entry.frame.store(target.0, Ordering::Relaxed);
            Move::Moved
        };
        entry.sequence.store(sequence + 2, Ordering::Release);
        // Only once no reader can start on it: a reader that began before
        // the unlock re-checks the sequence and retries.
        if result == Move::Moved {
            self.blocks.free(frame);
        }
        result
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
