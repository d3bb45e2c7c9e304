//! The reverse map a migrating shrink reads: each frame's owner word, a
//! `u32` per frame kept with the block's bitmaps (`maps.rs`), 0 for no
//! owner, else the owner's slot ([`crate::movable`]) plus one. Writing
//! it is part of handing the frame out, under the allocator's lock, so
//! an owned frame is never seen without its owner.

use hotkern_physmem::Pfn;

use super::{bit, BlockFrames, Mobility, Region};

impl Region {
    /// `frame`'s owner word: 0 for none, else the owner plus one; `None`
    /// for a frame in no block handed over.
    fn owner_word_of(&self, frame: Pfn) -> Option<u32> {
        let (block, index) = self.locate(frame)?;
        if !bit(&self.present, block) {
            return None;
        }
        let (words, frames) = (self.words, self.block_frames as usize);
        self.maps
            .owners(block, words, frames)
            .get(index as usize)
            .copied()
    }

    /// `frame`'s owner word, if it is in a block handed over (only such a
    /// block's words exist when they come with the blocks).
    pub(super) fn owner_word(&mut self, frame: Pfn) -> Option<&mut u32> {
        let (block, index) = self.locate(frame)?;
        if !bit(&self.present, block) {
            return None;
        }
        let (words, frames) = (self.words, self.block_frames as usize);
        self.maps
            .owners_mut(block, words, frames)
            .get_mut(index as usize)
    }
}

impl BlockFrames {
    /// A free movable frame whose owner word (the reverse map) is set to
    /// `owner`, under the same lock, from block `block` or, for `None`,
    /// from the first block that has one.
    pub(crate) fn alloc_owned(&self, block: Option<usize>, owner: u32) -> Option<Pfn> {
        let mut region = self.region.lock();
        let block = match block {
            Some(block) => {
                (block < region.blocks && bit(&region.with_free, block)).then_some(block)
            }
            None => region.allocatable(Mobility::Movable),
        }?;
        let frame = Self::take_frame(&mut region, block, Mobility::Movable)?;
        if let Some(word) = region.owner_word(frame) {
            *word = owner + 1;
        }
        Some(frame)
    }

    /// The owner `frame`'s word names ([`BlockFrames::alloc_owned`]), if
    /// it is in a block handed over and has one.
    pub(crate) fn owner(&self, frame: Pfn) -> Option<u32> {
        let word = self.region.lock().owner_word_of(frame)?;
        word.checked_sub(1)
    }

    /// Moves `from`'s owner word to `to` (a migration's switch), leaving
    /// `from` with none; false, changing nothing, if either frame is not
    /// in a block handed over.
    pub(crate) fn move_owner(&self, from: Pfn, to: Pfn) -> bool {
        let mut region = self.region.lock();
        let Some(owner) = region.owner_word(from).map(core::mem::take) else {
            return false;
        };
        match region.owner_word(to) {
            Some(word) => {
                *word = owner;
                true
            }
            None => {
                if let Some(word) = region.owner_word(from) {
                    *word = owner;
                }
                false
            }
        }
    }

    /// Heap bytes the owner words hold: 4 a frame of the region for an
    /// allocator made [`BlockFrames::new`], none for one whose blocks
    /// bring their memory ([`BlockFrames::with_maps_on_blocks`]).
    ///
    /// ```
    /// use hotkern_kernel::blockframes::BlockFrames;
    /// use hotkern_physmem::Pfn;
    ///
    /// assert_eq!(BlockFrames::new(Pfn(0), 4, 512)?.owner_heap_bytes(), 4 * 512 * 4);
    /// assert_eq!(BlockFrames::with_maps_on_blocks(Pfn(0), 4, 512)?.owner_heap_bytes(), 0);
    /// # Ok::<(), hotkern_kernel::blockframes::RegionError>(())
    /// ```
    pub fn owner_heap_bytes(&self) -> u64 {
        self.region.lock().maps.owner_heap_bytes()
    }
}
