//! Where each block's two bitmaps (free frames, unmovable frames) live:
//! on the heap for the whole region, made with it, or in memory the
//! caller gives each block as it is handed over — the block's own
//! reserved prefix, as Linux's `memmap_on_memory` keeps a memory block's
//! struct pages on it. Then the heap holds a pointer per block, not two
//! bits per frame of the region (4 MiB for 64 GiB).

use alloc::vec::Vec;
use core::ptr::NonNull;

/// The bitmaps of every block, `words` words each.
pub(super) enum Maps {
    /// One allocation per bitmap for the whole region.
    Heap { free: Vec<u64>, unmovable: Vec<u64> },
    /// Per block: `2 * words` words of the caller's (the free bitmap,
    /// then the unmovable one), `None` while the block is not handed over.
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
                // SAFETY: handed over with the block, valid for `2 * words`
                // words until it is taken back (`clear`), and written only
                // through `&mut self`.
                Some(base) => unsafe { core::slice::from_raw_parts(base.as_ptr(), 2 * words) },
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
                Some(base) => unsafe { core::slice::from_raw_parts_mut(base.as_ptr(), 2 * words) },
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
            Maps::Given(_) => self.given(block, words).get(words..).unwrap_or(&[]),
        }
    }

    pub(super) fn unmovable_mut(&mut self, block: usize, words: usize) -> &mut [u64] {
        match self {
            Maps::Heap { unmovable, .. } => &mut unmovable[block * words..(block + 1) * words],
            Maps::Given(_) => {
                let maps = self.given_mut(block, words);
                let start = words.min(maps.len());
                &mut maps[start..]
            }
        }
    }

    /// Whether each block's bitmaps come with it.
    pub(super) fn given_with_blocks(&self) -> bool {
        matches!(self, Maps::Given(_))
    }

    /// Takes `base` as `block`'s bitmaps, both cleared.
    ///
    /// # Safety
    ///
    /// As [`BlockFrames::add_blocks_with_maps`](super::BlockFrames::add_blocks_with_maps).
    pub(super) unsafe fn give(&mut self, block: usize, words: usize, base: NonNull<u64>) {
        if let Maps::Given(pointers) = self {
            pointers[block] = Some(base);
            self.given_mut(block, words).fill(0);
        }
    }

    /// Lets go of `block`'s bitmaps when it is taken back.
    pub(super) fn clear(&mut self, block: usize) {
        if let Maps::Given(pointers) = self {
            pointers[block] = None;
        }
    }

    /// Heap bytes the bitmaps (or the pointers to them) hold.
    pub(super) fn heap_bytes(&self) -> u64 {
        match self {
            Maps::Heap { free, unmovable } => (free.capacity() + unmovable.capacity()) as u64 * 8,
            Maps::Given(pointers) => (pointers.capacity() * core::mem::size_of::<usize>()) as u64,
        }
    }
}
