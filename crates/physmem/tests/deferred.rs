//! Deferred descriptor init: a plug of more than one chunk (64 frames)
//! makes no descriptor; the first lookup in a chunk makes that chunk's,
//! a segment's `pages()` makes all of its, and a cut makes none (the
//! pieces share the plug's states and descriptor space, which goes back
//! with the last piece). Descriptor types with drop glue are made at plug
//! time, as before.
#![cfg(not(loom))]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use hotkern_physmem::{Page, PageCount, Pfn, PhysAddr, Physmem};

/// Descriptors made so far, by type.
static MADE: AtomicUsize = AtomicUsize::new(0);
static MADE_DROPPING: AtomicUsize = AtomicUsize::new(0);
/// The tests share the counters: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// No drop glue: deferrable.
struct Counted {
    phys_addr: PhysAddr,
}

impl Page for Counted {
    fn new(phys_addr: PhysAddr) -> Self {
        MADE.fetch_add(1, Ordering::Relaxed);
        Counted { phys_addr }
    }
}

/// Drop glue: made at plug time.
struct Dropping {
    phys_addr: PhysAddr,
}

impl Page for Dropping {
    fn new(phys_addr: PhysAddr) -> Self {
        MADE_DROPPING.fetch_add(1, Ordering::Relaxed);
        Dropping { phys_addr }
    }
}

impl Drop for Dropping {
    fn drop(&mut self) {
        MADE_DROPPING.fetch_sub(1, Ordering::Relaxed);
    }
}

fn made() -> usize {
    MADE.load(Ordering::Relaxed)
}

/// Frames per chunk (physmem's `deferred::CHUNK_FRAMES`).
const C: u64 = 64;

#[test]
fn a_plug_makes_no_descriptor_and_a_lookup_makes_its_chunk_once() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mem: Physmem<Counted> = Physmem::initialized();
    let base = made();
    let at = 0x10000;
    mem.plug(Pfn(at), PageCount(8 * C)).unwrap();
    assert_eq!(made() - base, 0, "a plug of 8 chunks makes nothing");
    let guard = mem.read();
    let page = guard.page(Pfn(at + C + 5)).unwrap();
    assert_eq!(page.phys_addr, Pfn(at + C + 5).phys_addr());
    assert_eq!(made() - base, C as usize, "the chunk of frame C + 5: C..2C");
    for pfn in at + C..at + 2 * C {
        assert_eq!(
            guard.page(Pfn(pfn)).unwrap().phys_addr,
            Pfn(pfn).phys_addr()
        );
    }
    assert_eq!(
        made() - base,
        C as usize,
        "the same chunk is not made again"
    );
    // The last chunk, and the whole segment through `pages()`.
    let last = at + 8 * C - 1;
    assert_eq!(
        guard.page(Pfn(last)).unwrap().phys_addr,
        Pfn(last).phys_addr()
    );
    assert_eq!(made() - base, 2 * C as usize);
    let segment = guard.segments().next().unwrap();
    for (pfn, page) in segment.frames().zip(segment.pages()) {
        assert_eq!(page.phys_addr, Pfn(pfn).phys_addr());
    }
    assert_eq!(
        made() - base,
        8 * C as usize,
        "pages() made the six chunks left"
    );
    // A one-chunk plug is made at once: there is nothing to defer.
    drop(guard);
    mem.plug(Pfn(0x20000), PageCount(C)).unwrap();
    assert_eq!(made() - base, 9 * C as usize);
}

#[test]
fn cuts_make_nothing_and_the_plug_space_goes_back_with_its_last_piece() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mem: Physmem<Counted> = Physmem::initialized();
    mem.plug(Pfn(0), PageCount(1)).unwrap();
    let base = made();
    let slabs = mem.slab_count();
    // A hole out of the middle of chunk 1 (frames C..2C of the plug), then
    // the front and the back cut off: nothing made.
    let at = 0x1000;
    let (hole, hole_end) = (at + C + C / 4, at + C + C / 2);
    mem.plug(Pfn(at), PageCount(4 * C)).unwrap();
    assert_eq!(mem.slab_count(), slabs + 1);
    mem.unplug(Pfn(hole), PageCount(hole_end - hole)).unwrap();
    mem.unplug(Pfn(at), PageCount(3)).unwrap();
    mem.unplug(Pfn(at + 4 * C - 2), PageCount(2)).unwrap();
    assert_eq!(made() - base, 0, "a cut makes no descriptor");
    let guard = mem.read();
    // The left piece's lookup makes chunk 1 whole, hole included, so the
    // right piece finds its part made.
    assert_eq!(
        guard.page(Pfn(hole - 1)).unwrap().phys_addr,
        Pfn(hole - 1).phys_addr()
    );
    assert_eq!(made() - base, C as usize);
    for pfn in hole_end..at + 2 * C {
        assert_eq!(
            guard.page(Pfn(pfn)).unwrap().phys_addr,
            Pfn(pfn).phys_addr()
        );
    }
    assert_eq!(
        made() - base,
        C as usize,
        "the right piece's part of chunk 1 was made"
    );
    assert!(guard.page(Pfn(hole)).is_none());
    assert!(guard.page(Pfn(at + 1)).is_none());
    // Every frame of both pieces, through `pages()`: chunks 0, 2 and 3.
    for segment in guard.segments().skip(1) {
        for (pfn, page) in segment.frames().zip(segment.pages()) {
            assert_eq!(page.phys_addr, Pfn(pfn).phys_addr());
        }
    }
    assert_eq!(made() - base, 4 * C as usize);
    drop(guard);
    // The plug's descriptor space stays until its last piece goes.
    mem.unplug(Pfn(at + 3), PageCount(hole - at - 3)).unwrap();
    mem.reclaim();
    assert_eq!(
        mem.slab_count(),
        slabs + 1,
        "one piece left: the space stays"
    );
    mem.unplug(Pfn(hole_end), PageCount(at + 4 * C - 2 - hole_end))
        .unwrap();
    mem.reclaim();
    assert_eq!(mem.pending_reclaim(), 0);
    assert_eq!(
        mem.slab_count(),
        slabs,
        "the last piece gone: the slab is freed"
    );
    // A whole plug unplugged before anyone looked: nothing made.
    mem.plug(Pfn(0x10000), PageCount(8 * C)).unwrap();
    mem.unplug(Pfn(0x10000), PageCount(8 * C)).unwrap();
    mem.reclaim();
    assert_eq!(mem.slab_count(), slabs);
    assert_eq!(made() - base, 4 * C as usize);
}

#[test]
fn descriptors_with_drop_glue_are_made_at_plug_time_and_all_dropped() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let base = MADE_DROPPING.load(Ordering::Relaxed);
    {
        let mem: Physmem<Dropping> = Physmem::initialized();
        mem.plug(Pfn(0), PageCount(2048)).unwrap();
        assert_eq!(MADE_DROPPING.load(Ordering::Relaxed) - base, 2048);
        assert_eq!(
            mem.read().page(Pfn(1500)).unwrap().phys_addr,
            Pfn(1500).phys_addr()
        );
    }
    assert_eq!(MADE_DROPPING.load(Ordering::Relaxed), base, "all dropped");
}

#[test]
fn descriptors_of_one_byte_alignment_are_made_at_plug_time_and_found_at_odd_addresses() {
    // A one-byte descriptor: half of them sit at odd addresses, where a
    // pointer's low bit could be taken for the deferred mark.
    #[derive(Debug)]
    struct Tiny(#[allow(dead_code)] u8);
    impl Page for Tiny {
        fn new(phys_addr: PhysAddr) -> Self {
            Tiny((phys_addr.0 >> 12) as u8)
        }
    }
    let mem: Physmem<Tiny> = Physmem::initialized();
    for i in 0..4 {
        let start = 0x1000 * (i + 1);
        mem.plug(Pfn(start), PageCount(1024)).unwrap();
        // Cutting `i` frames off the front leaves the segment's first
        // descriptor `i` bytes into its slab: odd for odd `i`.
        if i > 0 {
            mem.unplug(Pfn(start), PageCount(i)).unwrap();
        }
    }
    let guard = mem.read();
    for i in 0..4 {
        let start = 0x1000 * (i + 1) + i;
        for pfn in [start, start + 1, start + 700, 0x1000 * (i + 1) + 1023] {
            assert_eq!(guard.page(Pfn(pfn)).unwrap().0, pfn as u8, "pfn {pfn:#x}");
        }
    }
}
