//! The driver's steps that both layouts of the machine's memory device
//! share (descriptors on the heap, in [`driver`](super::driver), and on
//! the blocks' runs, in [`runs`](super::runs)): the device's requests, the
//! size plugged, what an unplugged block holds.

use hotkern_kernel::blockframes::Online;
use hotkern_kernel::migrate::ShrinkHooks;
use hotkern_kernel::movable::FrameMemory;
use hotkern_physmem::Pfn;

use super::device::{Answer, DeviceRequest};
use super::system::{MemoryError, MemorySystem, RollbackCause};

/// The migrate protocol's hooks: the driver's failure injection.
pub(super) struct DriverHooks<'a>(pub(super) &'a MemorySystem);

impl ShrinkHooks for DriverHooks<'_> {
    fn isolated(&self, _block: usize) {
        self.0.hold_if_armed();
    }

    fn allow_target(&self, index: usize) -> bool {
        !self.0.target_fails(index)
    }
}

/// Frames of the blocks handed over, their descriptor frames too: what
/// the device counts.
pub(super) fn plugged_frames(system: &MemorySystem) -> u64 {
    let (blocks, block_frames) = system.frames.blocks().shape();
    let handed_over = (0..blocks)
        .filter(|&block| system.frames.blocks().reserved(block).is_some())
        .count() as u64;
    handed_over * block_frames
}

/// Whether the host set a newer size.
pub(super) fn replaced(system: &MemorySystem, generation: u64) -> bool {
    system.device.request().0 != generation
}

/// Sends `request` and waits, bounded, for the device: `Ok(Ok(()))` when
/// it did it, `Ok(Err(cause))` when it refused or failed, and
/// [`MemoryError::DeviceTimeout`] when it did not answer.
pub(super) fn ask(
    system: &MemorySystem,
    request: DeviceRequest,
) -> Result<Result<(), RollbackCause>, MemoryError> {
    let waited = system.config.confirm_timeout;
    match system.device.send(request, waited) {
        Some(Answer::Ack) => Ok(Ok(())),
        Some(Answer::Nack) => Ok(Err(RollbackCause::DeviceRefused)),
        Some(_) => Ok(Err(RollbackCause::DeviceError)),
        None => Err(MemoryError::DeviceTimeout { request, waited }),
    }
}

/// Blocks handed over that hold an unmovable frame, in frames.
pub(super) fn unmovable_frames(system: &MemorySystem) -> u64 {
    let blocks = system.frames.blocks();
    let holding = (0..system.config.blocks)
        .filter(|&block| {
            blocks
                .block_use(block)
                .is_some_and(|used| used.unmovable > 0)
        })
        .count();
    holding as u64 * system.config.block_frames
}

/// What unplugged memory holds: nothing the driver wrote. The device
/// drops an unplugged block's contents (virtio-mem makes no promise about
/// them); the arena is overwritten so that a read of a frame from a block
/// gone — a reader that skipped its slot's sequence check — sees garbage,
/// not the data it hoped for.
pub(crate) const UNPLUGGED: u64 = 0xdead_dead_dead_dead;

pub(super) fn forget(system: &MemorySystem, block: usize) {
    let start = system.block_start(block).0;
    for frame in start..start + system.config.block_frames {
        for word in 0..system.memory.words() {
            system.memory.store(Pfn(frame), word, UNPLUGGED);
        }
    }
}

pub(super) fn online_of(system: &MemorySystem, block: usize) -> Online {
    if block < system.config.kernel_blocks {
        Online::Kernel
    } else {
        Online::Movable
    }
}
