//! Making the allocator and handing blocks over and back: the only
//! calls that change which blocks the allocator holds.

use alloc::vec::Vec;
use core::ptr::NonNull;

use hotkern_physmem::Pfn;

use super::maps::{owner_words, Count, Maps, COUNT_WORDS};
use super::{bit, set, BlockFrames, Online, Region, RegionError};
use crate::sync::Mutex;

impl BlockFrames {
    /// An allocator over `blocks` blocks of `block_frames` frames from
    /// `first`, none handed over yet, with every bitmap allocated now.
    pub fn new(first: Pfn, blocks: usize, block_frames: u64) -> Result<Self, RegionError> {
        Self::make(first, blocks, block_frames, false)
    }

    /// [`BlockFrames::new`] with each block's bitmaps, counts and owner
    /// words in memory handed over with it
    /// ([`BlockFrames::add_blocks_with_maps`], the block's own reserved
    /// prefix, as Linux's `memmap_on_memory`), so that the heap holds a
    /// pointer per block rather than two bits and an owner word per frame
    /// of the region: 256 KiB for 64 GiB of 2 MiB blocks, not 68 MiB. Blocks
    /// must then come with their bitmaps: the other ways of handing them
    /// over are refused.
    ///
    /// ```
    /// use core::ptr::NonNull;
    /// use hotkern_kernel::blockframes::{BlockFrames, Online};
    /// use hotkern_physmem::Pfn;
    ///
    /// let frames = BlockFrames::with_maps_on_blocks(Pfn(0), 4, 512)?;
    /// let mut memory = vec![0u64; BlockFrames::map_words(512) * 2];
    /// let maps = NonNull::new(memory.as_mut_ptr()).unwrap();
    /// assert!(!frames.add_blocks(0, 2), "the blocks need their bitmaps");
    /// // SAFETY: `memory` outlives the blocks' time in the allocator and
    /// // nothing else uses it meanwhile.
    /// assert!(unsafe { frames.add_blocks_with_maps(0, 2, Online::Movable, 1, maps) });
    /// assert_eq!(frames.alloc(), Some(Pfn(1)), "frame 0 is reserved");
    /// assert!(frames.take_block(1), "nothing used in it");
    /// # Ok::<(), hotkern_kernel::blockframes::RegionError>(())
    /// ```
    pub fn with_maps_on_blocks(
        first: Pfn,
        blocks: usize,
        block_frames: u64,
    ) -> Result<Self, RegionError> {
        Self::make(first, blocks, block_frames, true)
    }

    /// Words of memory a block of `block_frames` frames needs for its two
    /// bitmaps, its counts and its owner words, the reverse map a
    /// migrating shrink reads (a `u32` a frame: the owner's slot, see
    /// [`crate::movable`]) ([`BlockFrames::add_blocks_with_maps`]).
    ///
    /// ```
    /// use hotkern_kernel::blockframes::BlockFrames;
    ///
    /// // A 2 MiB block: two bitmaps of 8 words, 3 words of counts, then
    /// // 512 owner words, two a word.
    /// assert_eq!(BlockFrames::map_words(512), 19 + 256);
    /// ```
    pub fn map_words(block_frames: u64) -> usize {
        2 * block_frames.div_ceil(64) as usize + COUNT_WORDS + owner_words(block_frames)
    }

    fn make(
        first: Pfn,
        blocks: usize,
        block_frames: u64,
        maps_on_blocks: bool,
    ) -> Result<Self, RegionError> {
        if blocks == 0 || block_frames == 0 {
            return Err(RegionError::Empty);
        }
        (blocks as u64)
            .checked_mul(block_frames)
            .and_then(|frames| first.0.checked_add(frames))
            .ok_or(RegionError::TooLarge)?;
        let words = block_frames.div_ceil(64) as usize;
        let map_words = blocks.div_ceil(64);
        let zeroed = |len: usize| -> Result<Vec<u64>, RegionError> {
            let mut v = Vec::new();
            v.try_reserve_exact(len)
                .map_err(|_| RegionError::OutOfMemory)?;
            v.resize(len, 0);
            Ok(v)
        };
        Ok(BlockFrames {
            region: Mutex::new(Region {
                first: first.0,
                blocks,
                block_frames,
                words,
                maps: if maps_on_blocks {
                    let mut pointers = Vec::new();
                    pointers
                        .try_reserve_exact(blocks)
                        .map_err(|_| RegionError::OutOfMemory)?;
                    pointers.resize(blocks, None);
                    Maps::Given(pointers)
                } else {
                    let len = blocks.checked_mul(words).ok_or(RegionError::TooLarge)?;
                    let counts = blocks
                        .checked_mul(COUNT_WORDS)
                        .ok_or(RegionError::TooLarge)?;
                    let frames = usize::try_from(block_frames)
                        .ok()
                        .and_then(|frames| frames.checked_mul(blocks))
                        .ok_or(RegionError::TooLarge)?;
                    let mut owners = Vec::new();
                    owners
                        .try_reserve_exact(frames)
                        .map_err(|_| RegionError::OutOfMemory)?;
                    owners.resize(frames, 0);
                    Maps::Heap {
                        free: zeroed(len)?,
                        unmovable: zeroed(len)?,
                        counts: zeroed(counts)?,
                        owners,
                    }
                },
                present: zeroed(map_words)?,
                with_free: zeroed(map_words)?,
                isolated: zeroed(map_words)?,
                kernel: zeroed(map_words)?,
                free_total: 0,
                total: 0,
            }),
        })
    }

    /// Hands blocks `first..first + count` over [`Online::Movable`], all
    /// their frames free. Refused (false), changing nothing, if one is
    /// outside the region or handed over already.
    pub fn add_blocks(&self, first: usize, count: usize) -> bool {
        self.add_blocks_as(first, count, Online::Movable)
    }

    /// [`BlockFrames::add_blocks`], saying which allocations the blocks
    /// take.
    pub fn add_blocks_as(&self, first: usize, count: usize, online: Online) -> bool {
        self.add_blocks_reserving(first, count, online, 0)
    }

    /// [`BlockFrames::add_blocks_as`], keeping the first `reserved` frames
    /// of each block back for good: they hold the block's own page
    /// descriptors (physmem's `plug_on_memory`), so they are never handed
    /// out, freed, reported used or moved by a shrink, and the block is
    /// wholly free when every other frame is. Refused (false), changing
    /// nothing, if `reserved` leaves no frame to hand out.
    ///
    /// ```
    /// use hotkern_kernel::blockframes::{BlockFrames, Online};
    /// use hotkern_physmem::Pfn;
    ///
    /// let frames = BlockFrames::new(Pfn(0), 2, 8)?;
    /// assert!(!frames.add_blocks_reserving(0, 1, Online::Movable, 8), "nothing left");
    /// assert!(frames.add_blocks_reserving(0, 2, Online::Movable, 1));
    /// assert_eq!(frames.alloc(), Some(Pfn(1)), "frame 0 holds descriptors");
    /// assert!(!frames.free(Pfn(8)), "never handed out, never freed");
    /// assert_eq!(frames.counts(), (13, 14));
    /// assert_eq!(frames.reserved(1), Some(1));
    /// assert!(frames.take_block(1), "wholly free but its descriptors");
    /// # Ok::<(), hotkern_kernel::blockframes::RegionError>(())
    /// ```
    pub fn add_blocks_reserving(
        &self,
        first: usize,
        count: usize,
        online: Online,
        reserved: u64,
    ) -> bool {
        self.add(first, count, online, reserved, None)
    }

    /// [`BlockFrames::add_blocks_reserving`] for an allocator made
    /// [`BlockFrames::with_maps_on_blocks`]: block `first + i`'s bitmaps
    /// are the [`BlockFrames::map_words`] words from `maps` plus `i` times
    /// that. Refused (false), changing nothing, as `add_blocks_reserving`
    /// is, and for an allocator whose bitmaps are on the heap.
    ///
    /// # Safety
    ///
    /// `maps` must be valid for reads and writes of `count` blocks'
    /// bitmaps, aligned, and used by nothing else from this call until
    /// each block is taken back ([`BlockFrames::take_block`] returns
    /// true, or a shrink took it) or the allocator is dropped.
    pub unsafe fn add_blocks_with_maps(
        &self,
        first: usize,
        count: usize,
        online: Online,
        reserved: u64,
        maps: NonNull<u64>,
    ) -> bool {
        self.add(first, count, online, reserved, Some(maps))
    }

    fn add(
        &self,
        first: usize,
        count: usize,
        online: Online,
        reserved: u64,
        maps: Option<NonNull<u64>>,
    ) -> bool {
        let mut region = self.region.lock();
        let Some(end) = first.checked_add(count).filter(|&end| end <= region.blocks) else {
            return false;
        };
        if reserved >= region.block_frames
            || maps.is_some() != region.maps.given_with_blocks()
            || (first..end).any(|block| bit(&region.present, block))
        {
            return false;
        }
        let (words, frames) = (region.words, region.block_frames as usize);
        let stride = Self::map_words(region.block_frames);
        for block in first..end {
            if let Some(maps) = maps {
                let at = (block - first) * stride;
                // SAFETY: within the `count` blocks' bitmaps the caller
                // vouched for, handed over with the block.
                unsafe { region.maps.give(block, words, frames, maps.add(at)) };
            }
            region.fill(block, reserved);
            region.set_count(block, Count::Reserved, reserved);
            let free = region.block_frames - reserved;
            region.set_count(block, Count::Free, free);
            region.set_count(block, Count::Unmovable, 0);
            set(&mut region.present, block, true);
            set(&mut region.with_free, block, true);
            set(&mut region.kernel, block, online == Online::Kernel);
        }
        let frames = count as u64 * (region.block_frames - reserved);
        region.free_total += frames;
        region.total += frames;
        true
    }

    /// Takes block `block` back if every frame of it is free; false (the
    /// block stays) otherwise. An isolated block's isolation ends with it.
    pub fn take_block(&self, block: usize) -> bool {
        let mut region = self.region.lock();
        if block >= region.blocks
            || !bit(&region.present, block)
            || region.count(block, Count::Free) != region.usable(block)
        {
            return false;
        }
        let usable = region.usable(block);
        region.set_count(block, Count::Free, 0);
        region.set_count(block, Count::Reserved, 0);
        region.maps.clear(block);
        set(&mut region.present, block, false);
        set(&mut region.with_free, block, false);
        set(&mut region.isolated, block, false);
        set(&mut region.kernel, block, false);
        region.free_total -= usable;
        region.total -= usable;
        true
    }
}
