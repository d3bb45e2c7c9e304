//! The machine's memory device, so that taking memory away while tasks use
//! it runs in `cargo test`: a region of "physical" memory (an [`Arena`] of
//! frames), a device modelled on virtio-mem ([`MemoryDevice`]: the host sets
//! a requested size, the driver plugs and unplugs blocks by request, the
//! device may refuse), and a driver thread in the machine's kernel that
//! follows the requested size.
//!
//! * **Grow**: PLUG a run of unplugged blocks at the device, plug them into
//!   physmem, hand them to the allocator ([`BlockFrames`], movable).
//! * **Shrink**, one block at a time: the migrate protocol
//!   ([`hotkern_kernel::migrate`]: pick, isolate, allocate targets, move
//!   each used frame by switching its owner's [`Slot`], take the block),
//!   then unplug it from physmem, then UNPLUG it at the device: the
//!   confirmation. A refused or unanswered confirmation hands the block
//!   back to physmem and the allocator: nothing is lost.
//! * Between blocks the driver re-reads the requested size: a grow or a
//!   further shrink arriving during a shrink ends it there
//!   ([`ResizeOutcome::Superseded`]) and the driver follows the new size.
//! * With [`MemoryDeviceConfig::descriptors_on_block`], descriptors and
//!   bitmaps live on the blocks in the shared core's runs layout
//!   ([`hotkern_kernel::runs`], as the bare-metal driver keeps them): a
//!   run's first block holds them and goes only with its run's last.
//!
//! Tasks own movable frames through slots ([`Context::alloc_movable`]) and
//! write a pattern of (owner, generation) ([`frame_pattern`]); the
//! machine's memory invariants ([`Machine::check_memory`]) re-read every
//! owned frame, count every frame once, and compare the device, physmem
//! and the allocator block by block.
//!
//! [`BlockFrames`]: hotkern_kernel::blockframes::BlockFrames
//! [`Context::alloc_movable`]: crate::Context::alloc_movable

mod device;
pub(crate) mod driver;
mod owners;
mod runs;
mod steps;
pub(crate) mod system;

use std::time::Duration;

use hotkern_physmem::Pfn;

use crate::Machine;

pub use device::{DeviceRequest, MemoryDevice};
pub use owners::{frame_pattern, MemoryViolation};
use system::MemorySystem;
pub use system::{
    MemoryDeviceConfig, MemoryError, MemoryFailure, ResizeOutcome, ResizeReport, RollbackCause,
};

/// How long [`Machine::resize_memory`] waits for the driver.
const DRIVER_BOUND: Duration = Duration::from_secs(60);

impl Machine {
    fn memory_system(&self) -> Result<&MemorySystem, MemoryError> {
        self.kernel
            .memory
            .get()
            .map(|system| &**system)
            .ok_or(MemoryError::NoDevice)
    }

    /// The memory device, as the host sees it; `None` if the machine was
    /// built without one ([`MachineBuilder::memory_device`](crate::MachineBuilder::memory_device)).
    pub fn memory_device(&self) -> Option<&MemoryDevice> {
        self.kernel.memory.get().map(|system| &*system.device)
    }

    /// Sets the device's requested size to `frames` and waits for the
    /// driver to follow it: the report says what it reached and how it
    /// ended; a bad request is a typed error and changes nothing.
    ///
    /// ```
    /// use hotkern_machine::{Machine, MemoryDeviceConfig, MemoryError, ResizeOutcome};
    ///
    /// let config = MemoryDeviceConfig { blocks: 4, block_frames: 16, ..Default::default() };
    /// let machine = Machine::builder().cpus(2).memory_device(config).build()?;
    /// assert_eq!(machine.resize_memory(48).unwrap().outcome, ResizeOutcome::Completed);
    /// assert_eq!(
    ///     machine.resize_memory(40),
    ///     Err(MemoryError::NotBlockMultiple { frames: 40, block_frames: 16 })
    /// );
    /// assert_eq!(machine.resize_memory(16).unwrap().reached, 16);
    /// assert!(machine.check_memory().is_empty());
    /// # Ok::<(), hotkern_machine::MachineError>(())
    /// ```
    pub fn resize_memory(&self, frames: u64) -> Result<ResizeReport, MemoryError> {
        let system = self.memory_system()?;
        let generation = system.device.request_size(frames);
        system.wait(generation, DRIVER_BOUND)
    }

    /// Waits for the driver's result for the request of `generation` (as
    /// [`MemoryDevice::request_size`] returned it); one replaced before
    /// the driver got to it reports [`ResizeOutcome::Superseded`].
    pub fn wait_memory(&self, generation: u64) -> Result<ResizeReport, MemoryError> {
        self.memory_system()?.wait(generation, DRIVER_BOUND)
    }

    /// Arms a failure of the driver's next shrink.
    pub fn inject_memory_failure(&self, failure: MemoryFailure) -> Result<(), MemoryError> {
        self.memory_system()?.inject(failure);
        Ok(())
    }

    /// Waits until the driver stops at an armed
    /// [`MemoryFailure::HoldAfterIsolation`]; false after `timeout`.
    pub fn wait_memory_held(&self, timeout: Duration) -> bool {
        self.memory_system()
            .is_ok_and(|system| system.wait_held(timeout))
    }

    /// Lets a held driver go on.
    pub fn release_memory_hold(&self) {
        if let Ok(system) = self.memory_system() {
            system.release_hold();
        }
    }

    /// An unmovable frame from the device's kernel blocks, as a kernel
    /// structure would take one: it pins its block.
    pub fn alloc_unmovable(&self) -> Option<Pfn> {
        self.memory_system().ok()?.alloc_unmovable()
    }

    /// Frees what [`Machine::alloc_unmovable`] gave; false for any other
    /// frame.
    pub fn free_unmovable(&self, frame: Pfn) -> bool {
        self.memory_system()
            .is_ok_and(|system| system.free_unmovable(frame))
    }

    /// Every memory invariant (empty without a device): the device,
    /// physmem and the allocator agree on each block, no block stays
    /// isolated, every owned frame holds its owner's last pattern, no frame
    /// is owned twice or lost, tasks read nothing torn. Waits for a resize
    /// in progress and keeps owners still while it looks.
    pub fn check_memory(&self) -> Vec<MemoryViolation> {
        self.memory_system()
            .map(|system| system.check(self.kernel.pages.pool()))
            .unwrap_or_default()
    }
}
