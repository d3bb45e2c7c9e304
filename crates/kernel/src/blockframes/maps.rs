//! Where each block's two bitmaps (free frames, unmovable frames), its
//! counts (free, unmovable, reserved frames) and its owner words (the
//! reverse map: each frame's owner slot) live: on the heap for the whole
//! region, made with it, or in memory the caller gives each block as it
//! is handed over — the block's own reserved prefix, as Linux's
//! `memmap_on_memory` keeps a memory block's struct pages, and with them
//! each page's owner (`page->mapping`), on it. Then the heap holds a
//! pointer per block, not two bits per frame of the region (4 MiB for 64
//! GiB), 24 bytes per block (0.75 MiB for 64 GiB) and an owner word per
//! frame (64 MiB for 64 GiB).

use alloc::vec::Vec;
use core::ptr::NonNull;

/// One of a block's counts, kept after its two bitmaps.
#[derive(Debug, Clone, Copy)]
pub(super) enum Count {
    /// Free frames (0 for a block not handed over).
    Free = 0,
    /// Frames handed out unmovable.
    Unmovable = 1,
    /// Frames at the block's front never handed out (its descriptors).
    Reserved = 2,
}

/// Words of counts a block keeps after its bitmaps.
pub(super) const COUNT_WORDS: usize = 3;

/// Words of owner words (a `u32` each, two a word) a block of `frames`
/// frames keeps after its counts.
pub(super) fn owner_words(frames: u64) -> usize {
    frames.div_ceil(2) as usize
}

/// The bitmaps, counts and owner words of every block, `words` words a
/// bitmap and `frames` owner words a block. An owner word is 0 for a
/// frame with no owner, else its owner's slot plus one, so that memory
/// cleared to zero holds no owner.
pub(super) enum Maps {
    /// One allocation per bitmap, one for the counts (three words a
    /// block) and one for the owner words, for the whole region.
    Heap {
        free: Vec<u64>,
        unmovable: Vec<u64>,
        counts: Vec<u64>,
        owners: Vec<u32>,
    },
    /// Per block: `2 * words + COUNT_WORDS + owner_words(frames)` words
    /// of the caller's (the free bitmap, the unmovable one, the counts,
    /// then the owner words), `None` while the block is not handed over.
    Given(Vec<Option<NonNull<u64>>>),
}

// SAFETY: the pointers are to memory handed over with its block for this
// allocator's use alone (`BlockFrames::add_blocks_with_maps`), read and
// written only under the region's lock, as a `Vec<u64>` would be.
unsafe impl Send for Maps {}
// SAFETY: as above; shared access reads only.
unsafe impl Sync for Maps {}

impl Maps {
    /// The caller's memory for `block`'s bitmaps, or an empty slice for a
    /// block not handed over (whose bitmaps callers never read).
    fn given(&self, block: usize, words: usize) -> &[u64] {
        match self {
            Maps::Given(pointers) => match pointers.get(block).copied().flatten() {
                // SAFETY: handed over with the block, valid for `2 * words +
                // COUNT_WORDS` words until it is taken back (`clear`), and written only
                // through `&mut self`.
                Some(base) => unsafe {
                    core::slice::from_raw_parts(base.as_ptr(), 2 * words + COUNT_WORDS)
                },
                None => &[],
            },
            Maps::Heap { .. } => &[],
        }
    }

    fn given_mut(&mut self, block: usize, words: usize) -> &mut [u64] {
        match self {
            Maps::Given(pointers) => match pointers.get(block).copied().flatten() {
                // SAFETY: as in `given`; `&mut self` makes this the only
                // reference.
                Some(base) => unsafe {
                    core::slice::from_raw_parts_mut(base.as_ptr(), 2 * words + COUNT_WORDS)
                },
                None => &mut [],
            },
            Maps::Heap { .. } => &mut [],
        }
    }

    /// `block`'s free bitmap: set = free.
    pub(super) fn free(&self, block: usize, words: usize) -> &[u64] {
        match self {
            Maps::Heap { free, .. } => &free[block * words..(block + 1) * words],
            Maps::Given(_) => self.given(block, words).get(..words).unwrap_or(&[]),
        }
    }

    pub(super) fn free_mut(&mut self, block: usize, words: usize) -> &mut [u64] {
        match self {
            Maps::Heap { free, .. } => &mut free[block * words..(block + 1) * words],
            Maps::Given(_) => {
                let maps = self.given_mut(block, words);
                let end = words.min(maps.len());
                &mut maps[..end]
            }
        }
    }

    /// `block`'s unmovable bitmap: set = handed out unmovable.
    pub(super) fn unmovable(&self, block: usize, words: usize) -> &[u64] {
        match self {
            Maps::Heap { unmovable, .. } => &unmovable[block * words..(block + 1) * words],
            Maps::Given(_) => self
                .given(block, words)
                .get(words..2 * words)
                .unwrap_or(&[]),
        }
    }

    pub(super) fn unmovable_mut(&mut self, block: usize, words: usize) -> &mut [u64] {
        match self {
            Maps::Heap { unmovable, .. } => &mut unmovable[block * words..(block + 1) * words],
            Maps::Given(_) => {
                let maps = self.given_mut(block, words);
                let start = words.min(maps.len());
                let end = (2 * words).min(maps.len());
                &mut maps[start..end]
            }
        }
    }

    /// `block`'s count `which`: 0 for a block whose counts were not given.
    pub(super) fn count(&self, block: usize, words: usize, which: Count) -> u64 {
        match self {
            Maps::Heap { counts, .. } => counts[block * COUNT_WORDS + which as usize],
            Maps::Given(_) => self
                .given(block, words)
                .get(2 * words + which as usize)
                .copied()
                .unwrap_or(0),
        }
    }

    /// Sets `block`'s count `which`; nothing for a block whose counts were
    /// not given (only a block handed over has counts worth keeping).
    pub(super) fn set_count(&mut self, block: usize, words: usize, which: Count, value: u64) {
        let slot = match self {
            Maps::Heap { counts, .. } => counts.get_mut(block * COUNT_WORDS + which as usize),
            Maps::Given(_) => self
                .given_mut(block, words)
                .get_mut(2 * words + which as usize),
        };
        if let Some(slot) = slot {
            *slot = value;
        }
    }

    /// `block`'s owner words, `frames` of them; empty for a block whose
    /// memory was not given.
    pub(super) fn owners(&self, block: usize, words: usize, frames: usize) -> &[u32] {
        match self {
            Maps::Heap { owners, .. } => &owners[block * frames..(block + 1) * frames],
            Maps::Given(pointers) => match pointers.get(block).copied().flatten() {
                // SAFETY: the owner words follow the counts in the memory
                // handed over with the block (`give`), valid until `clear`;
                // a `u64` pointer is aligned for `u32`.
                Some(base) => unsafe {
                    let at = base.as_ptr().add(2 * words + COUNT_WORDS).cast::<u32>();
                    core::slice::from_raw_parts(at, frames)
                },
                None => &[],
            },
        }
    }

    pub(super) fn owners_mut(&mut self, block: usize, words: usize, frames: usize) -> &mut [u32] {
        match self {
            Maps::Heap { owners, .. } => &mut owners[block * frames..(block + 1) * frames],
            Maps::Given(pointers) => match pointers.get(block).copied().flatten() {
                // SAFETY: as in `owners`; `&mut self` makes this the only
                // reference.
                Some(base) => unsafe {
                    let at = base.as_ptr().add(2 * words + COUNT_WORDS).cast::<u32>();
                    core::slice::from_raw_parts_mut(at, frames)
                },
                None => &mut [],
            },
        }
    }

    /// Whether each block's bitmaps come with it.
    pub(super) fn given_with_blocks(&self) -> bool {
        matches!(self, Maps::Given(_))
    }

    /// Takes `base` as `block`'s bitmaps, counts and owner words, all
    /// cleared (a frame of a block just handed over has no owner, whatever
    /// the memory held before).
    ///
    /// # Safety
    ///
    /// As [`BlockFrames::add_blocks_with_maps`](super::BlockFrames::add_blocks_with_maps).
    pub(super) unsafe fn give(
        &mut self,
        block: usize,
        words: usize,
        frames: usize,
        base: NonNull<u64>,
    ) {
        if let Maps::Given(pointers) = self {
            pointers[block] = Some(base);
            self.given_mut(block, words).fill(0);
            self.owners_mut(block, words, frames).fill(0);
        }
    }

    /// Lets go of `block`'s bitmaps when it is taken back.
    pub(super) fn clear(&mut self, block: usize) {
        if let Maps::Given(pointers) = self {
            pointers[block] = None;
        }
    }

    /// Heap bytes the bitmaps and counts (or the pointers to them) hold.
    pub(super) fn heap_bytes(&self) -> u64 {
        match self {
            Maps::Heap {
                free,
                unmovable,
                counts,
                ..
            } => (free.capacity() + unmovable.capacity() + counts.capacity()) as u64 * 8,
            Maps::Given(pointers) => (pointers.capacity() * core::mem::size_of::<usize>()) as u64,
        }
    }

    /// Heap bytes the owner words hold: 4 a frame of the region on the
    /// heap, none when they come with the blocks.
    pub(super) fn owner_heap_bytes(&self) -> u64 {
        match self {
            Maps::Heap { owners, .. } => owners.capacity() as u64 * 4,
            Maps::Given(_) => 0,
        }
    }
}
