//! The heap a large grow and its shrink back take when every plug keeps its
//! descriptors on its own memory (`plug_on_memory`, Linux's
//! `memmap_on_memory`): what is left on the heap is physmem's segment
//! records and lookup index, so it scales with the number of plugs, not
//! with the frames they hold. Measured: 16 GiB as 128 MiB plugs keeps
//! 150 KB, peaks at 240 KB over the grow and shrink; as 2 MiB plugs 4.9 MB
//! and 5.4 MB. 16 GiB plugged as 128 MiB runs must stay
//! under a bound that the same 16 GiB as 8,192 one-block (2 MiB) plugs
//! exceeds, and the shrink back must succeed.
// These use a real global allocator; the loom build runs only tests/loom.rs.
#![cfg(not(loom))]

mod common;

use std::ptr::NonNull;

use common::counting::{self, Counting};

use hotkern_physmem::{BasicPage, PageCount, Pfn, Physmem, PAGE_SIZE};

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Frames of 16 GiB, plugged from 4 GiB as the x86 virtio-mem region is.
const GROW_FRAMES: u64 = (16 << 30) / PAGE_SIZE;
const REGION: u64 = (4 << 30) / PAGE_SIZE;

/// What growing by [`GROW_FRAMES`] in plugs of `plug_frames` and
/// shrinking back takes from the heap: (rise after the grow, peak rise
/// during grow and shrink, rise after the shrink).
fn grow_and_shrink(plug_frames: u64) -> (isize, isize, isize) {
    let plugs = GROW_FRAMES / plug_frames;
    let descriptor_frames = Physmem::<BasicPage>::descriptor_frames(PageCount(plug_frames)).0;
    // Stand-ins for each plug's first frames, made before counting starts.
    let words = (descriptor_frames * PAGE_SIZE / 8) as usize;
    let mut memory: Vec<Vec<u64>> = (0..plugs).map(|_| vec![0u64; words]).collect();
    let mem: Physmem<BasicPage> = Physmem::initialized();
    mem.plug(Pfn(0x100), PageCount(1024)).unwrap();
    mem.reclaim();
    let before = counting::reset_peak();
    for (plug, buffer) in memory.iter_mut().enumerate() {
        let pfn = Pfn(REGION + plug as u64 * plug_frames);
        let base = NonNull::new(buffer.as_mut_ptr().cast()).unwrap();
        // SAFETY: each buffer is this plug's alone and outlives `mem`.
        unsafe { mem.plug_on_memory(pfn, PageCount(plug_frames), base) }.unwrap();
    }
    mem.reclaim();
    let grown = counting::live() - before;
    for plug in (0..plugs).rev() {
        let pfn = Pfn(REGION + plug * plug_frames);
        mem.reclaim();
        mem.unplug(pfn, PageCount(plug_frames)).unwrap();
    }
    mem.reclaim();
    let after = counting::live() - before;
    let peak = counting::peak() - before;
    assert_eq!(mem.len(), 1, "only the boot segment is left");
    drop(mem);
    (grown, peak, after)
}

/// The bound on the heap a 16 GiB grow may take: a quarter of the 1 MiB
/// target, which 8,192 one-block plugs exceed many times over.
const GROW_BOUND: isize = 256 << 10;

#[test]
fn sixteen_gib_in_128_mib_plugs_takes_little_heap_and_shrinks_back() {
    let (grown, peak, after) = grow_and_shrink(32768);
    println!("128 MiB plugs: +{grown} B grown, peak +{peak} B, +{after} B after");
    assert!(grown < GROW_BOUND, "the grow kept {grown} bytes");
    assert!(
        peak < 2 * GROW_BOUND,
        "grow and shrink peaked at {peak} bytes"
    );
    // Vectors keep their capacity for the next grow; nothing more stays.
    assert!(after <= grown, "the shrink back left {after} bytes");
}

#[test]
fn the_same_grow_in_2_mib_plugs_exceeds_the_bound() {
    let (grown, peak, after) = grow_and_shrink(512);
    println!("2 MiB plugs: +{grown} B grown, peak +{peak} B, +{after} B after");
    assert!(
        grown > 4 * GROW_BOUND,
        "the bound would not tell the designs apart"
    );
    assert!(after <= grown, "the shrink back left {after} bytes");
}
