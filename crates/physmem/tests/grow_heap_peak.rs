//! The heap one plug takes does not grow with the number of plugs before
//! it. A 256 MiB kernel grown to 64 GiB in 128 MiB runs spans 32,768
//! sections of 2 MiB; an index whose section table is one flat array
//! copies all of it (256 KiB) on every plug, and keeps a copy per
//! replaced index until readers let it go. The table's leaves are shared
//! between successive indexes instead, so a plug allocates a directory,
//! the one or two leaves it changes, its sections and a slot chunk: a
//! few KiB, the same at the 512th plug as at the first.
// These use a real global allocator; the loom build runs only tests/loom.rs.
#![cfg(not(loom))]

mod common;

use std::ptr::NonNull;

use common::counting::{self, Counting};

use hotkern_physmem::{BasicPage, PageCount, Pfn, Physmem, PAGE_SIZE};

#[global_allocator]
static GLOBAL: Counting = Counting;

/// One run every 128 MiB from 4 GiB to 68 GiB, as the x86 virtio-mem
/// region grows to 64 GiB. Each run is one 2 MiB block: the index's
/// cost depends on the span and the number of segments, not on how many
/// frames a segment holds, and small runs keep the stand-in memory small.
const RUNS: u64 = 512;
const STRIDE: u64 = (128 << 20) / PAGE_SIZE;
const RUN_FRAMES: u64 = 512;
const REGION: u64 = (4 << 30) / PAGE_SIZE;

/// Most heap one plug or unplug may hold at its peak beyond what was in
/// use before it: the new index's directory (512 bytes at 64 GiB), two
/// 4 KiB leaves, a 4 KiB slot chunk, the index and its sections. A flat
/// table passes it only for the first 30 or so runs.
const WRITE_BOUND: isize = 24 << 10;

/// The target for the whole grow: at most 1 MiB of heap.
const GROW_BOUND: isize = 1 << 20;

fn run_start(run: u64) -> Pfn {
    Pfn(REGION + run * STRIDE)
}

/// Peak rise of the heap over what was live when `write` started.
fn peak_of(write: impl FnOnce()) -> isize {
    let before = counting::reset_peak();
    write();
    counting::peak() - before
}

#[test]
fn every_plug_of_a_64_gib_grow_and_its_shrink_takes_the_same_few_kib() {
    let words =
        (Physmem::<BasicPage>::descriptor_frames(PageCount(RUN_FRAMES)).0 * PAGE_SIZE / 8) as usize;
    // Stand-ins for each run's first frame, made before counting starts.
    let mut memory: Vec<Vec<u64>> = (0..RUNS).map(|_| vec![0u64; words]).collect();
    let mem: Physmem<BasicPage> = Physmem::initialized();
    mem.plug(Pfn(0x100), PageCount(1024)).unwrap();
    mem.reclaim();
    let start = counting::live();
    let mut grow_peak = 0;
    let mut plug_peaks = Vec::new();
    for (run, buffer) in (0..RUNS).zip(memory.iter_mut()) {
        let base = NonNull::new(buffer.as_mut_ptr().cast()).unwrap();
        let rise = peak_of(|| {
            // SAFETY: each buffer is this run's alone and outlives `mem`.
            unsafe { mem.plug_on_memory(run_start(run), PageCount(RUN_FRAMES), base) }.unwrap();
        });
        grow_peak = grow_peak.max(counting::live() - start + rise);
        plug_peaks.push(rise);
    }
    let grown = counting::live() - start;
    // The writer's record table is a vector: the plug that takes slot
    // 2^k grows it, holding old and new arrays for a moment (amortised,
    // once per doubling). Every other plug is the index's alone.
    let worst = (0..RUNS as usize)
        .filter(|&run| !(run + 1).is_power_of_two())
        .map(|run| plug_peaks[run])
        .max()
        .unwrap();
    println!(
        "plugs: first +{} B, last +{} B, worst +{worst} B; grow +{grown} B, peak +{grow_peak} B",
        plug_peaks[0],
        plug_peaks[RUNS as usize - 1]
    );
    assert!(worst <= WRITE_BOUND, "a plug peaked at {worst} bytes");
    assert!(
        grow_peak <= GROW_BOUND,
        "the grow peaked at {grow_peak} bytes"
    );
    // Readers see every run.
    let guard = mem.read();
    assert!(guard.page(run_start(RUNS - 1)).is_some());
    assert_eq!(guard.segments().count(), RUNS as usize + 1);
    drop(guard);
    // The shrink back, lowest run first as the driver takes them: the
    // table's base moves up on every unplug.
    let mut worst = 0;
    for run in 0..RUNS {
        mem.reclaim();
        let rise = peak_of(|| mem.unplug(run_start(run), PageCount(RUN_FRAMES)).unwrap());
        worst = worst.max(rise);
    }
    mem.reclaim();
    println!("unplugs: worst +{worst} B");
    assert!(worst <= WRITE_BOUND, "an unplug peaked at {worst} bytes");
    assert_eq!(mem.len(), 1, "only the boot segment is left");
    assert!(mem.read().page(Pfn(0x100)).is_some());
}

#[test]
fn a_reader_that_holds_on_keeps_a_few_kib_per_write_not_a_table() {
    let words =
        (Physmem::<BasicPage>::descriptor_frames(PageCount(RUN_FRAMES)).0 * PAGE_SIZE / 8) as usize;
    let mut memory: Vec<Vec<u64>> = (0..RUNS).map(|_| vec![0u64; words]).collect();
    let mem: Physmem<BasicPage> = Physmem::initialized();
    mem.plug(Pfn(0x100), PageCount(1024)).unwrap();
    // The first 448 runs: the span already reaches 60 GiB.
    let held_from = RUNS - 64;
    for (run, buffer) in (0..held_from).zip(memory.iter_mut()) {
        let base = NonNull::new(buffer.as_mut_ptr().cast()).unwrap();
        // SAFETY: as above.
        unsafe { mem.plug_on_memory(run_start(run), PageCount(RUN_FRAMES), base) }.unwrap();
    }
    mem.reclaim();
    let before = counting::live();
    // A reader stays inside while the last 64 runs are plugged: nothing
    // those writes retire can be freed.
    let reader = mem.read();
    for (run, buffer) in (held_from..RUNS).zip(memory[held_from as usize..].iter_mut()) {
        let base = NonNull::new(buffer.as_mut_ptr().cast()).unwrap();
        // SAFETY: as above.
        unsafe { mem.plug_on_memory(run_start(run), PageCount(RUN_FRAMES), base) }.unwrap();
    }
    let held = counting::live() - before;
    println!("64 writes under one reader: +{held} B");
    assert!(
        mem.pending_reclaim() > 0,
        "the reader holds what they retired"
    );
    assert!(
        held <= 64 * WRITE_BOUND,
        "64 writes under one reader hold {held} bytes"
    );
    assert!(reader.page(run_start(0)).is_some());
    drop(reader);
    mem.reclaim();
    mem.reclaim();
    assert_eq!(mem.pending_reclaim(), 0);
}
