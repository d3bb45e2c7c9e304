//! Movable frames and their owners: the reverse map a shrink needs to move
//! a frame that is in use, and the switch that makes the move invisible.
//!
//! # Design: an owner table of slots, read through
//!
//! An owner never holds a frame number. It holds a [`Slot`] handle, and
//! the slot holds the frame, as a page-table entry does for a task in
//! Linux: the task reaches its page only through the entry, so the kernel
//! can point the entry at a copy (mm/migrate.c's `remove_migration_ptes`).
//! The *reverse map* — frame to slot, one word per frame of the region,
//! allocated with it — is what Linux finds through `page->mapping` and the
//! rmap walk: given a used frame in a block being emptied, the slot to
//! switch.
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
//! Lock order: a slot, then the table lock (the reverse map and the free
//! slots). The shrink never waits for a slot while it holds the table
//! lock: it tries the slot once and backs off.
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

use alloc::vec::Vec;

use hotkern_physmem::Pfn;

use crate::blockframes::{BlockFrames, Mobility, RegionError};
use crate::sync::{fence, spin_wait, AtomicU64, Mutex, Ordering};

mod arena;

pub use arena::Arena;

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

/// No frame or no slot, in the table's words.
const NONE: u64 = u64::MAX;

struct Entry {
    sequence: AtomicU64,
    frame: AtomicU64,
}

struct Table {
    /// Slot of each frame of the region, by frame index; `NONE` if free,
    /// unmovable, or handed out without an owner.
    owner: Vec<u64>,
    /// Slots not in use.
    free_slots: Vec<u32>,
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

/// A block allocator whose movable frames have owners: [`BlockFrames`],
/// an owner table and its reverse map.
pub struct MovableFrames {
    blocks: BlockFrames,
    first: u64,
    /// Blocks the owner table covers, from the region's first: owned
    /// frames come only from these.
    owned_blocks: usize,
    entries: Vec<Entry>,
    table: Mutex<Table>,
}

impl MovableFrames {
    /// Over `blocks` blocks of `block_frames` frames from `first`, with
    /// one slot and one reverse-map word per frame allocated now.
    pub fn new(first: Pfn, blocks: usize, block_frames: u64) -> Result<Self, RegionError> {
        Self::with_owned_blocks(first, blocks, block_frames, blocks)
    }

    /// [`MovableFrames::new`] with an owner table (28 bytes a frame) over
    /// only the region's first `owned_blocks` blocks: a region of tens of
    /// GiB needs no table the heap cannot hold. Owned frames come from
    /// those blocks alone; the others are handed out through
    /// [`MovableFrames::blocks`] or not at all, and a shrink takes them
    /// back when they are free (a used one has no owner to move it).
    ///
    /// ```
    /// use hotkern_kernel::movable::MovableFrames;
    /// use hotkern_physmem::Pfn;
    ///
    /// let frames = MovableFrames::with_owned_blocks(Pfn(0), 4, 2, 1)?;
    /// assert!(frames.blocks().add_blocks(0, 4));
    /// assert!(frames.alloc().is_some() && frames.alloc().is_some());
    /// assert_eq!(frames.alloc(), None, "the owned block is full");
    /// assert_eq!(frames.alloc_in(2), None, "block 2 has no owner table");
    /// # Ok::<(), hotkern_kernel::blockframes::RegionError>(())
    /// ```
    pub fn with_owned_blocks(
        first: Pfn,
        blocks: usize,
        block_frames: u64,
        owned_blocks: usize,
    ) -> Result<Self, RegionError> {
        Self::over(BlockFrames::new(first, blocks, block_frames)?, owned_blocks)
    }

    /// [`MovableFrames::with_owned_blocks`] over a block allocator the
    /// caller made, e.g. one whose bitmaps come with each block
    /// ([`BlockFrames::with_maps_on_blocks`]).
    ///
    /// ```
    /// use hotkern_kernel::blockframes::BlockFrames;
    /// use hotkern_kernel::movable::MovableFrames;
    /// use hotkern_physmem::Pfn;
    ///
    /// let blocks = BlockFrames::with_maps_on_blocks(Pfn(0), 64, 512)?;
    /// let frames = MovableFrames::over(blocks, 1)?;
    /// assert_eq!(frames.owner_table_bytes(), 512 * 28);
    /// # Ok::<(), hotkern_kernel::blockframes::RegionError>(())
    /// ```
    pub fn over(inner: BlockFrames, owned_blocks: usize) -> Result<Self, RegionError> {
        let (blocks, block_frames) = inner.shape();
        let first = inner.first();
        let owned_blocks = owned_blocks.min(blocks);
        let frames = (owned_blocks as u64)
            .checked_mul(block_frames)
            .filter(|&frames| frames < u64::from(u32::MAX))
            .ok_or(RegionError::TooLarge)? as usize;
        let mut entries = Vec::new();
        let mut owner = Vec::new();
        let mut free_slots = Vec::new();
        entries
            .try_reserve_exact(frames)
            .and_then(|()| owner.try_reserve_exact(frames))
            .and_then(|()| free_slots.try_reserve_exact(frames))
            .map_err(|_| RegionError::OutOfMemory)?;
        entries.extend((0..frames).map(|_| Entry {
            sequence: AtomicU64::new(0),
            frame: AtomicU64::new(NONE),
        }));
        owner.resize(frames, NONE);
        // Popped from the end: slot 0 first.
        free_slots.extend((0..frames as u32).rev());
        Ok(MovableFrames {
            blocks: inner,
            first: first.0,
            owned_blocks,
            entries,
            table: Mutex::new(Table { owner, free_slots }),
        })
    }

    /// Heap bytes the owner table holds: a slot, a reverse-map word and
    /// a free-slot index for each frame of the owned blocks, 28 bytes a
    /// frame (the bitmaps are [`BlockFrames::heap_bytes`]).
    ///
    /// ```
    /// use hotkern_kernel::movable::MovableFrames;
    /// use hotkern_physmem::Pfn;
    ///
    /// let frames = MovableFrames::with_owned_blocks(Pfn(0), 4, 512, 1)?;
    /// assert_eq!(frames.owner_table_bytes(), 512 * 28);
    /// # Ok::<(), hotkern_kernel::blockframes::RegionError>(())
    /// ```
    pub fn owner_table_bytes(&self) -> u64 {
        let table = self.table.lock();
        (self.entries.capacity() * core::mem::size_of::<Entry>()
            + table.owner.capacity() * 8
            + table.free_slots.capacity() * 4) as u64
    }

    /// The block allocator underneath: hand blocks over, allocate
    /// unmovable frames, read counts.
    pub fn blocks(&self) -> &BlockFrames {
        &self.blocks
    }

    fn index(&self, frame: Pfn) -> usize {
        (frame.0 - self.first) as usize
    }

    /// A movable frame with a new owner slot, or `None` if no block that
    /// is handed over and not isolated has a free frame.
    pub fn alloc(&self) -> Option<Slot> {
        self.alloc_with(|| self.alloc_target())
    }

    /// A new owner slot for the frame `pick` takes, with the table locked
    /// and a free slot known to exist first, so that no frame is taken
    /// that no slot could own.
    fn alloc_with(&self, pick: impl FnOnce() -> Option<Pfn>) -> Option<Slot> {
        let mut table = self.table.lock();
        let slot = *table.free_slots.last()?;
        let frame = pick()?;
        table.free_slots.pop();
        let index = self.index(frame);
        table.owner[index] = u64::from(slot);
        self.entries[slot as usize]
            .frame
            .store(frame.0, Ordering::Relaxed);
        Some(Slot(slot))
    }

    /// A movable frame of block `block` with a new owner slot, or `None`
    /// if that block is not handed over, is isolated or is full
    /// ([`BlockFrames::alloc_in`]).
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
        if block >= self.owned_blocks {
            return None;
        }
        self.alloc_with(|| self.blocks.alloc_in(block, Mobility::Movable))
    }

    /// Frees the slot's frame and the slot; false if the slot holds none.
    pub fn free(&self, slot: Slot) -> bool {
        let Some(entry) = self.entries.get(slot.0 as usize) else {
            return false;
        };
        let sequence = self.lock_slot(entry);
        let frame = entry.frame.load(Ordering::Relaxed);
        let freed = frame != NONE && {
            let mut table = self.table.lock();
            table.owner[self.index(Pfn(frame))] = NONE;
            table.free_slots.push(slot.0);
            entry.frame.store(NONE, Ordering::Relaxed);
            self.blocks.free(Pfn(frame))
        };
        entry.sequence.store(sequence + 2, Ordering::Release);
        freed
    }

    /// The frame a slot holds now (it may move at any time after).
    pub fn frame_of(&self, slot: Slot) -> Option<Pfn> {
        let frame = self
            .entries
            .get(slot.0 as usize)?
            .frame
            .load(Ordering::Acquire);
        (frame != NONE).then_some(Pfn(frame))
    }

    /// The reverse map: the slot owning `frame`, if it is a movable frame
    /// with an owner.
    pub fn owner_of(&self, frame: Pfn) -> Option<Slot> {
        let table = self.table.lock();
        let index = frame.0.checked_sub(self.first)? as usize;
        let slot = *table.owner.get(index)?;
        (slot != NONE).then_some(Slot(slot as u32))
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
        let Some(entry) = self.entries.get(slot.0 as usize) else {
            return false;
        };
        let sequence = self.lock_slot(entry);
        let frame = entry.frame.load(Ordering::Relaxed);
        let written = frame != NONE;
        if written {
            for (at, &word) in words.iter().take(memory.words()).enumerate() {
                memory.store(Pfn(frame), at, word);
            }
        }
        // U: pairs with a reader's first (acquire) load.
        entry.sequence.store(sequence + 2, Ordering::Release);
        written
    }

    /// Reads the slot's frame into `out` (up to a frame's words), retrying
    /// until the read saw no writer; false if the slot holds no frame.
    pub fn read(&self, slot: Slot, memory: &impl FrameMemory, out: &mut [u64]) -> bool {
        let Some(entry) = self.entries.get(slot.0 as usize) else {
            return false;
        };
        loop {
            let before = entry.sequence.load(Ordering::Acquire);
            if before % 2 == 1 {
                spin_wait();
                continue;
            }
            let frame = entry.frame.load(Ordering::Relaxed);
            if frame == NONE {
                return false;
            }
            for (at, word) in out.iter_mut().take(memory.words()).enumerate() {
                *word = memory.load(Pfn(frame), at);
            }
            // R: pairs with a writer's fence W.
            fence(Ordering::Acquire);
            if entry.sequence.load(Ordering::Relaxed) == before {
                return true;
            }
            spin_wait();
        }
    }

    /// A free movable frame the owner table covers: where an owned frame
    /// may go.
    pub(crate) fn alloc_target(&self) -> Option<Pfn> {
        self.blocks
            .alloc_below(Mobility::Movable, self.owned_blocks)
    }

    /// Moves `frame`'s contents to `target` and switches its owner's slot
    /// (see the module's protocol); frees `frame` on success. `target`
    /// must be a movable frame the caller allocated and owns.
    pub(crate) fn try_move(&self, frame: Pfn, target: Pfn, memory: &impl FrameMemory) -> Move {
        let slot = {
            let table = self.table.lock();
            // A frame past the owner table has no owner either.
            let slot = table.owner.get(self.index(frame)).copied().unwrap_or(NONE);
            if slot == NONE {
                // Freed since the shrink listed it (its block is isolated,
                // so it stays free), or handed out without an owner.
                drop(table);
                return if self.blocks.is_used(frame) {
                    Move::Unowned
                } else {
                    Move::Gone
                };
            }
            slot as usize
        };
        let entry = &self.entries[slot];
        let Some(sequence) = Self::try_lock_slot(entry) else {
            return Move::Busy;
        };
        // Freed and the slot reused while the table lock was dropped: the
        // frame is free in its isolated block, the slot someone else's.
        let result = if entry.frame.load(Ordering::Relaxed) != frame.0 {
            Move::Gone
        } else if memory.copy(frame, target).is_err() {
            Move::Fault
        } else {
            let mut table = self.table.lock();
            table.owner[self.index(target)] = slot as u64;
            table.owner[self.index(frame)] = NONE;
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
