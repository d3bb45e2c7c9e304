//! physmem exercised on the machine it manages: after boot, every frame the
//! memory map promised is found exactly once through the lock-free reader;
//! then a hot-unplug splits a segment under a pinned reader, the frames come
//! back with fresh descriptors, and a range above RAM is plugged and
//! unplugged; at the end physmem holds exactly the boot frames again.

use alloc::vec::Vec;
use core::sync::atomic::Ordering;

use hotkern_physmem::{Lookup, PageCount, Pfn, PhysmemError, ReadGuard};

use crate::arch::boot::IDENTITY_MAP_END;
use crate::arch::cpu;
use crate::arch::memory::{KernelPage, Layout, PHYSMEM};
use crate::arch::ranges::{FrameRanges, PAGE_SIZE};
use crate::runs::checks::Checks;

/// A 2 MiB block of frames: what the hotplug checks move.
const CHUNK: u64 = 512;
/// 2 MiB blocks per segment the touch check writes to: the first, the
/// middle and the last.
const TOUCH_BLOCKS: u64 = 3;
/// Every this many frames of a block is written.
const TOUCH_STRIDE: usize = 8;
/// Descriptor flag: the frame was written by the touch check.
const TOUCHED: u32 = 1;
/// What the touch check writes, mixed with the frame number.
const PATTERN: u64 = 0x686f_746b_6572_6e00;

/// A lock-free reader, counted on this CPU's stripe.
fn reader() -> ReadGuard<'static, KernelPage> {
    PHYSMEM.read_on(cpu::current().id() as usize)
}

/// Runs every check; the results go to `checks`.
pub fn run(layout: &Layout, checks: &mut Checks) {
    let boot_segments = layout.managed.len();
    checks.check(
        "physmem's segments are the memory map's usable RAM less the first MiB, the kernel and the heap",
        segments_are(&layout.managed),
    );
    checks.check(
        "every usable frame is found exactly once, in its segment, at its offset, with its descriptor",
        frames_found_once(&layout.managed),
    );
    checks.check(
        "frames outside the segments (first MiB, kernel, heap, holes) are not found",
        holes_not_found(&layout.managed),
    );
    checks.check(
        "the section index and a search of the section table agree",
        section_search_agrees(),
    );
    checks.check(
        "the page descriptors live in the heap physmem fed",
        descriptors_in_heap(layout.heap),
    );
    touch(checks);
    hotplug(checks);
    PHYSMEM.reclaim();
    checks.check(
        "nothing is left to reclaim once no reader is inside",
        PHYSMEM.pending_reclaim() == 0,
    );
    checks.check(
        "after the hotplug exercise physmem holds exactly the boot frames",
        holds_exactly(&layout.managed) && frames_found_once_in_own_segments(),
    );
    checks.check(
        "the layout is sane: kernel and heap lie in RAM, outside physmem",
        layout.ram.contains(layout.kernel.0)
            && layout.ram.contains(layout.heap.0)
            && !layout.loaded.contains(layout.kernel.0)
            && layout.loaded.contains(layout.heap.0)
            && !layout.managed.contains(layout.heap.0)
            && boot_segments > 0,
    );
}

/// The segments, in address order, are exactly `expected`.
fn segments_are(expected: &FrameRanges) -> bool {
    let guard = reader();
    let mut wanted = expected.iter();
    let all_match = guard
        .segments()
        .all(|segment| wanted.next() == Some((segment.start().0, segment.end().0)));
    all_match && wanted.next().is_none() && guard.len() == expected.len()
}

/// Every frame of every segment resolves, through the lock-free index, to
/// that segment and offset, and its descriptor has its address; the
/// segments are ordered and disjoint and hold `expected`'s frame count.
/// With [`segments_are`] that makes every usable frame found exactly once.
fn frames_found_once(expected: &FrameRanges) -> bool {
    frames_found_once_in_own_segments() && {
        let guard = reader();
        guard.segments().map(|s| s.len().0).sum::<u64>() == expected.frames()
    }
}

fn frames_found_once_in_own_segments() -> bool {
    let guard = reader();
    let mut previous_end = 0;
    for segment in guard.segments() {
        if segment.start().0 < previous_end {
            return false;
        }
        previous_end = segment.end().0;
        let (handle, start) = (segment.handle(), segment.start().0);
        for pfn in segment.frames() {
            let found = guard.find(Pfn(pfn));
            if found
                != Some(Lookup {
                    segment: handle,
                    offset: PageCount(pfn - start),
                })
            {
                return false;
            }
            match guard.page(Pfn(pfn)) {
                Some(page) if page.phys_addr() == Pfn(pfn).phys_addr() => {}
                _ => return false,
            }
        }
    }
    true
}

/// The first and last frame of every gap between segments (and of the
/// space below the first and just above the last) are not found.
fn holes_not_found(managed: &FrameRanges) -> bool {
    let guard = reader();
    let mut gap_start = 0;
    let mut ok = true;
    for (start, end) in managed.iter().chain([(u64::MAX - 1, u64::MAX)]) {
        let gap_end = start.min(gap_start + (1 << 30));
        if gap_start < gap_end {
            ok &= guard.find(Pfn(gap_start)).is_none();
            ok &= guard.find(Pfn(gap_end - 1)).is_none();
            ok &= guard.page(Pfn(gap_start)).is_none();
        }
        gap_start = end;
    }
    ok
}

/// The constant-time lookup and the binary search over the section table
/// give the same answer on a spread of frames, inside segments and not.
fn section_search_agrees() -> bool {
    let guard = reader();
    let Some(highest) = guard.highest_frame() else {
        return false;
    };
    let stride = (highest.0 / 4096).max(1) | 1;
    (0..=highest.0 + CHUNK)
        .step_by(stride as usize)
        .all(|pfn| guard.find(Pfn(pfn)) == guard.find_by_section_search(Pfn(pfn)))
}

/// Every segment's descriptor array lies inside the heap's frames.
fn descriptors_in_heap(heap: (u64, u64)) -> bool {
    let (low, high) = (heap.0 * PAGE_SIZE, heap.1 * PAGE_SIZE);
    let guard = reader();
    guard.segments().all(|segment| {
        let pages = segment.pages();
        let start = pages.as_ptr() as u64;
        let end = start + core::mem::size_of_val(pages) as u64;
        low <= start && end <= high
    })
}

/// Free frames below 4 GiB to write to: every 8th frame of 2 MiB blocks at
/// both ends of each segment and spread between them. Few blocks on
/// purpose: QEMU backs guest RAM with transparent huge pages, so the first
/// touch of each 2 MiB block costs the host a 2 MiB allocation.
fn touch_samples(guard: &ReadGuard<'_, KernelPage>) -> Vec<u64> {
    let limit = IDENTITY_MAP_END / PAGE_SIZE;
    let mut samples = Vec::new();
    for segment in guard.segments().filter(|s| s.end().0 <= limit) {
        let (start, end) = (segment.start().0, segment.end().0);
        let span = end - start;
        for block in 0..TOUCH_BLOCKS {
            let first = start + span.saturating_sub(CHUNK) * block / (TOUCH_BLOCKS - 1);
            samples.extend((first..end.min(first + CHUNK)).step_by(TOUCH_STRIDE));
        }
        samples.push(end - 1);
    }
    samples
}

/// Writes a pattern into a sample of free frames below 4 GiB, reads every
/// one back (a wrong map or aliasing shows as a mismatch) and marks their
/// descriptors.
fn touch(checks: &mut Checks) {
    let guard = reader();
    let samples = touch_samples(&guard);
    for &pfn in &samples {
        let word = (pfn * PAGE_SIZE) as *mut u64;
        // SAFETY: the frame is in physmem's free pool (no page allocator
        // hands frames out yet), is RAM per the loader's map, and lies
        // below 4 GiB where the boot page tables identity-map it.
        unsafe { word.write_volatile(PATTERN ^ pfn) };
        if let Some(page) = guard.page(Pfn(pfn)) {
            page.flags.fetch_or(TOUCHED, Ordering::Relaxed);
        }
    }
    let read_back = samples.iter().all(|&pfn| {
        let word = (pfn * PAGE_SIZE) as *const u64;
        // SAFETY: as for the write above; nothing else wrote since.
        unsafe { word.read_volatile() == PATTERN ^ pfn }
    });
    checks.check(
        "sampled free frames below 4 GiB are distinct, writable RAM",
        !samples.is_empty() && read_back,
    );
    let marked = samples.iter().all(|&pfn| {
        guard
            .page(Pfn(pfn))
            .is_some_and(|page| page.flags.load(Ordering::Relaxed) & TOUCHED != 0)
    });
    checks.check("their descriptors carry the mark the touch left", marked);
}

/// Unplug, re-plug and plug-above-RAM, each checked through readers.
fn hotplug(checks: &mut Checks) {
    let (handle, start, end) = {
        let guard = reader();
        match guard.segments().max_by_key(|s| s.len().0) {
            Some(s) => (s.handle(), s.start().0, s.end().0),
            None => {
                checks.check("a segment to unplug from", false);
                return;
            }
        }
    };
    let middle = (start + (end - start) / 2).next_multiple_of(CHUNK);
    if !checks.check(
        "the largest segment has a 2 MiB block strictly inside it",
        start < middle && middle + CHUNK < end,
    ) {
        return;
    }
    {
        let guard = reader();
        for pfn in middle..middle + CHUNK {
            if let Some(page) = guard.page(Pfn(pfn)) {
                page.flags.fetch_or(TOUCHED, Ordering::Relaxed);
            }
        }
    }
    let segments = PHYSMEM.len();
    let pinned = reader();
    let unplugged = PHYSMEM.unplug(Pfn(middle), PageCount(CHUNK));
    checks.check(
        "unplug of a 2 MiB block from the middle of a segment",
        unplugged.is_ok(),
    );
    {
        let fresh = reader();
        checks.check(
            "a reader pinned before the unplug still finds the block in the old segment",
            pinned.find(Pfn(middle)).map(|found| found.segment) == Some(handle),
        );
        checks.check(
            "a reader after it does not find the block",
            fresh.find(Pfn(middle)).is_none() && fresh.find(Pfn(middle + CHUNK - 1)).is_none(),
        );
        let lower = fresh.find(Pfn(middle - 1));
        let upper = fresh.find(Pfn(middle + CHUNK));
        checks.check(
            "the split keeps the handle on the lower part and gives the upper part its own",
            lower
                == Some(Lookup {
                    segment: handle,
                    offset: PageCount(middle - 1 - start),
                })
                && upper.is_some_and(|found| found.segment != handle && found.offset.0 == 0)
                && PHYSMEM.len() == segments + 1,
        );
    }
    checks.check(
        "the unplugged descriptors wait while the pinned reader is inside",
        PHYSMEM.pending_reclaim() > 0,
    );
    drop(pinned);
    PHYSMEM.reclaim();
    checks.check(
        "and are freed once it leaves",
        PHYSMEM.pending_reclaim() == 0,
    );

    let replugged = PHYSMEM.plug(Pfn(middle), PageCount(CHUNK));
    let guard = reader();
    checks.check(
        "the block plugs back as a segment of its own, with fresh descriptors",
        replugged.is_ok_and(|h| {
            guard.find(Pfn(middle))
                == Some(Lookup {
                    segment: h,
                    offset: PageCount(0),
                })
                && (middle..middle + CHUNK).all(|pfn| {
                    guard.page(Pfn(pfn)).is_some_and(|page| {
                        page.phys_addr() == Pfn(pfn).phys_addr()
                            && page.flags.load(Ordering::Relaxed) == 0
                    })
                })
        }),
    );
    drop(guard);
    let segments = PHYSMEM.len();
    checks.check(
        "a plug over present frames is refused and changes nothing",
        matches!(
            PHYSMEM.plug(Pfn(middle + 1), PageCount(1)),
            Err(PhysmemError::Overlap { .. })
        ) && PHYSMEM.len() == segments,
    );
    plug_above_ram(checks);
}

/// A 32 MiB range just above the highest frame, as a hot-added DIMM would
/// appear: physmem makes descriptors for it (in the heap) and never touches
/// the frames, so it needs no RAM behind it.
fn plug_above_ram(checks: &mut Checks) {
    let Some(highest) = reader().highest_frame() else {
        checks.check("a highest frame", false);
        return;
    };
    let base = (highest.0 + 1).next_multiple_of(CHUNK);
    let count = 16 * CHUNK;
    let plugged = PHYSMEM.plug(Pfn(base), PageCount(count));
    {
        let guard = reader();
        checks.check(
            "a 32 MiB range above RAM plugs and resolves through the reader",
            plugged.is_ok_and(|h| {
                guard.find(Pfn(base + 5))
                    == Some(Lookup {
                        segment: h,
                        offset: PageCount(5),
                    })
                    && guard
                        .page(Pfn(base + count - 1))
                        .is_some_and(|p| p.phys_addr() == Pfn(base + count - 1).phys_addr())
                    && guard.highest_frame() == Some(Pfn(base + count - 1))
            }),
        );
    }
    let unplugged = PHYSMEM.unplug(Pfn(base), PageCount(count));
    let guard = reader();
    checks.check(
        "and unplugs whole, leaving the highest frame as it was",
        unplugged.is_ok()
            && guard.find(Pfn(base + 5)).is_none()
            && guard.highest_frame() == Some(highest),
    );
}

/// The segments' frames, merged, are `expected`'s frames, merged.
fn holds_exactly(expected: &FrameRanges) -> bool {
    let mut held = FrameRanges::new();
    for segment in reader().segments() {
        held.add(segment.start().0, segment.end().0);
    }
    let mut wanted = FrameRanges::new();
    for (start, end) in expected.iter() {
        wanted.add(start, end);
    }
    held.dropped == 0 && held.iter().eq(wanted.iter())
}
