//! Taking memory away while it is in use: a shrink picks blocks, isolates
//! each, migrates its used frames elsewhere, and takes it back, as Linux's
//! `offline_pages` (mm/memory_hotplug.c) does over mm/page_isolation.c and
//! mm/migrate.c.
//!
//! # Protocol, per block
//!
//! 1. *Pick*: wholly free blocks first (virtio-mem's preference: nothing
//!    to move), then the fewest used frames, ties from the top of the
//!    region down (virtio_mem.c unplugs the highest blocks first, and
//!    targets come from the lowest: a block that took targets is not
//!    emptied again); never a block holding an unmovable frame.
//! 2. *Isolate* ([`BlockFrames::isolate`]): under the allocator's lock,
//!    refused if an unmovable frame is there; after it no allocation lands
//!    in the block, so its used frames only go.
//! 3. *Allocate* every target frame, outside the block (isolation sees to
//!    that), before the first frame moves. A missing target undoes the
//!    isolation and frees the targets: nothing moved, [`ShrinkError::NoTarget`].
//! 4. *Migrate* each used frame ([`MovableFrames`]' switch: copy, point
//!    the owner's slot at the copy, free the old frame). An owner writing
//!    its frame holds its slot; the shrink backs off and retries, a bounded
//!    number of times, as `offline_pages` retries `do_migrate_range`.
//! 5. *Take* the emptied block ([`BlockFrames::take_block`]).
//!
//! A failure in 4 undoes the isolation and returns the unused targets;
//! frames already moved stay moved: each is whole and owned where it is,
//! so there is no half-done frame to see, and the report says the block
//! rolled back. The device is told [`ShrinkReport::reached`], the size
//! actually taken.
//!
//! One shrink at a time, as a memory device's resizes come one at a time:
//! a second one running at once is safe, but may find the first's target
//! frames (used, not yet owned) in a block it isolates and refuse it as
//! holding a frame it cannot move.
//!
//! The heap allocations (the lists of frames and targets) are made before
//! the block is isolated; isolation is the one change made before the
//! target frames are allocated, because it is what keeps them out of the
//! block.
//!
//! ```
//! use hotkern_kernel::migrate::{shrink, shrink_block, NoHooks};
//! use hotkern_kernel::movable::{Arena, MovableFrames};
//! use hotkern_physmem::Pfn;
//!
//! let frames = MovableFrames::new(Pfn(0), 2, 4)?;
//! let memory = Arena::new(Pfn(0), 8, 2);
//! assert!(frames.blocks().add_blocks(0, 2));
//! let slot = frames.alloc().unwrap(); // frame 0, block 0
//! assert!(frames.write(slot, &memory, &[5, 6]));
//! let report = shrink(&frames, &memory, 4, &NoHooks).unwrap();
//! assert_eq!((report.taken.as_slice(), report.migrated), ([1].as_slice(), 0), "a wholly free block first");
//! assert!(frames.blocks().add_blocks(1, 1), "grown back");
//! assert_eq!(shrink_block(&frames, &memory, 0, &NoHooks).unwrap().migrated, 1);
//! let mut seen = [0; 2];
//! assert!(frames.read(slot, &memory, &mut seen));
//! assert_eq!((seen, frames.frame_of(slot)), ([5, 6], Some(Pfn(4))), "moved, intact");
//! # Ok::<(), hotkern_kernel::blockframes::RegionError>(())
//! ```

use alloc::vec::Vec;
use core::cmp::Reverse;
use core::fmt;

use hotkern_physmem::Pfn;

use crate::blockframes::{BlockFrames, IsolateError};
use crate::movable::{FrameMemory, MovableFrames, Move};
use crate::sync::spin_wait;

/// Tries of one frame whose owner is writing it, before the block rolls
/// back.
pub const RETRIES: u32 = 8;

/// Why a shrink, or one block of it, did not happen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ShrinkError {
    /// The size asked for is not a whole number of blocks.
    NotBlockMultiple {
        /// Frames asked for.
        frames: u64,
        /// Frames in a block.
        block_frames: u64,
    },
    /// More blocks asked for than hold no unmovable frame.
    BelowUnmovable {
        /// Blocks asked for.
        requested: usize,
        /// Blocks handed over that could be emptied.
        movable: usize,
    },
    /// The block holds a frame that cannot move.
    Unmovable {
        /// The block.
        block: usize,
        /// The frame.
        pfn: Pfn,
    },
    /// No free frame outside the block for each of its used frames.
    NoTarget {
        /// The block.
        block: usize,
        /// Targets needed.
        needed: usize,
        /// Targets found.
        found: usize,
    },
    /// An owner held its frame through every retry.
    Busy {
        /// The block.
        block: usize,
        /// The frame.
        pfn: Pfn,
    },
    /// Copying a frame failed.
    CopyFault {
        /// The block.
        block: usize,
        /// The frame.
        pfn: Pfn,
    },
    /// The block is not handed over, or another shrink has it.
    NotPlugged {
        /// The block.
        block: usize,
    },
    /// The heap could not hold the shrink's lists.
    OutOfMemory,
}

impl fmt::Display for ShrinkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            ShrinkError::NotBlockMultiple {
                frames,
                block_frames,
            } => {
                write!(
                    f,
                    "{frames} frames is not a multiple of the {block_frames}-frame block"
                )
            }
            ShrinkError::BelowUnmovable { requested, movable } => {
                write!(
                    f,
                    "{requested} blocks asked for, {movable} hold no unmovable frame"
                )
            }
            ShrinkError::Unmovable { block, pfn } => {
                write!(f, "block {block} holds unmovable frame {:#x}", pfn.0)
            }
            ShrinkError::NoTarget {
                block,
                needed,
                found,
            } => {
                write!(
                    f,
                    "block {block} needs {needed} target frames, {found} are free"
                )
            }
            ShrinkError::Busy { block, pfn } => {
                write!(f, "frame {:#x} of block {block} stayed busy", pfn.0)
            }
            ShrinkError::CopyFault { block, pfn } => {
                write!(f, "copying frame {:#x} of block {block} failed", pfn.0)
            }
            ShrinkError::NotPlugged { block } => {
                write!(f, "block {block} is not handed over or is being shrunk")
            }
            ShrinkError::OutOfMemory => f.write_str("the heap cannot hold the shrink's lists"),
        }
    }
}

/// Where a shrink lets a caller in: failure injection and the platform's
/// pause. Every method has a default that does nothing special.
///
/// ```
/// use hotkern_kernel::migrate::{shrink_block, ShrinkError, ShrinkHooks};
/// use hotkern_kernel::movable::{Arena, MovableFrames};
/// use hotkern_physmem::Pfn;
///
/// /// No target frame is ever found.
/// struct Full;
/// impl ShrinkHooks for Full {
///     fn allow_target(&self, _: usize) -> bool {
///         false
///     }
/// }
/// let frames = MovableFrames::new(Pfn(0), 2, 4)?;
/// let memory = Arena::new(Pfn(0), 8, 1);
/// assert!(frames.blocks().add_blocks(0, 2));
/// frames.alloc().unwrap();
/// let (error, _) = shrink_block(&frames, &memory, 0, &Full).unwrap_err();
/// assert_eq!(error, ShrinkError::NoTarget { block: 0, needed: 1, found: 0 });
/// assert_eq!(frames.blocks().counts(), (7, 8), "rolled back");
/// # Ok::<(), hotkern_kernel::blockframes::RegionError>(())
/// ```
pub trait ShrinkHooks {
    /// Block `block` was just isolated (a grow may arrive here).
    fn isolated(&self, _block: usize) {}
    /// Whether the `index`-th target allocation of a block may succeed.
    fn allow_target(&self, _index: usize) -> bool {
        true
    }
    /// The pause before try `attempt` (from 1) of a busy frame:
    /// exponential, `2^attempt` pauses.
    fn back_off(&self, attempt: u32) {
        for _ in 0..1u32 << attempt.min(12) {
            spin_wait();
        }
    }
}

/// The default hooks.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoHooks;

impl ShrinkHooks for NoHooks {}

/// What a block's shrink did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BlockReport {
    /// Frames copied and switched.
    pub migrated: u64,
    /// Frames freed by their owners while the shrink worked.
    pub gone: u64,
    /// Back-offs on busy frames.
    pub retries: u64,
}

/// Rolled-back blocks a [`ShrinkReport`] names with their errors. The
/// room for them is taken before any block changes, so it must not scale
/// with the region: one entry per block was 1.3 MB of heap for a 64 GiB
/// region, more than the rest of the shrink back needed.
pub const ROLLED_BACK_KEPT: usize = 32;

/// What a shrink reached.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ShrinkReport {
    /// Blocks asked for.
    pub requested: usize,
    /// Blocks taken back, in order.
    pub taken: Vec<usize>,
    /// Frames migrated over all blocks, those of rolled-back blocks too.
    pub migrated: u64,
    /// Back-offs over all blocks.
    pub retries: u64,
    /// Blocks tried and rolled back (isolation undone), with why: the
    /// first [`ROLLED_BACK_KEPT`]; the others are only counted, in
    /// `rolled_back_unnamed`.
    pub rolled_back: Vec<(usize, ShrinkError)>,
    /// Blocks rolled back past the first [`ROLLED_BACK_KEPT`].
    pub rolled_back_unnamed: usize,
    /// Frames in a block.
    pub block_frames: u64,
}

impl ShrinkReport {
    /// Frames actually taken: what the device is told.
    pub fn reached(&self) -> u64 {
        self.taken.len() as u64 * self.block_frames
    }

    /// Whether every block asked for was taken.
    pub fn complete(&self) -> bool {
        self.taken.len() == self.requested
    }
}

/// Takes `frames` frames (whole blocks) back, migrating used frames out of
/// the blocks picked. Bad requests change nothing and return an error;
/// otherwise the report says what was reached (all, or fewer blocks with
/// the reasons the others rolled back).
pub fn shrink(
    frames: &MovableFrames,
    memory: &impl FrameMemory,
    size: u64,
    hooks: &impl ShrinkHooks,
) -> Result<ShrinkReport, ShrinkError> {
    let blocks = frames.blocks();
    let (count, block_frames) = blocks.shape();
    if size % block_frames != 0 {
        return Err(ShrinkError::NotBlockMultiple {
            frames: size,
            block_frames,
        });
    }
    let requested = (size / block_frames) as usize;
    // Eight bytes a block, 256 KiB for a 64 GiB region of 2 MiB blocks:
    // the frames in use and the block. A region past 2^32 blocks (8 PiB of
    // 2 MiB blocks) offers only its first 2^32.
    let mut candidates: Vec<(u32, Reverse<u32>)> = Vec::new();
    candidates
        .try_reserve_exact(count)
        .map_err(|_| ShrinkError::OutOfMemory)?;
    candidates.extend((0..count).filter_map(|block| {
        let used = blocks.block_use(block)?;
        let used_frames = u32::try_from(used.used).unwrap_or(u32::MAX);
        let index = u32::try_from(block).ok()?;
        (used.unmovable == 0 && !used.isolated).then_some((used_frames, Reverse(index)))
    }));
    if requested > candidates.len() {
        return Err(ShrinkError::BelowUnmovable {
            requested,
            movable: candidates.len(),
        });
    }
    // Wholly free first, then the fewest frames to move, ties top-down.
    candidates.sort_unstable();
    let mut report = ShrinkReport {
        requested,
        block_frames,
        ..ShrinkReport::default()
    };
    report
        .taken
        .try_reserve_exact(requested)
        .map_err(|_| ShrinkError::OutOfMemory)?;
    report
        .rolled_back
        .try_reserve_exact(ROLLED_BACK_KEPT.min(count))
        .map_err(|_| ShrinkError::OutOfMemory)?;
    for (_, Reverse(block)) in candidates {
        let block = block as usize;
        if report.complete() {
            break;
        }
        match shrink_block(frames, memory, block, hooks) {
            Ok(done) => {
                report.taken.push(block);
                report.migrated += done.migrated;
                report.retries += done.retries;
            }
            Err((error, done)) => {
                report.migrated += done.migrated;
                report.retries += done.retries;
                if report.rolled_back.len() < ROLLED_BACK_KEPT {
                    report.rolled_back.push((block, error));
                } else {
                    report.rolled_back_unnamed += 1;
                }
                // Other blocks need targets too: no point going on.
                if let ShrinkError::NoTarget { .. } | ShrinkError::OutOfMemory = error {
                    break;
                }
            }
        }
    }
    Ok(report)
}

/// Empties and takes back one block. On an error the block is handed back
/// (isolation undone) and the report says what moved before it.
pub fn shrink_block(
    frames: &MovableFrames,
    memory: &impl FrameMemory,
    block: usize,
    hooks: &impl ShrinkHooks,
) -> Result<BlockReport, (ShrinkError, BlockReport)> {
    let blocks = frames.blocks();
    let (_, block_frames) = blocks.shape();
    let mut report = BlockReport::default();
    let mut used: Vec<Pfn> = Vec::new();
    let mut targets: Vec<Pfn> = Vec::new();
    used.try_reserve_exact(block_frames as usize)
        .and_then(|()| targets.try_reserve_exact(block_frames as usize))
        .map_err(|_| (ShrinkError::OutOfMemory, report))?;
    blocks.isolate(block).map_err(|error| {
        let error = match error {
            IsolateError::Unmovable(pfn) => ShrinkError::Unmovable { block, pfn },
            _ => ShrinkError::NotPlugged { block },
        };
        (error, report)
    })?;
    hooks.isolated(block);
    blocks.each_used(block, |frame| used.push(frame));
    for index in 0..used.len() {
        let target = hooks
            .allow_target(index)
            .then(|| frames.alloc_target())
            .flatten();
        match target {
            Some(target) => targets.push(target),
            None => {
                let error = ShrinkError::NoTarget {
                    block,
                    needed: used.len(),
                    found: index,
                };
                return Err(roll_back(blocks, block, &targets, error, report));
            }
        }
    }
    for (&frame, &target) in used.iter().zip(&targets) {
        let mut attempt = 0;
        let outcome = loop {
            match frames.try_move(frame, target, memory) {
                Move::Busy if attempt < RETRIES => {
                    attempt += 1;
                    report.retries += 1;
                    hooks.back_off(attempt);
                }
                outcome => break outcome,
            }
        };
        let error = match outcome {
            Move::Moved => {
                report.migrated += 1;
                continue;
            }
            Move::Gone => {
                report.gone += 1;
                // The target stays unused: it is freed with the others.
                blocks.free(target);
                continue;
            }
            Move::Busy => ShrinkError::Busy { block, pfn: frame },
            Move::Unowned => ShrinkError::Unmovable { block, pfn: frame },
            Move::Fault => ShrinkError::CopyFault { block, pfn: frame },
        };
        let moved = report.migrated + report.gone;
        return Err(roll_back(
            blocks,
            block,
            &targets[moved as usize..],
            error,
            report,
        ));
    }
    // Isolated and every listed frame moved or freed: nothing can be in use.
    if !blocks.take_block(block) {
        return Err(roll_back(
            blocks,
            block,
            &[],
            ShrinkError::NotPlugged { block },
            report,
        ));
    }
    Ok(report)
}

/// Hands an isolated block back and frees the targets not used.
fn roll_back(
    blocks: &BlockFrames,
    block: usize,
    unused: &[Pfn],
    error: ShrinkError,
    report: BlockReport,
) -> (ShrinkError, BlockReport) {
    for &target in unused {
        blocks.free(target);
    }
    blocks.unisolate(block);
    (error, report)
}
