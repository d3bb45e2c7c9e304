//! Page frames: the task pool's, taken from below the boot identity map
//! (the shared core makes the pool and its per-CPU caches), and the
//! hot-plugged frames' owners, read and written through the direct map
//! ([`HotMemory`]).

use core::sync::atomic::{AtomicU64, Ordering};

use hotkern_kernel::baremetal::PoolError;
use hotkern_kernel::blockframes::{BlockFrames, RegionError};
use hotkern_kernel::movable::{CopyFault, FrameMemory, MovableFrames};
use hotkern_physmem::Pfn;

use crate::arch::boot::IDENTITY_MAP_END;
use crate::arch::memory::PHYSMEM;
use crate::arch::ranges::PAGE_SIZE;
use crate::platform::Kernel;

/// Frames the pool takes: 4 MiB.
pub const POOL_FRAMES: u64 = 1024;
/// The first frame above the boot identity map (4 GiB on x86-64, 2 GiB
/// on arm64): pool frames must be below it, since tasks write to them.
const IDENTITY_MAPPED: u64 = IDENTITY_MAP_END / PAGE_SIZE;

/// Takes the task pool's [`POOL_FRAMES`] frames out of the kernel's
/// physmem, from below the boot identity map ([`Kernel::take_task_pool`]).
pub fn init() -> Result<(), PoolError> {
    Kernel::take_task_pool(&PHYSMEM, Pfn(IDENTITY_MAPPED), POOL_FRAMES)
}

/// The allocator virtio-mem's blocks are handed to, with owner slots so
/// that a shrink can move a used frame ([`set_hot`]).
static HOT: spin::Once<MovableFrames> = spin::Once::new();

/// The hot-plugged frames' allocator and owner table, once [`set_hot`]
/// made it.
pub fn hot() -> Option<&'static MovableFrames> {
    HOT.get()
}

/// Makes the hot-plugged frames' allocator over `blocks` blocks of
/// `block_frames` frames from `first`, with all its bitmaps and its
/// reverse map (a frame's owner slot) on the heap, or, with
/// `maps_on_blocks`, a pointer per block to the bitmaps and reverse map
/// each block brings (`BlockFrames::with_maps_on_blocks`). Owner slots
/// are made a chunk at a time as owners come (a pointer per 4096 frames
/// now), so owned frames may come from every block and no resize
/// allocates for the table. Only the first call makes one; a later call
/// returns it.
#[hotkern_trace::function]
pub fn set_hot(
    first: Pfn,
    blocks: usize,
    block_frames: u64,
    maps_on_blocks: bool,
) -> Result<&'static MovableFrames, RegionError> {
    HOT.try_call_once(|| {
        let region = if maps_on_blocks {
            BlockFrames::with_maps_on_blocks(first, blocks, block_frames)?
        } else {
            BlockFrames::new(first, blocks, block_frames)?
        };
        MovableFrames::over(region)
    })
}

/// The hot-plugged frames as [`FrameMemory`]: the kernel's page tables map
/// every plugged block at its physical address (`memory::map_large`), and
/// the allocator hands out only plugged frames.
#[derive(Debug, Clone, Copy, Default)]
pub struct HotMemory;

impl HotMemory {
    fn word(frame: Pfn, word: usize) -> &'static AtomicU64 {
        let address = frame.0 * PAGE_SIZE + (word as u64 % WORDS) * 8;
        // SAFETY: callers pass frames the allocator handed out (plugged,
        // mapped write-back at their physical address, 8-byte aligned);
        // a block is unmapped only after a grace period once its frames
        // are free, so no reader holds one of its words then.
        unsafe { &*(address as *const AtomicU64) }
    }
}

/// 64-bit words in a frame.
const WORDS: u64 = PAGE_SIZE / 8;

impl FrameMemory for HotMemory {
    fn words(&self) -> usize {
        WORDS as usize
    }

    fn load(&self, frame: Pfn, word: usize) -> u64 {
        Self::word(frame, word).load(Ordering::Relaxed)
    }

    fn store(&self, frame: Pfn, word: usize, value: u64) {
        Self::word(frame, word).store(value, Ordering::Relaxed);
    }

    fn copy(&self, from: Pfn, to: Pfn) -> Result<(), CopyFault> {
        // Word by word through the atomics: readers may load the source
        // at the same time (loads only; the owner's writes wait for the
        // slot the shrink holds). No machine check is caught here, so a
        // copy never reports a fault.
        for word in 0..WORDS as usize {
            self.store(to, word, self.load(from, word));
        }
        Ok(())
    }
}
