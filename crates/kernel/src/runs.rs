//! Where a memory device's plugged blocks keep their page descriptors and
//! allocator bitmaps when both live on the plugged memory itself: the
//! *runs* layout, one bookkeeping for every platform's driver (the
//! bare-metal virtio-mem driver and the machine's memory device).
//!
//! A grow plugs a *run* of up to [`Runs::run_blocks`] consecutive blocks
//! as one physmem segment whose descriptors fill the run's first frames
//! (physmem's `plug_on_memory`, Linux's `memmap_on_memory`), so that
//! physmem's heap grows by one segment a run, not one a block. The run's
//! first block, its *holder*, keeps back those descriptor frames and,
//! after them, the allocator's bitmaps and counts for every block of the
//! run ([`BlockFrames::map_words`] each). A shrink may take any other
//! block of a run first, but the holder only with the last of its run
//! ([`Runs::keep_holders`]): Linux likewise removes a memory block's
//! vmemmap pages after the pages they describe.
//!
//! Everything here is arithmetic and a table a block: where a block's
//! bitmaps go is an offset from the start of the block that holds them
//! ([`Runs::maps`]); the platform adds its own mapping of that block.
//!
//! ```
//! use hotkern_kernel::runs::Runs;
//! use hotkern_physmem::{BasicPage, PageCount, Physmem};
//!
//! // Eight 2 MiB blocks, runs of four, 8-byte descriptors.
//! let mut runs = Runs::new(8, 512, 4, Physmem::<BasicPage>::descriptor_frames)?;
//! assert_eq!(runs.cut(0, 6).collect::<Vec<_>>(), [(0, 4), (4, 2)]);
//! assert_eq!(runs.plugged(0, 4, true)?, 4, "2048 descriptors fill four frames");
//! let maps = runs.maps(2);
//! assert_eq!((maps.block, maps.reserved), (0, 0), "block 2's bitmaps are on block 0");
//! // A block's bitmaps, counts and reverse map: 275 words.
//! assert_eq!(maps.offset, 4 * 4096 + 2 * 275 * 8, "after the descriptors and blocks 0 and 1's");
//! assert_eq!(runs.maps(0).reserved, 4 + 3, "the holder keeps descriptors and bitmaps back");
//! let mut taken = vec![0, 1];
//! assert_eq!(runs.keep_holders(&mut taken), [0], "blocks 2 and 3 stay: so does their holder");
//! assert_eq!(taken, [1]);
//! # Ok::<(), hotkern_kernel::runs::RunsError>(())
//! ```

use alloc::vec::Vec;
use core::fmt;

use hotkern_physmem::{PageCount, PAGE_SIZE};

use crate::blockframes::BlockFrames;

/// No holder: the block is not plugged, or its descriptors are on the heap.
const NO_HOLDER: u32 = u32::MAX;

/// Why a layout could not be made or a run recorded; nothing changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RunsError {
    /// No blocks, blocks of no frames, or runs of no blocks.
    Empty,
    /// More blocks than a holder's index can name (2^32 - 1).
    TooManyBlocks,
    /// A whole run's descriptors and bitmaps would fill its holder.
    HolderFull {
        /// Frames a holder would keep back.
        kept: u64,
        /// Frames in a block.
        block_frames: u64,
    },
    /// Blocks outside the region, or a run longer than [`Runs::run_blocks`].
    OutOfRange {
        /// The run's first block.
        first: usize,
        /// Its blocks.
        count: usize,
    },
}

impl fmt::Display for RunsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunsError::Empty => f.write_str("a layout of no blocks, empty blocks or empty runs"),
            RunsError::TooManyBlocks => f.write_str("more blocks than a holder index can name"),
            RunsError::HolderFull { kept, block_frames } => write!(
                f,
                "a run's holder would keep {kept} of its {block_frames} frames back"
            ),
            RunsError::OutOfRange { first, count } => write!(
                f,
                "blocks {first}..{} are outside the region or longer than a run",
                first.saturating_add(*count)
            ),
        }
    }
}

impl core::error::Error for RunsError {}

/// Where a block's allocator bitmaps go ([`Runs::maps`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MapsPlace {
    /// The block whose memory holds them: the run's holder, or the block
    /// itself when its descriptors are on the heap.
    pub block: usize,
    /// Bytes from that block's start.
    pub offset: u64,
    /// Frames the block being handed over keeps back at its front
    /// (`BlockFrames::add_blocks_with_maps`' `reserved`): the holder's
    /// descriptors and bitmaps, 0 for the other blocks of a run.
    pub reserved: u64,
}

/// The runs layout of a region of equal blocks: which block holds whose
/// descriptors and bitmaps. See the [module](self) documentation.
#[derive(Debug, Clone)]
pub struct Runs {
    block_frames: u64,
    run_blocks: usize,
    /// Frames of a plug's descriptors (physmem's `descriptor_frames` for
    /// the platform's descriptor type).
    descriptor_frames: fn(PageCount) -> PageCount,
    /// A block's holder, or [`NO_HOLDER`].
    holder: Vec<u32>,
    /// Frames of descriptors at a holder's front (0 for the others).
    descriptors: Vec<u32>,
}

impl Runs {
    /// The layout of `blocks` blocks of `block_frames` frames, plugged in
    /// runs of at most `run_blocks`, with descriptors of the size that
    /// `descriptor_frames` (physmem's `Physmem::<P>::descriptor_frames`)
    /// counts. Refused if a whole run's descriptors and bitmaps would
    /// leave its holder no frame to hand out.
    ///
    /// ```
    /// use hotkern_kernel::runs::{Runs, RunsError};
    /// use hotkern_physmem::{BasicPage, Physmem};
    ///
    /// // Blocks of two frames: one of descriptors and one of bitmaps fill them.
    /// let too_long = Runs::new(4, 2, 4, Physmem::<BasicPage>::descriptor_frames);
    /// assert!(matches!(too_long, Err(RunsError::HolderFull { .. })));
    /// ```
    pub fn new(
        blocks: usize,
        block_frames: u64,
        run_blocks: usize,
        descriptor_frames: fn(PageCount) -> PageCount,
    ) -> Result<Self, RunsError> {
        if blocks == 0 || block_frames == 0 || run_blocks == 0 {
            return Err(RunsError::Empty);
        }
        if u32::try_from(blocks).is_err() || blocks == NO_HOLDER as usize {
            return Err(RunsError::TooManyBlocks);
        }
        let mut runs = Runs {
            block_frames,
            run_blocks,
            descriptor_frames,
            holder: Vec::new(),
            descriptors: Vec::new(),
        };
        let kept = runs.holder_frames();
        if kept >= block_frames || u32::try_from(runs.descriptor_frames(run_blocks)).is_err() {
            return Err(RunsError::HolderFull { kept, block_frames });
        }
        runs.holder = alloc::vec![NO_HOLDER; blocks];
        runs.descriptors = alloc::vec![0; blocks];
        Ok(runs)
    }

    /// Blocks in a whole run: the most one plug takes.
    pub fn run_blocks(&self) -> usize {
        self.run_blocks
    }

    /// Blocks in the region.
    pub fn blocks(&self) -> usize {
        self.holder.len()
    }

    /// Cuts `count` blocks from `first` into runs, `(first, count)` each,
    /// none longer than [`Runs::run_blocks`].
    pub fn cut(&self, first: usize, count: usize) -> impl Iterator<Item = (usize, usize)> {
        let run = self.run_blocks;
        (first..first.saturating_add(count))
            .step_by(run)
            .map(move |start| (start, run.min(first + count - start)))
    }

    /// Frames the descriptors of a run of `blocks` blocks fill.
    pub fn descriptor_frames(&self, blocks: usize) -> u64 {
        (self.descriptor_frames)(PageCount(blocks as u64 * self.block_frames)).0
    }

    /// Bytes of one block's bitmaps and counts
    /// ([`BlockFrames::map_words`]).
    pub fn map_bytes(&self) -> u64 {
        BlockFrames::map_words(self.block_frames) as u64 * 8
    }

    /// Frames a holder keeps after its descriptors for the bitmaps of a
    /// whole run.
    pub fn map_frames(&self) -> u64 {
        (self.run_blocks as u64 * self.map_bytes()).div_ceil(PAGE_SIZE)
    }

    /// The most frames a holder keeps back: a whole run's descriptors,
    /// then its bitmaps. A platform that stands memory in for a block's
    /// first frames needs this many frames of it a block.
    pub fn holder_frames(&self) -> u64 {
        self.descriptor_frames(self.run_blocks) + self.map_frames()
    }

    /// Records `count` blocks from `first` as plugged as one segment:
    /// with their descriptors on `first`'s front (`on_memory`), which then
    /// holds the run, or on the heap. Also what a failed shrink records for
    /// each piece it plugs back. Returns the descriptor frames the plug
    /// keeps at `first` (0 on the heap), as physmem's `plug_on_memory`
    /// counts them.
    pub fn plugged(
        &mut self,
        first: usize,
        count: usize,
        on_memory: bool,
    ) -> Result<u64, RunsError> {
        let range = first
            .checked_add(count)
            .filter(|&end| end <= self.holder.len() && count > 0 && count <= self.run_blocks)
            .map(|end| first..end)
            .ok_or(RunsError::OutOfRange { first, count })?;
        let held = if on_memory {
            self.descriptor_frames(count)
        } else {
            0
        };
        let holder = if on_memory { first as u32 } else { NO_HOLDER };
        self.holder[range.clone()].fill(holder);
        self.descriptors[range].fill(0);
        // Checked against a whole run in `new`: a shorter one needs fewer.
        self.descriptors[first] = held as u32;
        Ok(held)
    }

    /// Records `block` as unplugged.
    pub fn unplugged(&mut self, block: usize) {
        if let Some(holder) = self.holder.get_mut(block) {
            *holder = NO_HOLDER;
            self.descriptors[block] = 0;
        }
    }

    /// The block holding `block`'s descriptors, if they are on a block.
    pub fn holder(&self, block: usize) -> Option<usize> {
        self.holder
            .get(block)
            .filter(|&&holder| holder != NO_HOLDER)
            .map(|&holder| holder as usize)
    }

    /// Whether `block` holds its run's descriptors.
    pub fn is_holder(&self, block: usize) -> bool {
        self.holder(block) == Some(block)
    }

    /// Frames of descriptors at `block`'s front: its run's, if it holds
    /// them, else 0.
    pub fn held_descriptors(&self, block: usize) -> u64 {
        self.descriptors
            .get(block)
            .map_or(0, |&held| u64::from(held))
    }

    /// Where `block`'s bitmaps go when it is handed to the allocator: on
    /// its holder, after the run's descriptors and the bitmaps of the
    /// blocks before it, the holder keeping both back; a block with its
    /// descriptors on the heap keeps its own bitmaps at its own front.
    pub fn maps(&self, block: usize) -> MapsPlace {
        match self.holder(block) {
            None => MapsPlace {
                block,
                offset: 0,
                reserved: self.map_bytes().div_ceil(PAGE_SIZE),
            },
            Some(holder) => {
                let descriptors = self.held_descriptors(holder);
                MapsPlace {
                    block: holder,
                    offset: descriptors * PAGE_SIZE + (block - holder) as u64 * self.map_bytes(),
                    reserved: if holder == block {
                        descriptors + self.map_frames()
                    } else {
                        0
                    },
                }
            }
        }
    }

    /// Drops from `taken` (sorted: the blocks a shrink emptied) the
    /// holders whose runs keep a plugged block that is not in it, and
    /// returns them: they must go back to the allocator, since physmem
    /// takes a run's descriptor frames only with its last block.
    pub fn keep_holders(&self, taken: &mut Vec<usize>) -> Vec<usize> {
        let staying = |holder: usize| {
            let end = (holder + self.run_blocks).min(self.holder.len());
            (holder + 1..end).any(|block| {
                self.holder[block] == holder as u32 && taken.binary_search(&block).is_err()
            })
        };
        let kept: Vec<usize> = taken
            .iter()
            .copied()
            .filter(|&block| self.is_holder(block) && staying(block))
            .collect();
        taken.retain(|block| kept.binary_search(block).is_err());
        kept
    }
}

#[cfg(test)]
mod tests;
