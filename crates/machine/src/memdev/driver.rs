//! The machine kernel's driver for its memory device: a thread that waits
//! for the host to change the requested size (virtio-mem's configuration
//! change interrupt) and follows it, block run by block run when growing,
//! block by block when shrinking, as Linux's `drivers/virtio/virtio_mem.c`
//! re-reads the requested size between memory blocks.

use std::sync::Arc;
use std::time::Instant;

use hotkern_kernel::frames::FramePool;
use hotkern_kernel::migrate::{self, ShrinkError};
use hotkern_physmem::{PageCount, Pfn};

use super::device::DeviceRequest;
use super::runs;
use super::steps::{
    ask, forget, online_of, plugged_frames, replaced, unmovable_frames, DriverHooks,
};
use super::system::{
    MemoryDeviceConfig, MemoryError, MemorySystem, ResizeOutcome, ResizeReport, RollbackCause,
};
use crate::error::MachineError;
use crate::kernel::Kernel;

/// Plugs the configured boot blocks, then starts the device thread and the
/// driver thread.
pub(crate) fn start(kernel: &Arc<Kernel>, system: &Arc<MemorySystem>) -> std::io::Result<()> {
    let plugged = system.config.plugged_blocks;
    if plugged > 0 {
        // Before any thread runs: the device and the driver agree at boot.
        let boot = system.device.boot_plug(plugged);
        debug_assert!(boot);
        let pool = kernel.pages.pool();
        let boot_error = |error: MemoryError| std::io::Error::other(error.to_string());
        if system.runs.is_some() {
            // In runs, never across the kernel blocks' end, as a grow.
            let kernel_end = system.config.kernel_blocks.min(plugged);
            for (first, count) in [(0, kernel_end), (kernel_end, plugged - kernel_end)] {
                if count > 0 {
                    runs::hand_over(pool, system, first, count).map_err(boot_error)?;
                }
            }
        } else {
            for block in 0..plugged {
                hand_over(pool, system, block, 1).map_err(boot_error)?;
            }
        }
    }
    system.add_thread(system.device.spawn()?);
    let (kernel, theirs) = (Arc::clone(kernel), Arc::clone(system));
    let driver = std::thread::Builder::new()
        .name("memdev/driver".into())
        .spawn(move || run(kernel.pages.pool(), &theirs))?;
    system.add_thread(driver);
    Ok(())
}

fn run(pool: &FramePool, system: &MemorySystem) {
    let mut seen = 0;
    while system.device.wait_request(seen) {
        let (generation, requested) = system.device.request();
        // Requests set and replaced before the driver woke were never
        // followed.
        for skipped in seen + 1..generation {
            system.publish(skipped, Ok(untouched(system, skipped)));
        }
        seen = generation;
        let result = {
            let _resizing = system.resizing.lock();
            follow(pool, system, generation, requested)
        };
        system.publish(generation, result);
    }
}

fn untouched(system: &MemorySystem, generation: u64) -> ResizeReport {
    let now = plugged_frames(system);
    ResizeReport {
        generation,
        requested: system.device.requested_at(generation),
        before: now,
        reached: now,
        migrated: 0,
        retries: 0,
        rolled_back: Vec::new(),
        outcome: ResizeOutcome::Superseded,
        nanos: 0,
    }
}

fn follow(
    pool: &FramePool,
    system: &MemorySystem,
    generation: u64,
    requested: u64,
) -> Result<ResizeReport, MemoryError> {
    let block_frames = system.config.block_frames;
    let region_frames = system.config.blocks as u64 * block_frames;
    if requested % block_frames != 0 {
        return Err(MemoryError::NotBlockMultiple {
            frames: requested,
            block_frames,
        });
    }
    if requested > region_frames {
        return Err(MemoryError::BeyondRegion {
            frames: requested,
            region_frames,
        });
    }
    let start = Instant::now();
    let mut report = untouched(system, generation);
    report.requested = requested;
    report.outcome = ResizeOutcome::Completed;
    let superseded = if requested > report.before {
        grow(pool, system, generation, requested, &mut report)?
    } else if requested < report.before {
        shrink(pool, system, generation, requested, &mut report)?
    } else {
        false
    };
    report.reached = plugged_frames(system);
    report.nanos = start.elapsed().as_nanos() as u64;
    report.outcome = if superseded {
        ResizeOutcome::Superseded
    } else if report.reached == requested {
        ResizeOutcome::Completed
    } else {
        ResizeOutcome::Partial
    };
    Ok(report)
}

/// Plugs `first..first + count` into physmem and hands them to the
/// allocator; the device has them plugged already.
fn hand_over(
    pool: &FramePool,
    system: &MemorySystem,
    first: usize,
    count: usize,
) -> Result<(), MemoryError> {
    if system.runs.is_some() {
        return runs::hand_over(pool, system, first, count);
    }
    let frames = PageCount(count as u64 * system.config.block_frames);
    pool.plug_unpooled(system.block_start(first), frames)
        .map_err(MemoryError::Physmem)?;
    let added =
        system
            .frames
            .blocks()
            .add_blocks_reserving(first, count, online_of(system, first), 0);
    debug_assert!(added, "blocks the device plugged are new to the allocator");
    Ok(())
}

/// The next run of unplugged blocks to plug, at most `wanted` long, never
/// across the kernel blocks' end (they are handed over differently).
fn next_run(system: &MemorySystem, wanted: usize) -> Option<(usize, usize)> {
    let blocks = system.frames.blocks();
    let absent = |block: usize| blocks.block_use(block).is_none();
    let first = (0..system.config.blocks).find(|&block| absent(block))?;
    // Each PLUG one run, as the bare-metal driver's.
    let wanted = match &system.runs {
        Some(runs) => wanted.min(runs.lock().run_blocks()),
        None => wanted,
    };
    let limit = if first < system.config.kernel_blocks {
        system.config.kernel_blocks
    } else {
        system.config.blocks
    };
    let count = (first..limit)
        .take(wanted)
        .take_while(|&block| absent(block))
        .count();
    Some((first, count))
}

/// Returns whether a newer request stopped it.
fn grow(
    pool: &FramePool,
    system: &MemorySystem,
    generation: u64,
    requested: u64,
    report: &mut ResizeReport,
) -> Result<bool, MemoryError> {
    let block_frames = system.config.block_frames;
    while plugged_frames(system) < requested {
        if replaced(system, generation) {
            return Ok(true);
        }
        let wanted = ((requested - plugged_frames(system)) / block_frames) as usize;
        let Some((first, count)) = next_run(system, wanted) else {
            break;
        };
        if let Err(cause) = ask(system, DeviceRequest::Plug { first, count })? {
            report.rolled_back.push((first, cause));
            break;
        }
        if let Err(error) = hand_over(pool, system, first, count) {
            let _ = system.device.send(
                DeviceRequest::Unplug { first, count },
                system.config.confirm_timeout,
            );
            return Err(error);
        }
    }
    Ok(false)
}

/// Returns whether a newer request stopped it.
pub(super) fn shrink(
    pool: &FramePool,
    system: &MemorySystem,
    generation: u64,
    requested: u64,
    report: &mut ResizeReport,
) -> Result<bool, MemoryError> {
    let block_frames = system.config.block_frames;
    let unmovable = unmovable_frames(system);
    if requested < unmovable {
        return Err(MemoryError::BelowUnmovable {
            frames: requested,
            unmovable_frames: unmovable,
        });
    }
    let hooks = DriverHooks(system);
    if system.runs.is_some() {
        return runs::shrink(pool, system, generation, requested, report, &hooks);
    }
    while plugged_frames(system) > requested {
        if replaced(system, generation) {
            return Ok(true);
        }
        let done = migrate::shrink(&system.frames, &system.memory, block_frames, &hooks).map_err(
            |error| match error {
                ShrinkError::BelowUnmovable { .. } => MemoryError::BelowUnmovable {
                    frames: requested,
                    unmovable_frames: unmovable_frames(system),
                },
                error => MemoryError::Shrink(error),
            },
        )?;
        report.migrated += done.migrated;
        report.retries += done.retries;
        report.rolled_back.extend(
            done.rolled_back
                .iter()
                .map(|&(block, error)| (block, RollbackCause::Migration(error))),
        );
        let Some(&block) = done.taken.first() else {
            break;
        };
        let start = system.block_start(block);
        if let Err(error) = pool.unplug_unpooled(start, PageCount(block_frames)) {
            system
                .frames
                .blocks()
                .add_blocks_reserving(block, 1, online_of(system, block), 0);
            return Err(MemoryError::Physmem(error));
        }
        // Only now, with nothing of the block in use or in physmem, is it
        // confirmed to the device.
        let request = DeviceRequest::Unplug {
            first: block,
            count: 1,
        };
        let answer = ask(system, request);
        if let Ok(Ok(())) = answer {
            forget(system, block);
            continue;
        }
        // Still plugged as far as the device knows: hand it back.
        hand_over(pool, system, block, 1)?;
        if let Err(cause) = answer? {
            report.rolled_back.push((block, cause));
            break;
        }
    }
    Ok(false)
}

/// Gives `kernel` a memory device of `config`, its region above the boot
/// memory of `boot_frames` frames (from frame 256), block aligned.
pub(crate) fn attach(
    kernel: &std::sync::Arc<Kernel>,
    config: MemoryDeviceConfig,
    boot_frames: PageCount,
) -> Result<(), MachineError> {
    let first = Pfn((256 + boot_frames.0).next_multiple_of(config.block_frames));
    let system =
        std::sync::Arc::new(MemorySystem::new(config, first).map_err(MachineError::Config)?);
    if kernel.memory.set(std::sync::Arc::clone(&system)).is_err() {
        return Err(MachineError::Config(
            "the machine has a memory device already",
        ));
    }
    start(kernel, &system).map_err(|error| MachineError::Spawn(error.to_string()))
}
