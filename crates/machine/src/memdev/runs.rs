//! The machine's driver with descriptors and allocator bitmaps on the
//! plugged memory ([`MemoryDeviceConfig::descriptors_on_block`]), laid out
//! by the shared core's [`Runs`], as the bare-metal virtio-mem driver lays
//! them: a run of blocks is one physmem segment whose first block holds
//! the run's descriptors, then every block's bitmaps; a shrink takes that
//! holder only with the last block of its run, and a block whose unplug
//! the device refused is plugged back on its own memory.
//!
//! The arena's frames are smaller than physmem's 4 KiB ones, so the
//! memory a holder keeps is stood in for by the system's
//! [`MemorySystem::block_memory`], [`Runs::holder_frames`] 4 KiB frames a
//! block; the allocator keeps as many arena frames of the holder back.
//!
//! [`MemoryDeviceConfig::descriptors_on_block`]: super::MemoryDeviceConfig::descriptors_on_block

use hotkern_kernel::frames::FramePool;
use hotkern_kernel::migrate::{self, ShrinkError};
use hotkern_kernel::runs::Runs;
use hotkern_physmem::{PageCount, PhysmemError};
use parking_lot::MutexGuard;

use super::device::DeviceRequest;
use super::steps::{
    ask, forget, online_of, plugged_frames, replaced, unmovable_frames, DriverHooks,
};
use super::system::{MemoryError, MemorySystem, ResizeReport, RollbackCause};

fn layout(system: &MemorySystem) -> MutexGuard<'_, Runs> {
    system
        .runs
        .as_ref()
        .expect("the runs driver runs only for a runs layout")
        .lock()
}

/// Hands `block` (in physmem) to the allocator, its bitmaps where the
/// layout puts them.
fn add_block(system: &MemorySystem, runs: &Runs, block: usize) -> Result<(), MemoryError> {
    let place = runs.maps(block);
    let maps = system
        .block_memory(place.block, place.offset)
        .ok_or(MemoryError::Physmem(PhysmemError::BlockTooSmall {
            npages: PageCount(system.config.block_frames),
            descriptor_frames: PageCount(runs.holder_frames()),
        }))?;
    // SAFETY: the stand-in memory lives as long as the system; the layout
    // gives each block of a run its own bitmaps after the run's
    // descriptors, on a holder that is unplugged only after every block
    // of its run was taken back.
    let added = unsafe {
        system.frames.blocks().add_blocks_with_maps(
            block,
            1,
            online_of(system, block),
            place.reserved,
            maps,
        )
    };
    debug_assert!(added, "a block plugged in physmem is new to the allocator");
    Ok(())
}

/// Plugs `count` blocks from `first` (on one side of the kernel blocks'
/// end) into physmem in runs, each on its own first block, and hands them
/// to the allocator; the device has them plugged already.
pub(super) fn hand_over(
    pool: &FramePool,
    system: &MemorySystem,
    first: usize,
    count: usize,
) -> Result<(), MemoryError> {
    let mut runs = layout(system);
    let pieces: Vec<(usize, usize)> = runs.cut(first, count).collect();
    for (start, blocks) in pieces {
        plug_on_memory(pool, system, &mut runs, start, blocks)?;
        for block in start..start + blocks {
            add_block(system, &runs, block)?;
        }
    }
    Ok(())
}

/// Plugs one run into physmem with its descriptors on its first block.
fn plug_on_memory(
    pool: &FramePool,
    system: &MemorySystem,
    runs: &mut Runs,
    first: usize,
    count: usize,
) -> Result<(), MemoryError> {
    let too_small = MemoryError::Physmem(PhysmemError::BlockTooSmall {
        npages: PageCount(system.config.block_frames),
        descriptor_frames: PageCount(runs.holder_frames()),
    });
    let memory = system.block_memory(first, 0).ok_or(too_small)?.cast();
    // A block unplugged a moment ago: physmem lets its descriptors go once
    // no reader can still reach them.
    while !pool.released(memory) {
        std::thread::yield_now();
    }
    let frames = PageCount(count as u64 * system.config.block_frames);
    // SAFETY: the block's stand-in memory lives as long as the system, and
    // physmem let it go (just above): nothing else uses it until the run's
    // last block is unplugged and it is released again.
    unsafe { pool.plug_unpooled_on_memory(system.block_start(first), frames, memory) }
        .map_err(MemoryError::Physmem)?;
    let recorded = runs.plugged(first, count, true);
    debug_assert!(recorded.is_ok(), "{recorded:?}");
    Ok(())
}

/// Takes blocks back until `requested` frames are plugged: the migrate
/// protocol empties them, the holders whose runs keep a block go back to
/// the allocator, then block by block (holders last) physmem, then the
/// device's UNPLUG. Between blocks a newer size ends it; a refused UNPLUG
/// plugs the block back on its own memory. Returns whether a newer
/// request stopped it.
pub(super) fn shrink(
    pool: &FramePool,
    system: &MemorySystem,
    generation: u64,
    requested: u64,
    report: &mut ResizeReport,
    hooks: &DriverHooks<'_>,
) -> Result<bool, MemoryError> {
    let block_frames = system.config.block_frames;
    while plugged_frames(system) > requested {
        if replaced(system, generation) {
            return Ok(true);
        }
        let wanted = (plugged_frames(system) - requested) / block_frames;
        let done = migrate::shrink(&system.frames, &system.memory, wanted * block_frames, hooks)
            .map_err(|error| match error {
                ShrinkError::BelowUnmovable { .. } => MemoryError::BelowUnmovable {
                    frames: requested,
                    unmovable_frames: unmovable_frames(system),
                },
                error => MemoryError::Shrink(error),
            })?;
        report.migrated += done.migrated;
        report.retries += done.retries;
        report.rolled_back.extend(
            done.rolled_back
                .iter()
                .map(|&(block, error)| (block, RollbackCause::Migration(error))),
        );
        let mut runs = layout(system);
        let mut taken = done.taken;
        taken.sort_unstable();
        let kept = runs.keep_holders(&mut taken);
        for &block in &kept {
            add_block(system, &runs, block)?;
            report
                .rolled_back
                .push((block, RollbackCause::HoldsDescriptors));
        }
        // physmem takes a run's descriptor frames only with its last
        // segment: the holders after the rest (a stable sort).
        taken.sort_by_key(|&block| runs.is_holder(block));
        for (at, &block) in taken.iter().enumerate() {
            if at > 0 && replaced(system, generation) {
                give_back(system, &runs, &taken[at..])?;
                return Ok(true);
            }
            let start = system.block_start(block);
            if let Err(error) = pool.unplug_unpooled(start, PageCount(block_frames)) {
                give_back(system, &runs, &taken[at..])?;
                return Err(MemoryError::Physmem(error));
            }
            // Only now, with nothing of the block in use or in physmem, is
            // it confirmed to the device.
            let answer = ask(
                system,
                DeviceRequest::Unplug {
                    first: block,
                    count: 1,
                },
            );
            if let Ok(Ok(())) = answer {
                forget(system, block);
                runs.unplugged(block);
                continue;
            }
            // Still plugged as far as the device knows: back on its own
            // memory, and the rest back to the allocator.
            plug_on_memory(pool, system, &mut runs, block, 1)?;
            add_block(system, &runs, block)?;
            give_back(system, &runs, &taken[at + 1..])?;
            if let Err(cause) = answer? {
                report.rolled_back.push((block, cause));
            }
            return Ok(false);
        }
        if taken.is_empty() || !kept.is_empty() {
            // Nothing more to take now: what was asked next would pick
            // the same holders again.
            break;
        }
    }
    Ok(false)
}

/// Hands blocks a shrink took but did not unplug back to the allocator.
fn give_back(system: &MemorySystem, runs: &Runs, blocks: &[usize]) -> Result<(), MemoryError> {
    blocks
        .iter()
        .try_for_each(|&block| add_block(system, runs, block))
}
