//! Page frames for the tasks: real frames hot-unplugged from the kernel's
//! physmem into a frame pool, with per-CPU page caches in front of it —
//! the shared core's `FramePool` (its own physmem, one descriptor per
//! frame, a frame given back twice caught) and `PageCaches` (Linux's
//! per-CPU page lists), the same code the user-mode machine's tasks
//! allocate through. The `mm:pagecache` hotplug step creates, drains and
//! frees each CPU's cache.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use hotkern_kernel::frames::FramePool;
use hotkern_kernel::pagecache::PageCaches;
use hotkern_physmem::{PageCount, Pfn};

use crate::cpu::MAX_CPUS;
use crate::memory::PHYSMEM;
use crate::{cpu, ranges::PAGE_SIZE};

/// Frames the pool takes: 4 MiB.
pub const POOL_FRAMES: u64 = 1024;
/// The first frame above the boot identity map: pool frames must be
/// below it, since tasks write to them.
const IDENTITY_MAPPED: u64 = (4 << 30) / PAGE_SIZE;

static PAGES: spin::Once<PageCaches> = spin::Once::new();

/// The page caches, once [`init`] made them.
pub fn get() -> Option<&'static PageCaches> {
    PAGES.get()
}

/// Why the pool could not be set up.
#[derive(Debug)]
pub enum PagesError {
    /// No segment below 4 GiB holds the pool's frames.
    NoRoom,
    /// physmem refused the unplug or the pool's plug.
    Physmem(hotkern_physmem::PhysmemError),
}

impl core::fmt::Display for PagesError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            PagesError::NoRoom => write!(f, "no segment below 4 GiB holds {POOL_FRAMES} frames"),
            PagesError::Physmem(error) => write!(f, "physmem: {error}"),
        }
    }
}

/// Takes the top [`POOL_FRAMES`] frames of the largest identity-mapped
/// segment out of the kernel's physmem (a hot-unplug, then reclaim once no
/// reader holds them) and makes the pool and the caches over them.
pub fn init() -> Result<(), PagesError> {
    let first = {
        let guard = PHYSMEM.read_on(cpu::current().id() as usize);
        let segment = guard
            .segments()
            .filter(|s| s.end().0 <= IDENTITY_MAPPED && s.len().0 > 2 * POOL_FRAMES)
            .max_by_key(|s| s.len().0)
            .ok_or(PagesError::NoRoom)?;
        segment.end().0 - POOL_FRAMES
    };
    PHYSMEM
        .unplug(Pfn(first), PageCount(POOL_FRAMES))
        .map_err(PagesError::Physmem)?;
    PHYSMEM.reclaim();
    let pool = FramePool::new(Pfn(first), PageCount(POOL_FRAMES)).map_err(PagesError::Physmem)?;
    PAGES.call_once(|| PageCaches::new(MAX_CPUS, pool));
    Ok(())
}

/// Takes a frame through `cpu`'s cache, writes `pattern` into it, reads it
/// back and frees it; false if the pattern did not come back (or there was
/// no frame).
pub fn touch(cpu: u32, pattern: u64) -> bool {
    let Some(pages) = get() else { return false };
    let Some(frame) = pages.alloc(cpu as usize) else {
        return false;
    };
    let word = (frame.0 * PAGE_SIZE) as *mut u64;
    // SAFETY: the frame is below 4 GiB (identity-mapped, writable RAM),
    // out of the kernel's physmem since `init`, and this task holds it
    // until `free_frame` below: nothing else reads or writes it.
    let back = unsafe {
        word.write_volatile(pattern);
        word.read_volatile()
    };
    pages.free_frame(cpu as usize, frame);
    back == pattern
}

/// Hot-plugged frames, block by block: the frame allocator virtio-mem's
/// memory is handed to. A block's frames are a bitmap (set = free), so a
/// shrink can tell a wholly free block at once and take it back whole
/// (Linux's virtio-mem offlines a memory block only when every page in it
/// can be isolated; this allocator never migrates, it refuses instead).
/// Blocks are kept by first frame, so adding, taking back and freeing
/// find theirs in O(log n).
pub struct HotFrames {
    blocks: spin::Mutex<BTreeMap<u64, HotBlock>>,
}

struct HotBlock {
    frames: u64,
    free: Vec<u64>,
    free_count: u64,
}

/// The hot-plugged frames.
pub static HOT: HotFrames = HotFrames {
    blocks: spin::Mutex::new(BTreeMap::new()),
};

impl HotFrames {
    /// Hands `frames` frames from `first` to the allocator, all free.
    /// Refused (false) if the heap cannot hold the bitmap or the block
    /// is already there.
    pub fn add_block(&self, first: Pfn, frames: u64) -> bool {
        let words = frames.div_ceil(64) as usize;
        let mut free = Vec::new();
        if frames == 0 || free.try_reserve_exact(words).is_err() {
            return false;
        }
        free.extend((0..words).map(|word| {
            let left = frames - 64 * word as u64;
            if left >= 64 {
                u64::MAX
            } else {
                (1 << left) - 1
            }
        }));
        let mut blocks = self.blocks.lock();
        if blocks.contains_key(&first.0) {
            return false;
        }
        blocks.insert(
            first.0,
            HotBlock {
                frames,
                free,
                free_count: frames,
            },
        );
        true
    }

    /// Takes the block starting at `first` back if every frame of it is
    /// free; false (the block stays) otherwise.
    pub fn take_block(&self, first: Pfn) -> bool {
        let mut blocks = self.blocks.lock();
        match blocks.get(&first.0) {
            Some(block) if block.free_count == block.frames => {
                blocks.remove(&first.0);
                true
            }
            _ => false,
        }
    }

    /// A free frame, if any block has one (low blocks first).
    pub fn alloc(&self) -> Option<Pfn> {
        let mut blocks = self.blocks.lock();
        let (&first, block) = blocks.iter_mut().find(|(_, b)| b.free_count > 0)?;
        let (word, bits) = block.free.iter_mut().enumerate().find(|(_, w)| **w != 0)?;
        let bit = bits.trailing_zeros();
        *bits &= !(1 << bit);
        block.free_count -= 1;
        Some(Pfn(first + 64 * word as u64 + u64::from(bit)))
    }

    /// The block holding `frame`, if any.
    fn block_of(blocks: &mut BTreeMap<u64, HotBlock>, frame: Pfn) -> Option<(u64, &mut HotBlock)> {
        let (&first, block) = blocks.range_mut(..=frame.0).next_back()?;
        (frame.0 < first + block.frames).then_some((first, block))
    }

    /// Frees a frame; false if it is already free or in no block (a
    /// double free or a stray frame, refused).
    pub fn free(&self, frame: Pfn) -> bool {
        let mut blocks = self.blocks.lock();
        let Some((first, block)) = Self::block_of(&mut blocks, frame) else {
            return false;
        };
        let index = frame.0 - first;
        let (word, bit) = ((index / 64) as usize, index % 64);
        if block.free[word] & (1 << bit) != 0 {
            return false;
        }
        block.free[word] |= 1 << bit;
        block.free_count += 1;
        true
    }

    /// Whether `frame` is in a block the allocator holds.
    pub fn holds(&self, frame: Pfn) -> bool {
        Self::block_of(&mut self.blocks.lock(), frame).is_some()
    }

    /// `(free, total)` frames.
    pub fn counts(&self) -> (u64, u64) {
        let blocks = self.blocks.lock();
        blocks.values().fold((0, 0), |(free, total), b| {
            (free + b.free_count, total + b.frames)
        })
    }
}
