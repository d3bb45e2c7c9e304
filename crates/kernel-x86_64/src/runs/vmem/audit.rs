//! The end-of-run audit: every frame of the region against the blocks
//! the driver plugged, as physmem, the allocator and the device each see
//! it, and every free hot-plugged frame written and read back.

use alloc::vec::Vec;

use hotkern_kernel::blockframes::BlockFrames;
use hotkern_physmem::Pfn;

use super::report::VmemReport;
use crate::arch::memory::PHYSMEM;
use crate::arch::ranges::PAGE_SIZE;
use crate::drivers::virtio::mem::{Device, REQ_STATE, USABLE_REGION_SIZE};

/// Checks every frame of the region against the blocks plugged: plugged
/// frames must be found by physmem (`PHYS_TO_VM_PAGE`) with their own
/// address and belong to the allocator; unplugged ones must not be found;
/// the device must agree on each block.
pub(super) fn audit(device: &mut Device, report: &mut VmemReport) {
    let guard = PHYSMEM.read();
    let usable_end = device.addr + device.transport.config64(USABLE_REGION_SIZE);
    for index in 0..device.plugged.len() {
        let plugged = device.plugged[index];
        let first = device.block_address(index) / PAGE_SIZE;
        // The device's own view of the block (STATE: 0 plugged, 1 not).
        // It answers STATE only inside the usable region (QEMU shrinks
        // that with the requested size); outside it nothing can be
        // plugged (virtio 1.2: a PLUG must lie inside it).
        let state = if device.block_address(index) + device.block <= usable_end {
            device.send(REQ_STATE, device.block_address(index), 1)
        } else {
            Ok(1)
        };
        let holds = device.hot.blocks().holds(Pfn(first));
        let agrees = state == Ok(u16::from(!plugged));
        for pfn in first..first + device.frames() {
            let page = guard.page(Pfn(pfn));
            if plugged {
                let right = page.is_some_and(|p| p.phys_addr() == Pfn(pfn).phys_addr());
                if !right || !holds || !agrees {
                    report.pages_lost += 1;
                }
            } else if page.is_some() || holds || !agrees {
                report.stale += 1;
            }
        }
    }
}

/// Takes every free hot-plugged frame, writes its own number into it,
/// reads it back and frees it: the allocator hands out each frame once,
/// and the page tables map each. Returns the frames that failed.
pub(super) fn exercise(hot: &BlockFrames) -> u64 {
    let (_, total) = hot.counts();
    let mut frames = Vec::new();
    let mut failed = 0;
    while let Some(frame) = hot.alloc() {
        let word = (frame.0 * PAGE_SIZE) as *mut u64;
        // SAFETY: the frame is plugged, mapped write-back by `map_large`,
        // and this function holds it from `alloc` to `free`.
        let back = unsafe {
            word.write_volatile(frame.0);
            word.read_volatile()
        };
        if back != frame.0 {
            failed += 1;
        }
        if frames.try_reserve(1).is_err() {
            break;
        }
        frames.push(frame);
    }
    failed += total.saturating_sub(frames.len() as u64);
    for frame in frames {
        if !hot.free(frame) {
            failed += 1;
        }
    }
    failed
}
