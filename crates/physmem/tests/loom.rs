//! Loom model of the read side: a reader that looks a page up while the
//! writer unplugs it (and publishes more indexes) never sees freed memory.
//!
//! The descriptor holds a loom cell that its destructor writes, so that loom
//! reports a race if reclamation is not ordered after the reader's access.
#![cfg(loom)]

use hotkern_physmem::{Page, PageCount, Pfn, PhysAddr, Physmem};
use loom::cell::UnsafeCell;
use loom::sync::Arc;
use loom::thread;

struct Tracked {
    addr: UnsafeCell<u64>,
}

// SAFETY: the cell is only written by `drop`, which the epoch orders after
// every reader; loom checks exactly that.
unsafe impl Sync for Tracked {}

impl Page for Tracked {
    fn new(phys_addr: PhysAddr) -> Self {
        Tracked {
            addr: UnsafeCell::new(phys_addr.0),
        }
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        // SAFETY: `&mut self`: no other reference to the cell exists.
        self.addr.with_mut(|a| unsafe { *a = u64::MAX });
    }
}

fn read_page(mem: &Physmem<Tracked>, pfn: u64) -> Option<u64> {
    let guard = mem.read();
    let page = guard.page(Pfn(pfn))?;
    // SAFETY: only `drop` writes the cell, and the guard keeps the
    // descriptor from being dropped; loom reports it if that fails.
    Some(page.addr.with(|a| unsafe { *a }))
}

#[test]
fn lookup_racing_unplug_never_reads_a_freed_descriptor() {
    loom::model(|| {
        let mem = Arc::new(Physmem::<Tracked>::initialized());
        mem.plug(Pfn(0), PageCount(1)).unwrap();
        mem.plug(Pfn(8), PageCount(1)).unwrap();
        let reader = {
            let mem = mem.clone();
            thread::spawn(move || read_page(&mem, 8))
        };
        mem.unplug(Pfn(8), PageCount(1)).unwrap();
        let seen = reader.join().unwrap();
        // Either the reader came first and saw the intact descriptor, or it
        // came after the unplug and found nothing.
        assert!(seen.is_none() || seen == Some(Pfn(8).phys_addr().0));
        mem.reclaim();
        assert_eq!(mem.pending_reclaim(), 0);
    });
}

#[test]
fn reclamation_waits_across_two_epoch_flips() {
    loom::model(|| {
        let mem = Arc::new(Physmem::<Tracked>::initialized());
        mem.plug(Pfn(0), PageCount(1)).unwrap();
        mem.plug(Pfn(8), PageCount(1)).unwrap();
        mem.plug(Pfn(16), PageCount(1)).unwrap();
        let reader = {
            let mem = mem.clone();
            thread::spawn(move || (read_page(&mem, 16), read_page(&mem, 8)))
        };
        mem.unplug(Pfn(8), PageCount(1)).unwrap();
        mem.unplug(Pfn(16), PageCount(1)).unwrap();
        let (sixteen, eight) = reader.join().unwrap();
        assert!(sixteen.is_none() || sixteen == Some(Pfn(16).phys_addr().0));
        assert!(eight.is_none() || eight == Some(Pfn(8).phys_addr().0));
        mem.reclaim();
        mem.reclaim();
        assert_eq!(mem.pending_reclaim(), 0);
    });
}

#[test]
fn iteration_and_handles_racing_a_split_see_one_consistent_snapshot() {
    loom::model(|| {
        let mem = Arc::new(Physmem::<Tracked>::initialized());
        let low = mem.plug(Pfn(0), PageCount(1)).unwrap();
        let split = mem.plug(Pfn(8), PageCount(3)).unwrap();
        let reader = {
            let mem = mem.clone();
            thread::spawn(move || {
                let guard = mem.read();
                let starts: Vec<u64> = guard.segments().map(|s| s.start().0).collect();
                let end = guard.segment(split).map(|s| s.end().0);
                let after_low = guard.next(low).unwrap().map(|s| s.start().0);
                (starts, end, after_low)
            })
        };
        mem.unplug(Pfn(9), PageCount(1)).unwrap();
        let (starts, end, after_low) = reader.join().unwrap();
        // Before the split or after it, never a mixture.
        match starts.as_slice() {
            [0, 8] => assert_eq!(end, Ok(11)),
            [0, 8, 10] => assert_eq!(end, Ok(9)),
            other => panic!("torn snapshot {other:?}"),
        }
        assert_eq!(after_low, Some(8));
        mem.reclaim();
        assert_eq!(mem.pending_reclaim(), 0);
    });
}

/// No drop glue, so its descriptors are made on first use (deferred
/// init); the chunk's loom cell inside physmem tracks the making.
struct Deferred {
    addr: u64,
}

impl Page for Deferred {
    fn new(phys_addr: PhysAddr) -> Self {
        Deferred { addr: phys_addr.0 }
    }
}

#[test]
fn a_deferred_chunk_is_made_once_and_handed_out_only_once_made() {
    loom::model(|| {
        let mem = Arc::new(Physmem::<Deferred>::initialized());
        // Sixteen chunks of 64 frames: made on first use.
        mem.plug(Pfn(0), PageCount(1024)).unwrap();
        let reader = {
            let mem = mem.clone();
            thread::spawn(move || mem.read().page(Pfn(5)).map(|p| p.addr))
        };
        // The writer cuts the segment's tail and makes chunk 0 in the
        // piece that stays, racing the reader for it.
        mem.unplug(Pfn(1000), PageCount(24)).unwrap();
        let here = mem.read().page(Pfn(7)).map(|p| p.addr);
        assert_eq!(here, Some(Pfn(7).phys_addr().0));
        assert_eq!(reader.join().unwrap(), Some(Pfn(5).phys_addr().0));
        let guard = mem.read();
        assert_eq!(
            guard.page(Pfn(600)).map(|p| p.addr),
            Some(Pfn(600).phys_addr().0)
        );
        drop(guard);
        mem.reclaim();
        assert_eq!(mem.pending_reclaim(), 0);
    });
}

#[test]
fn two_readers_of_a_fresh_chunk_both_get_made_descriptors() {
    loom::model(|| {
        let mem = Arc::new(Physmem::<Deferred>::initialized());
        mem.plug(Pfn(0), PageCount(1024)).unwrap();
        let reader = |pfn| {
            let mem = mem.clone();
            thread::spawn(move || mem.read().page(Pfn(pfn)).map(|p| p.addr))
        };
        let (a, b) = (reader(3), reader(700));
        let here = mem.read().page(Pfn(4)).map(|p| p.addr);
        assert_eq!(a.join().unwrap(), Some(Pfn(3).phys_addr().0));
        assert_eq!(b.join().unwrap(), Some(Pfn(700).phys_addr().0));
        assert_eq!(here, Some(Pfn(4).phys_addr().0));
    });
}
