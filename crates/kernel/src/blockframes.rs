//! The frame allocator a memory device's blocks are handed to: a region
//! cut into equal blocks (virtio-mem's `block_size`), each a bitmap of
//! its frames (set = free), so that a shrink can tell at once whether a
//! block is wholly free and take it back whole. Linux's virtio-mem
//! offlines a memory block only when every page in it can be isolated.
//!
//! Every frame handed out has a [`Mobility`], as Linux's migrate types:
//! movable (reached through an owner the kernel can update, so
//! [`crate::migrate`] can move it) or unmovable (a kernel structure).
//! A block is handed over [`Online::Movable`] by default, as Linux's
//! `online_movable` and `ZONE_MOVABLE`: unmovable allocations never land in
//! it, so it can always be emptied. A block can be *isolated*: it then hands
//! out nothing (Linux's `MIGRATE_ISOLATE` pageblocks), so a shrink can empty
//! it while others allocate; isolation is undone by [`BlockFrames::unisolate`].
//!
//! Everything is allocated when the allocator is made
//! ([`BlockFrames::new`], before the device's first resize): handing a run of blocks over or
//! taking one back only writes bits, with no heap and no search, so a
//! resize's allocator share is the bitmaps' writing. For a region too
//! large for its bitmaps on the heap, [`BlockFrames::with_maps_on_blocks`]
//! takes each block's bitmaps with the block, in memory it brings. A second bitmap, one
//! bit per block, marks the blocks that are handed over and have a free
//! frame, so an allocation finds its block in a word scan.
//!
//! ```
//! use hotkern_kernel::blockframes::BlockFrames;
//! use hotkern_physmem::Pfn;
//!
//! let frames = BlockFrames::new(Pfn(0x10_0000), 4, 512)?; // four 2 MiB blocks
//! assert!(frames.add_blocks(1, 2), "blocks 1 and 2 handed over");
//! let frame = frames.alloc().unwrap();
//! assert_eq!(frame, Pfn(0x10_0200), "low blocks first");
//! assert!(!frames.take_block(1), "a block with a frame in use stays");
//! assert!(frames.take_block(2));
//! assert!(frames.free(frame) && !frames.free(frame), "a double free is refused");
//! assert_eq!(frames.counts(), (512, 512));
//! # Ok::<(), hotkern_kernel::blockframes::RegionError>(())
//! ```

use alloc::vec::Vec;
use core::fmt;

use hotkern_physmem::Pfn;

use crate::sync::Mutex;

mod hand_over;
mod maps;
mod owners;

use maps::{Count, Maps};

/// Whether a frame can be moved: Linux's migrate types, reduced to the two
/// a shrink cares about.
///
/// ```
/// use hotkern_kernel::blockframes::{BlockFrames, Mobility, Online};
/// use hotkern_physmem::Pfn;
///
/// let frames = BlockFrames::new(Pfn(0), 2, 8)?;
/// assert!(frames.add_blocks(0, 1), "movable only, the default");
/// assert_eq!(frames.alloc_as(Mobility::Unmovable), None);
/// assert!(frames.add_blocks_as(1, 1, Online::Kernel));
/// assert_eq!(frames.alloc_as(Mobility::Unmovable), Some(Pfn(8)));
/// # Ok::<(), hotkern_kernel::blockframes::RegionError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mobility {
    /// Task data, page-cache frames: reached through an owner the kernel
    /// can switch to a copy.
    Movable,
    /// Kernel structures, reached by address: never moved.
    Unmovable,
}

/// How a block is handed over: Linux's `online_movable` and
/// `online_kernel`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Online {
    /// Movable allocations only: the block can always be emptied.
    Movable,
    /// Both kinds: a block that may end up holding an unmovable frame.
    Kernel,
}

/// Why a block could not be isolated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum IsolateError {
    /// Outside the region or not handed over.
    NotPlugged,
    /// Isolated already (another shrink has it).
    Isolated,
    /// It holds an unmovable frame: emptying it is impossible.
    Unmovable(Pfn),
}

/// A block's frames by use, under one lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BlockUse {
    /// Frames handed out.
    pub used: u64,
    /// Of those, unmovable.
    pub unmovable: u64,
    /// Handing out nothing.
    pub isolated: bool,
}

/// Why a region could not be set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RegionError {
    /// No blocks, or blocks of no frames.
    Empty,
    /// The region's frames overflow a frame number.
    TooLarge,
    /// The heap could not hold the bitmaps.
    OutOfMemory,
}

impl fmt::Display for RegionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RegionError::Empty => "a region of no blocks or of empty blocks",
            RegionError::TooLarge => "the region's frames overflow a frame number",
            RegionError::OutOfMemory => "the heap cannot hold the region's bitmaps",
        })
    }
}

struct Region {
    first: u64,
    blocks: usize,
    block_frames: u64,
    /// Bitmap words per block.
    words: usize,
    /// Every block's bitmaps of free and of unmovable frames, and its
    /// counts of free, unmovable and reserved frames.
    maps: Maps,
    /// A bit per block: handed over.
    present: Vec<u64>,
    /// A bit per block: handed over with a free frame, and not isolated
    /// (the blocks an allocation may come from).
    with_free: Vec<u64>,
    /// A bit per block: isolated, handing out nothing.
    isolated: Vec<u64>,
    /// A bit per block: handed over [`Online::Kernel`].
    kernel: Vec<u64>,
    /// Frames free and frames handed over, over all blocks.
    free_total: u64,
    total: u64,
}

fn bit(map: &[u64], index: usize) -> bool {
    map[index / 64] & (1 << (index % 64)) != 0
}

fn set(map: &mut [u64], index: usize, on: bool) {
    if on {
        map[index / 64] |= 1 << (index % 64);
    } else {
        map[index / 64] &= !(1 << (index % 64));
    }
}

impl Region {
    /// The block holding `frame` and the frame's index in it.
    fn locate(&self, frame: Pfn) -> Option<(usize, u64)> {
        let offset = frame.0.checked_sub(self.first)?;
        let block = usize::try_from(offset / self.block_frames).ok()?;
        (block < self.blocks).then_some((block, offset % self.block_frames))
    }

    fn frame(&self, block: usize, word: usize, offset: u32) -> Pfn {
        Pfn(self.first + block as u64 * self.block_frames + 64 * word as u64 + u64::from(offset))
    }

    /// The first block an allocation of `mobility` may take from.
    fn allocatable(&self, mobility: Mobility) -> Option<usize> {
        self.with_free
            .iter()
            .zip(&self.kernel)
            .enumerate()
            .find_map(|(index, (&free, &kernel))| {
                let word = match mobility {
                    Mobility::Movable => free,
                    Mobility::Unmovable => free & kernel,
                };
                let block = index * 64 + word.trailing_zeros() as usize;
                (word != 0).then_some(block)
            })
    }

    /// Marks every frame of `block` free but its first `reserved`.
    fn fill(&mut self, block: usize, reserved: u64) {
        let block_frames = self.block_frames;
        let words = self.maps.free_mut(block, self.words);
        let whole = (block_frames / 64) as usize;
        words[..whole].fill(u64::MAX);
        if let Some(tail) = words.get_mut(whole) {
            *tail = (1 << (block_frames % 64)) - 1;
        }
        for word in &mut words[..(reserved / 64) as usize] {
            *word = 0;
        }
        if reserved % 64 != 0 {
            words[(reserved / 64) as usize] &= !((1 << (reserved % 64)) - 1);
        }
    }

    /// `block`'s count `which` (see [`Count`]).
    fn count(&self, block: usize, which: Count) -> u64 {
        self.maps.count(block, self.words, which)
    }

    fn set_count(&mut self, block: usize, which: Count, value: u64) {
        let words = self.words;
        self.maps.set_count(block, words, which, value);
    }

    /// Frames at the front of `block` never handed out: the block's own
    /// page descriptors (Linux's `memmap_on_memory`), 0 for a block
    /// without them.
    fn reserved(&self, block: usize) -> u64 {
        self.count(block, Count::Reserved)
    }

    /// Frames of `block` that can be handed out: all but its reserved
    /// prefix.
    fn usable(&self, block: usize) -> u64 {
        self.block_frames - self.reserved(block)
    }

    /// Whether frame `index` of `block` is in the block's reserved prefix.
    fn is_reserved(&self, block: usize, index: u64) -> bool {
        index < self.reserved(block)
    }
}

/// Frames of a hotplug region, handed to the allocator and taken back
/// block by block; one lock over it all.
pub struct BlockFrames {
    region: Mutex<Region>,
}

impl BlockFrames {
    /// A free movable frame, if a block has one (low blocks first, low
    /// frames first within a block): [`BlockFrames::alloc_as`] with
    /// [`Mobility::Movable`].
    pub fn alloc(&self) -> Option<Pfn> {
        self.alloc_as(Mobility::Movable)
    }

    /// A free frame for an allocation of `mobility`, from a block that is
    /// not isolated and takes it.
    pub fn alloc_as(&self, mobility: Mobility) -> Option<Pfn> {
        let mut region = self.region.lock();
        let block = region.allocatable(mobility)?;
        Self::take_frame(&mut region, block, mobility)
    }

    /// A free frame of block `block` for an allocation of `mobility`, if
    /// the block is handed over, not isolated, takes it and has one: for
    /// a caller that spreads its frames over the blocks.
    ///
    /// ```
    /// use hotkern_kernel::blockframes::{BlockFrames, Mobility};
    /// use hotkern_physmem::Pfn;
    ///
    /// let frames = BlockFrames::new(Pfn(0), 3, 4)?;
    /// assert!(frames.add_blocks(0, 2));
    /// assert_eq!(frames.alloc_in(1, Mobility::Movable), Some(Pfn(4)));
    /// assert_eq!(frames.alloc_in(2, Mobility::Movable), None, "not handed over");
    /// assert_eq!(frames.alloc_in(0, Mobility::Unmovable), None, "movable only");
    /// assert_eq!(frames.isolate(0), Ok(0));
    /// assert_eq!(frames.alloc_in(0, Mobility::Movable), None, "isolated");
    /// # Ok::<(), hotkern_kernel::blockframes::RegionError>(())
    /// ```
    pub fn alloc_in(&self, block: usize, mobility: Mobility) -> Option<Pfn> {
        let mut region = self.region.lock();
        let takes = block < region.blocks
            && bit(&region.with_free, block)
            && (mobility == Mobility::Movable || bit(&region.kernel, block));
        if !takes {
            return None;
        }
        Self::take_frame(&mut region, block, mobility)
    }

    /// Takes the lowest free frame of `block`, one that may hand it out.
    fn take_frame(region: &mut Region, block: usize, mobility: Mobility) -> Option<Pfn> {
        let words = region.words;
        let bits = region.maps.free_mut(block, words);
        let (at, bits) = bits.iter_mut().enumerate().find(|(_, w)| **w != 0)?;
        let offset = bits.trailing_zeros();
        *bits &= !(1 << offset);
        let free = region.count(block, Count::Free) - 1;
        region.set_count(block, Count::Free, free);
        region.free_total -= 1;
        if free == 0 {
            set(&mut region.with_free, block, false);
        }
        if mobility == Mobility::Unmovable {
            region.maps.unmovable_mut(block, words)[at] |= 1 << offset;
            let unmovable = region.count(block, Count::Unmovable) + 1;
            region.set_count(block, Count::Unmovable, unmovable);
        }
        Some(region.frame(block, at, offset))
    }

    /// Frees a frame; false if it is free already or in no block handed
    /// over (a double free or a stray frame, refused).
    pub fn free(&self, frame: Pfn) -> bool {
        let mut region = self.region.lock();
        let Some((block, index)) = region.locate(frame) else {
            return false;
        };
        if !bit(&region.present, block) || region.is_reserved(block, index) {
            return false;
        }
        let (words, at) = (region.words, (index / 64) as usize);
        let mask = 1 << (index % 64);
        let free = &mut region.maps.free_mut(block, words)[at];
        if *free & mask != 0 {
            return false;
        }
        *free |= mask;
        // A free frame has no owner: the next one to take it starts clean.
        if let Some(word) = region.owner_word(frame) {
            *word = 0;
        }
        let free = region.count(block, Count::Free) + 1;
        region.set_count(block, Count::Free, free);
        region.free_total += 1;
        let unmovable = &mut region.maps.unmovable_mut(block, words)[at];
        if *unmovable & mask != 0 {
            *unmovable &= !mask;
            let unmovable = region.count(block, Count::Unmovable) - 1;
            region.set_count(block, Count::Unmovable, unmovable);
        }
        // A frame freed into an isolated block stays there: the shrink
        // emptying it counts on no allocation coming back.
        if !bit(&region.isolated, block) {
            set(&mut region.with_free, block, true);
        }
        true
    }

    /// Isolates a handed-over block that holds no unmovable frame: from
    /// now on it hands out nothing, so its used frames can only shrink in
    /// number. Returns the frames in use at that moment.
    pub fn isolate(&self, block: usize) -> Result<u64, IsolateError> {
        let mut region = self.region.lock();
        if block >= region.blocks || !bit(&region.present, block) {
            return Err(IsolateError::NotPlugged);
        }
        if bit(&region.isolated, block) {
            return Err(IsolateError::Isolated);
        }
        if region.count(block, Count::Unmovable) != 0 {
            let words = region.words;
            let (at, word) = region
                .maps
                .unmovable(block, words)
                .iter()
                .enumerate()
                .find(|(_, w)| **w != 0)
                .ok_or(IsolateError::NotPlugged)?;
            return Err(IsolateError::Unmovable(region.frame(
                block,
                at,
                word.trailing_zeros(),
            )));
        }
        set(&mut region.isolated, block, true);
        set(&mut region.with_free, block, false);
        Ok(region.usable(block) - region.count(block, Count::Free))
    }

    /// Ends a block's isolation; false if it was not isolated.
    pub fn unisolate(&self, block: usize) -> bool {
        let mut region = self.region.lock();
        if block >= region.blocks || !bit(&region.isolated, block) {
            return false;
        }
        set(&mut region.isolated, block, false);
        let any_free = region.count(block, Count::Free) != 0;
        set(&mut region.with_free, block, any_free);
        true
    }

    /// Calls `visit` with each frame of `block` in use, under the lock
    /// (so `visit` must not call back into this allocator).
    pub fn each_used(&self, block: usize, mut visit: impl FnMut(Pfn)) {
        let region = self.region.lock();
        if block >= region.blocks || !bit(&region.present, block) {
            return;
        }
        let words = region.words;
        let reserved = region.reserved(block);
        for (at, &free) in region.maps.free(block, words).iter().enumerate() {
            let in_block = (region.block_frames - 64 * at as u64).min(64);
            let mut used = !free & (u64::MAX >> (64 - in_block));
            // The descriptor frames are neither free nor used: a shrink
            // must never pick one as a frame to move.
            let below = reserved.saturating_sub(64 * at as u64).min(64);
            used &= !match below {
                0 => 0,
                64 => u64::MAX,
                below => (1 << below) - 1,
            };
            while used != 0 {
                let offset = used.trailing_zeros();
                used &= used - 1;
                visit(region.frame(block, at, offset));
            }
        }
    }

    /// A handed-over block's use; `None` for a block not handed over.
    pub fn block_use(&self, block: usize) -> Option<BlockUse> {
        let region = self.region.lock();
        (block < region.blocks && bit(&region.present, block)).then(|| BlockUse {
            used: region.usable(block) - region.count(block, Count::Free),
            unmovable: region.count(block, Count::Unmovable),
            isolated: bit(&region.isolated, block),
        })
    }

    /// Whether `frame` is handed out (movable or not).
    pub fn is_used(&self, frame: Pfn) -> bool {
        let region = self.region.lock();
        region.locate(frame).is_some_and(|(block, index)| {
            let at = (index / 64) as usize;
            bit(&region.present, block)
                && !region.is_reserved(block, index)
                && region.maps.free(block, region.words)[at] & (1 << (index % 64)) == 0
        })
    }

    /// The frames a handed-over block keeps back at its front
    /// ([`BlockFrames::add_blocks_reserving`]); `None` for a block not
    /// handed over.
    pub fn reserved(&self, block: usize) -> Option<u64> {
        let region = self.region.lock();
        (block < region.blocks && bit(&region.present, block)).then(|| region.reserved(block))
    }

    /// Whether `frame` is handed out unmovable.
    pub fn is_unmovable(&self, frame: Pfn) -> bool {
        let region = self.region.lock();
        region.locate(frame).is_some_and(|(block, index)| {
            // A block not handed over has no unmovable frame (and, with
            // its bitmaps on it, no bitmaps to read).
            let at = (index / 64) as usize;
            bit(&region.present, block)
                && region.maps.unmovable(block, region.words)[at] & (1 << (index % 64)) != 0
        })
    }

    /// The block holding `frame`, handed over or not.
    pub fn block_of(&self, frame: Pfn) -> Option<usize> {
        self.region.lock().locate(frame).map(|(block, _)| block)
    }

    /// `(blocks, frames per block)` of the region.
    pub fn shape(&self) -> (usize, u64) {
        let region = self.region.lock();
        (region.blocks, region.block_frames)
    }

    /// The region's first frame.
    pub fn first(&self) -> Pfn {
        Pfn(self.region.lock().first)
    }

    /// Whether `frame` is in a block handed over.
    pub fn holds(&self, frame: Pfn) -> bool {
        let region = self.region.lock();
        region
            .locate(frame)
            .is_some_and(|(block, _)| bit(&region.present, block))
    }

    /// Heap bytes the bitmaps and per-block counts hold: made for the
    /// whole region when the allocator is, so a resize never allocates
    /// for them.
    ///
    /// ```
    /// use hotkern_kernel::blockframes::BlockFrames;
    /// use hotkern_physmem::Pfn;
    ///
    /// // 64 blocks of 512 frames: two bits a frame, 24 bytes of counts
    /// // and four bits a block.
    /// let frames = BlockFrames::new(Pfn(0), 64, 512)?;
    /// assert_eq!(frames.heap_bytes(), 64 * 512 / 4 + 64 * 24 + 4 * 8);
    /// # Ok::<(), hotkern_kernel::blockframes::RegionError>(())
    /// ```
    pub fn heap_bytes(&self) -> u64 {
        let region = self.region.lock();
        let words = [
            &region.present,
            &region.with_free,
            &region.isolated,
            &region.kernel,
        ]
        .iter()
        .map(|map| map.capacity() as u64)
        .sum::<u64>();
        words * 8 + region.maps.heap_bytes()
    }

    /// `(free, handed over)` frames.
    pub fn counts(&self) -> (u64, u64) {
        let region = self.region.lock();
        (region.free_total, region.total)
    }
}

#[cfg(all(test, not(loom)))]
mod tests;

#[cfg(all(test, not(loom)))]
mod maps_tests;
