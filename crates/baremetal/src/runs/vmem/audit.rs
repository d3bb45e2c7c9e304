//! The end-of-run audit: every frame of the region against the blocks
//! the driver plugged, as physmem, the allocator and the device each see
//! it, and every free hot-plugged frame written and read back.

use hotkern_kernel::blockframes::BlockFrames;
use hotkern_physmem::Pfn;

use super::report::VmemReport;
use crate::arch::memory::{self, PHYSMEM};
use crate::arch::ranges::PAGE_SIZE;
use crate::drivers::virtio::mem::{Device, REQ_STATE, USABLE_REGION_SIZE};

/// Checks every frame of the region against the blocks plugged: plugged
/// frames must be found by physmem (`PHYS_TO_VM_PAGE`) with their own
/// address, mapped by the page tables and belong to the allocator;
/// unplugged ones must not be found nor mapped; the device must agree on
/// each block.
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
        let block = device.block_address(index);
        let mapped = (block..block + device.block)
            .step_by(2 << 20)
            .filter(|&address| memory::is_mapped(address))
            .count() as u64;
        let agrees = agrees && mapped == if plugged { device.block >> 21 } else { 0 };
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

/// GiBs of the region whose every block is plugged: those the page
/// tables should map with one 1 GiB page each.
pub(super) fn whole_gibs(device: &Device) -> usize {
    let gib = 1u64 << 30;
    let end = device.block_address(device.plugged.len());
    (device.addr.next_multiple_of(gib)..end)
        .step_by(gib as usize)
        .filter(|&start| start + gib <= end)
        .filter(|&start| {
            let first = ((start - device.addr) / device.block) as usize;
            device.plugged[first..first + (gib / device.block) as usize]
                .iter()
                .all(|&plugged| plugged)
        })
        .count()
}

/// No next frame: the end of [`exercise`]'s list.
const END: u64 = u64::MAX;

/// Takes every free hot-plugged frame, writes its own number into it,
/// reads it back and frees it: the allocator hands out each frame once,
/// and the page tables map each. The frames held are chained through
/// their own second word rather than kept in a heap vector, which for
/// tens of GiB plugged would not fit in the heap. Returns the frames that
/// failed.
pub(super) fn exercise(hot: &BlockFrames) -> u64 {
    let (_, total) = hot.counts();
    let mut failed = 0;
    let mut held = 0u64;
    let mut head = END;
    while let Some(frame) = hot.alloc() {
        let words = (frame.0 * PAGE_SIZE) as *mut u64;
        // SAFETY: the frame is plugged, mapped write-back by `map_range`,
        // and this function holds it from `alloc` to `free`.
        let back = unsafe {
            words.write_volatile(frame.0);
            words.add(1).write_volatile(head);
            words.read_volatile()
        };
        if back != frame.0 {
            failed += 1;
        }
        head = frame.0;
        held += 1;
    }
    failed += total.saturating_sub(held);
    // A frame handed out twice would close the chain into a loop: walk at
    // most as many frames as were taken.
    for _ in 0..held {
        if head == END {
            break;
        }
        let words = (head * PAGE_SIZE) as *const u64;
        // SAFETY: a frame taken above and not freed yet.
        let (own, next) = unsafe { (words.read_volatile(), words.add(1).read_volatile()) };
        if own != head {
            failed += 1;
        }
        if !hot.free(Pfn(head)) {
            failed += 1;
        }
        head = next;
    }
    if head != END {
        failed += 1;
    }
    failed
}
