//! Deferred descriptor init: a plug of more than one chunk (512 frames)
//! makes no descriptor; the first lookup in a chunk makes that chunk's,
//! a segment's `pages()` makes all, and a cut makes the rest of the
//! segment before it changes. Descriptor types with drop glue are made at
//! plug time, as before.
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

#[test]
fn a_plug_makes_no_descriptor_and_a_lookup_makes_its_chunk_once() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mem: Physmem<Counted> = Physmem::initialized();
    let base = made();
    mem.plug(Pfn(0x10000), PageCount(4096)).unwrap();
    assert_eq!(made() - base, 0, "a plug of 8 chunks makes nothing");
    let guard = mem.read();
    let page = guard.page(Pfn(0x10000 + 700)).unwrap();
    assert_eq!(page.phys_addr, Pfn(0x10000 + 700).phys_addr());
    assert_eq!(made() - base, 512, "the chunk of frame 700: 512..1024");
    for pfn in 0x10000 + 512..0x10000 + 1024 {
        assert_eq!(
            guard.page(Pfn(pfn)).unwrap().phys_addr,
            Pfn(pfn).phys_addr()
        );
    }
    assert_eq!(made() - base, 512, "the same chunk is not made again");
    // The last chunk, and the whole segment through `pages()`.
    assert_eq!(
        guard.page(Pfn(0x10000 + 4095)).unwrap().phys_addr,
        Pfn(0x10000 + 4095).phys_addr()
    );
    assert_eq!(made() - base, 1024);
    let segment = guard.segments().next().unwrap();
    for (pfn, page) in segment.frames().zip(segment.pages()) {
        assert_eq!(page.phys_addr, Pfn(pfn).phys_addr());
    }
    assert_eq!(made() - base, 4096, "pages() made the six chunks left");
    // A one-chunk plug is made at once: there is nothing to defer.
    drop(guard);
    mem.plug(Pfn(0x20000), PageCount(512)).unwrap();
    assert_eq!(made() - base, 4096 + 512);
}

#[test]
fn cutting_a_deferred_segment_makes_what_stays_and_a_whole_unplug_makes_nothing() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let mem: Physmem<Counted> = Physmem::initialized();
    mem.plug(Pfn(0), PageCount(1)).unwrap();
    let base = made();
    // A hole out of the middle: both halves stay, every descriptor made.
    mem.plug(Pfn(0x1000), PageCount(2048)).unwrap();
    mem.unplug(Pfn(0x1000 + 600), PageCount(100)).unwrap();
    assert_eq!(made() - base, 2048);
    let guard = mem.read();
    for pfn in (0x1000..0x1000 + 600).chain(0x1000 + 700..0x1000 + 2048) {
        assert_eq!(
            guard.page(Pfn(pfn)).unwrap().phys_addr,
            Pfn(pfn).phys_addr()
        );
    }
    assert!(guard.page(Pfn(0x1000 + 650)).is_none());
    drop(guard);
    assert_eq!(
        made() - base,
        2048,
        "looking up what stays makes nothing more"
    );
    // The front and the back of fresh segments.
    mem.plug(Pfn(0x4000), PageCount(1024)).unwrap();
    mem.unplug(Pfn(0x4000), PageCount(10)).unwrap();
    mem.plug(Pfn(0x8000), PageCount(1024)).unwrap();
    mem.unplug(Pfn(0x8000 + 1000), PageCount(24)).unwrap();
    assert_eq!(made() - base, 2048 + 2 * 1024);
    let guard = mem.read();
    assert_eq!(
        guard.page(Pfn(0x4000 + 10)).unwrap().phys_addr,
        Pfn(0x4000 + 10).phys_addr()
    );
    assert_eq!(
        guard.page(Pfn(0x8000 + 999)).unwrap().phys_addr,
        Pfn(0x8000 + 999).phys_addr()
    );
    drop(guard);
    // A whole segment unplugged before anyone looked: nothing made.
    mem.plug(Pfn(0x10000), PageCount(4096)).unwrap();
    mem.unplug(Pfn(0x10000), PageCount(4096)).unwrap();
    mem.reclaim();
    assert_eq!(mem.pending_reclaim(), 0);
    assert_eq!(made() - base, 2048 + 2 * 1024);
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
