//! What the memory device is inside the machine's kernel: its shape, the
//! errors and reports of a resize, and [`MemorySystem`], which holds the
//! device, the allocator over its region, the arena and the owners. Below
//! the driver, the tasks and the kernel, which all reach it.

use std::collections::BTreeMap;
use std::fmt;
use std::ptr::NonNull;
use std::sync::atomic::AtomicU64;
use std::thread::JoinHandle;
use std::time::Duration;

use hotkern_kernel::blockframes::BlockFrames;
use hotkern_kernel::frames::FramePool;
use hotkern_kernel::migrate::ShrinkError;
use hotkern_kernel::movable::{Arena, MovableFrames, Slot};
use hotkern_kernel::runs::Runs;
use hotkern_physmem::{Pfn, PhysmemError, PAGE_SIZE};
use parking_lot::{Condvar, Mutex};

use super::device::*;

/// The shape of a machine's memory device.
///
/// ```
/// use hotkern_machine::{Machine, MemoryDeviceConfig};
///
/// let config = MemoryDeviceConfig { blocks: 4, block_frames: 16, plugged_blocks: 2, ..Default::default() };
/// let machine = Machine::builder().cpus(2).memory_device(config).build()?;
/// assert_eq!(machine.memory_device().unwrap().plugged_size(), 32);
/// # Ok::<(), hotkern_machine::MachineError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MemoryDeviceConfig {
    /// Blocks in the region (default 16).
    pub blocks: usize,
    /// Frames in a block (default 64): virtio-mem's `block_size`.
    pub block_frames: u64,
    /// Blocks plugged at start, the lowest ones (default 0).
    pub plugged_blocks: usize,
    /// Of the region's lowest blocks, how many are handed over for the
    /// kernel whenever plugged (unmovable frames may land there), as
    /// Linux's `online_kernel`; the others are movable only (default 0).
    pub kernel_blocks: usize,
    /// 64-bit words in a frame of the arena (default 16): frames are
    /// small so that a test holds many.
    pub frame_words: usize,
    /// How long the driver waits for the device to answer a request
    /// (default 10 s: long enough for a loaded host to schedule the
    /// device thread).
    pub confirm_timeout: Duration,
    /// Page descriptors and allocator bitmaps on the plugged memory
    /// itself, in the shared core's runs layout
    /// ([`hotkern_kernel::runs`], the bare-metal driver's way, Linux's
    /// `memmap_on_memory`): each run's first block keeps them back and the
    /// allocator never hands those frames out; otherwise physmem and the
    /// allocator take them from the heap and every frame is handed out
    /// (default false).
    pub descriptors_on_block: bool,
    /// With [`MemoryDeviceConfig::descriptors_on_block`], the most blocks
    /// a grow plugs as one physmem segment whose descriptors and bitmaps
    /// its first block holds (default 1: each block holds its own).
    pub run_blocks: usize,
}

impl Default for MemoryDeviceConfig {
    fn default() -> Self {
        MemoryDeviceConfig {
            blocks: 16,
            block_frames: 64,
            plugged_blocks: 0,
            kernel_blocks: 0,
            frame_words: 16,
            confirm_timeout: Duration::from_secs(10),
            descriptors_on_block: false,
            run_blocks: 1,
        }
    }
}

impl MemoryDeviceConfig {
    pub(crate) fn validate(&self) -> Result<(), &'static str> {
        if self.blocks == 0
            || self.block_frames == 0
            || self.frame_words == 0
            || self.run_blocks == 0
        {
            return Err(
                "a memory device needs blocks, frames per block, words per frame and blocks per run",
            );
        }
        if self.plugged_blocks > self.blocks || self.kernel_blocks > self.blocks {
            return Err("a memory device cannot plug more blocks than its region holds");
        }
        Ok(())
    }
}

/// Why a resize was refused or stopped. Nothing is lost when it is: the
/// blocks the device counts as plugged are plugged in physmem and the
/// allocator, every owned frame intact.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum MemoryError {
    /// The machine has no memory device.
    NoDevice,
    /// The size is not a whole number of blocks.
    NotBlockMultiple {
        /// Frames asked for.
        frames: u64,
        /// Frames in a block.
        block_frames: u64,
    },
    /// The size is more than the region holds.
    BeyondRegion {
        /// Frames asked for.
        frames: u64,
        /// Frames in the region.
        region_frames: u64,
    },
    /// The size is below what holds unmovable frames.
    BelowUnmovable {
        /// Frames asked for.
        frames: u64,
        /// Frames of the blocks that hold an unmovable frame.
        unmovable_frames: u64,
    },
    /// The device did not answer a request within the bound; the block
    /// stays plugged (a shrink's block is handed back).
    DeviceTimeout {
        /// The request left unanswered.
        request: DeviceRequest,
        /// How long the driver waited.
        waited: Duration,
    },
    /// The migrate protocol refused the shrink as a whole.
    Shrink(ShrinkError),
    /// physmem refused a block.
    Physmem(PhysmemError),
    /// The driver did not finish the resize within the bound.
    DriverTimeout(Duration),
}

impl fmt::Display for MemoryError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemoryError::NoDevice => f.write_str("the machine has no memory device"),
            MemoryError::NotBlockMultiple {
                frames,
                block_frames,
            } => write!(
                f,
                "{frames} frames is not a multiple of the {block_frames}-frame block"
            ),
            MemoryError::BeyondRegion {
                frames,
                region_frames,
            } => write!(
                f,
                "{frames} frames is more than the region's {region_frames}"
            ),
            MemoryError::BelowUnmovable {
                frames,
                unmovable_frames,
            } => write!(
                f,
                "{frames} frames is below the {unmovable_frames} frames of blocks holding unmovable frames"
            ),
            MemoryError::DeviceTimeout { request, waited } => {
                write!(f, "the device did not answer {request:?} within {waited:?}")
            }
            MemoryError::Shrink(error) => write!(f, "shrink: {error}"),
            MemoryError::Physmem(error) => write!(f, "physmem: {error}"),
            MemoryError::DriverTimeout(waited) => {
                write!(f, "the driver did not finish within {waited:?}")
            }
        }
    }
}

impl std::error::Error for MemoryError {}

/// Why a block's change was undone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RollbackCause {
    /// The migrate protocol handed the block back (isolation undone).
    Migration(ShrinkError),
    /// The device refused (NACK) the block's request; a shrink's block
    /// went back to physmem and the allocator.
    DeviceRefused,
    /// The device called the request an error.
    DeviceError,
    /// The block holds the descriptors and bitmaps of blocks of its run
    /// that stay plugged ([`MemoryDeviceConfig::descriptors_on_block`]):
    /// it goes only with the last of them.
    HoldsDescriptors,
}

/// How a resize ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResizeOutcome {
    /// The requested size was reached.
    Completed,
    /// Stopped short: see [`ResizeReport::rolled_back`].
    Partial,
    /// A newer requested size arrived; the driver stopped between blocks
    /// (or never started) and followed that one.
    Superseded,
}

/// What one resize did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResizeReport {
    /// The request's generation.
    pub generation: u64,
    /// Frames asked for.
    pub requested: u64,
    /// Frames plugged before.
    pub before: u64,
    /// Frames plugged after: what the device was told.
    pub reached: u64,
    /// Frames migrated out of blocks being taken.
    pub migrated: u64,
    /// Back-offs on frames their owners were writing.
    pub retries: u64,
    /// Blocks whose change was undone, with why.
    pub rolled_back: Vec<(usize, RollbackCause)>,
    /// How it ended.
    pub outcome: ResizeOutcome,
    /// Time the driver spent on it.
    pub nanos: u64,
}

/// A failure to inject into the driver's next shrink.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemoryFailure {
    /// The `at`-th target allocation of the next block with frames to
    /// migrate fails (once).
    TargetAllocation {
        /// Which target, from 0.
        at: usize,
    },
    /// The driver stops right after isolating the next block, until
    /// [`Machine::release_memory_hold`](crate::Machine::release_memory_hold):
    /// lets a test set a new size during a shrink.
    HoldAfterIsolation,
}

#[derive(Default)]
pub(super) struct Injected {
    pub(super) target_failure_at: Option<usize>,
    pub(super) hold_armed: bool,
    pub(super) held: bool,
}

#[derive(Default)]
pub(super) struct Results {
    pub(super) handled: u64,
    pub(super) reports: BTreeMap<u64, Result<ResizeReport, MemoryError>>,
}

/// Everything of the memory device inside the machine: the device, the
/// allocator over its region, the arena, the owners, the driver's state.
pub(crate) struct MemorySystem {
    pub(crate) config: MemoryDeviceConfig,
    pub(crate) device: std::sync::Arc<MemoryDevice>,
    pub(crate) frames: MovableFrames,
    pub(crate) memory: Arena,
    /// Stands in for each block's first frames when the descriptors and
    /// bitmaps live there ([`Runs::holder_frames`] 4 KiB frames a block):
    /// the arena's frames are smaller than the 4 KiB physmem counts
    /// descriptor frames in. Empty otherwise.
    descriptor_memory: Box<[AtomicU64]>,
    /// Which block holds whose descriptors and bitmaps, with
    /// [`MemoryDeviceConfig::descriptors_on_block`]; changed by the driver
    /// under `resizing`.
    pub(super) runs: Option<Mutex<Runs>>,
    /// Owned frames: slot → (owner, generation written).
    pub(super) owners: Mutex<BTreeMap<Slot, (u64, u64)>>,
    /// Unmovable frames handed out.
    pub(super) unmovable: Mutex<Vec<Pfn>>,
    /// Held by the driver through a resize, and by the invariant check.
    pub(super) resizing: Mutex<()>,
    /// Task reads that found another owner's or generation's pattern.
    pub(super) torn_reads: AtomicU64,
    pub(super) results: Mutex<Results>,
    pub(super) results_bell: Condvar,
    pub(super) injected: Mutex<Injected>,
    pub(super) hold_bell: Condvar,
    pub(super) threads: Mutex<Vec<JoinHandle<()>>>,
}

impl MemorySystem {
    pub(crate) fn new(config: MemoryDeviceConfig, first: Pfn) -> Result<Self, &'static str> {
        config.validate()?;
        let too_large = |_| "the memory device's region is too large";
        let (blocks, block_frames) = (config.blocks, config.block_frames);
        let region = blocks * block_frames as usize;
        let (frames, runs, words) = if config.descriptors_on_block {
            // Descriptor frames are physmem's 4 KiB ones, whatever the
            // arena's frame size: `Runs` counts them so, and refuses a
            // run whose holder they would fill.
            let runs = Runs::new(
                blocks,
                block_frames,
                config.run_blocks,
                FramePool::descriptor_frames,
            )
            .map_err(|_| "a run's descriptors and bitmaps would fill its first block")?;
            let words = blocks * (runs.holder_frames() * PAGE_SIZE / 8) as usize;
            let maps =
                BlockFrames::with_maps_on_blocks(first, blocks, block_frames).map_err(too_large)?;
            let frames = MovableFrames::over(maps).map_err(too_large)?;
            (frames, Some(Mutex::new(runs)), words)
        } else {
            let frames = MovableFrames::new(first, blocks, block_frames).map_err(too_large)?;
            (frames, None, 0)
        };
        Ok(MemorySystem {
            descriptor_memory: (0..words).map(|_| AtomicU64::new(0)).collect(),
            config,
            device: std::sync::Arc::new(MemoryDevice::new(
                first,
                config.blocks,
                config.block_frames,
            )),
            frames,
            runs,
            memory: Arena::new(first, region, config.frame_words),
            owners: Mutex::new(BTreeMap::new()),
            unmovable: Mutex::new(Vec::new()),
            resizing: Mutex::new(()),
            torn_reads: AtomicU64::new(0),
            results: Mutex::new(Results::default()),
            results_bell: Condvar::new(),
            injected: Mutex::new(Injected::default()),
            hold_bell: Condvar::new(),
            threads: Mutex::new(Vec::new()),
        })
    }

    /// What stands in for `block`'s first frames, `offset` bytes in: where
    /// the runs layout puts descriptors and bitmaps. `None` without
    /// [`MemoryDeviceConfig::descriptors_on_block`] or past the block's
    /// share.
    pub(crate) fn block_memory(&self, block: usize, offset: u64) -> Option<NonNull<u64>> {
        let words = self.descriptor_memory.len() / self.config.blocks;
        let offset = usize::try_from(offset / 8).ok().filter(|&at| at < words)?;
        let word = self.descriptor_memory.get(block * words + offset)?;
        NonNull::new(word.as_ptr())
    }

    /// The block's first frame.
    pub(crate) fn block_start(&self, block: usize) -> Pfn {
        Pfn(self.device.first().0 + block as u64 * self.config.block_frames)
    }

    pub(super) fn publish(&self, generation: u64, result: Result<ResizeReport, MemoryError>) {
        let mut results = self.results.lock();
        results.reports.insert(generation, result);
        results.handled = results.handled.max(generation);
        // Keep the last thousand: a storm's host waits for recent ones.
        while results.reports.len() > 1024 {
            results.reports.pop_first();
        }
        self.results_bell.notify_all();
    }

    /// Waits for the driver's result for `generation`.
    pub(crate) fn wait(
        &self,
        generation: u64,
        bound: Duration,
    ) -> Result<ResizeReport, MemoryError> {
        let deadline = std::time::Instant::now() + bound;
        let mut results = self.results.lock();
        while results.handled < generation {
            if self
                .results_bell
                .wait_until(&mut results, deadline)
                .timed_out()
            {
                return Err(MemoryError::DriverTimeout(bound));
            }
        }
        results
            .reports
            .get(&generation)
            .cloned()
            .unwrap_or(Err(MemoryError::DriverTimeout(bound)))
    }

    pub(crate) fn inject(&self, failure: MemoryFailure) {
        let mut injected = self.injected.lock();
        match failure {
            MemoryFailure::TargetAllocation { at } => injected.target_failure_at = Some(at),
            MemoryFailure::HoldAfterIsolation => injected.hold_armed = true,
        }
    }

    /// Whether the `index`-th target allocation is the one to fail.
    pub(super) fn target_fails(&self, index: usize) -> bool {
        let mut injected = self.injected.lock();
        let fails = injected.target_failure_at == Some(index);
        if fails {
            injected.target_failure_at = None;
        }
        fails
    }

    /// Stops here, if a hold is armed, until released.
    pub(super) fn hold_if_armed(&self) {
        let mut injected = self.injected.lock();
        if !injected.hold_armed {
            return;
        }
        injected.held = true;
        self.hold_bell.notify_all();
        while injected.hold_armed {
            self.hold_bell.wait(&mut injected);
        }
        injected.held = false;
    }

    pub(crate) fn wait_held(&self, bound: Duration) -> bool {
        let deadline = std::time::Instant::now() + bound;
        let mut injected = self.injected.lock();
        while !injected.held {
            if self
                .hold_bell
                .wait_until(&mut injected, deadline)
                .timed_out()
            {
                return false;
            }
        }
        true
    }

    pub(crate) fn release_hold(&self) {
        self.injected.lock().hold_armed = false;
        self.hold_bell.notify_all();
    }

    pub(crate) fn add_thread(&self, handle: JoinHandle<()>) {
        self.threads.lock().push(handle);
    }

    /// Stops the device and the driver and joins their threads.
    pub(crate) fn stop(&self) {
        self.release_hold();
        self.device.stop();
        for handle in self.threads.lock().drain(..) {
            let _ = handle.join();
        }
    }
}
