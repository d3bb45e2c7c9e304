//! Real threads: readers look pages up without locks while a writer plugs
//! and unplugs (whole, front, back, middle) as fast as it can.
// These use real threads and atomics; the loom build runs only tests/loom.rs.
#![cfg(not(loom))]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use hotkern_physmem::{BasicPage, PageCount, Pfn, Physmem};

type Mem = Physmem<BasicPage, parking_lot::RawMutex>;

#[test]
fn readers_see_consistent_pages_while_a_writer_churns() {
    let mem = Arc::new(Mem::initialized());
    // A segment that never goes, and a region the writer churns.
    mem.plug(Pfn(0), PageCount(64)).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..3)
        .map(|cpu| {
            let (mem, stop) = (mem.clone(), stop.clone());
            thread::spawn(move || {
                let (mut hits, mut lookups) = (0u64, 0u64);
                let mut pfn = cpu as u64;
                while !stop.load(Ordering::Relaxed) {
                    let guard = mem.read_on(cpu);
                    for _ in 0..64 {
                        pfn = (pfn * 37 + 11) % 4096;
                        lookups += 1;
                        if let Some(page) = guard.page(Pfn(pfn)) {
                            hits += 1;
                            assert_eq!(page.phys_addr, Pfn(pfn).phys_addr());
                            let (handle, offset) = guard.find(Pfn(pfn)).unwrap();
                            let segment = guard.segment(handle).unwrap();
                            assert_eq!(segment.start().0 + offset.0, pfn);
                            assert!(pfn < segment.end().0);
                        } else {
                            assert!(pfn >= 64, "the permanent segment vanished");
                        }
                    }
                    // The snapshot is consistent: segments sorted, disjoint.
                    let mut last_end = 0;
                    for segment in guard.segments() {
                        assert!(segment.start().0 >= last_end);
                        last_end = segment.end().0;
                    }
                }
                (hits, lookups)
            })
        })
        .collect();
    let deadline = Instant::now() + Duration::from_millis(600);
    let mut rounds = 0u64;
    while Instant::now() < deadline {
        let base = 64 + (rounds % 8) * 256;
        mem.plug(Pfn(base), PageCount(200)).unwrap();
        mem.unplug(Pfn(base), PageCount(10)).unwrap(); // front
        mem.unplug(Pfn(base + 190), PageCount(10)).unwrap(); // back
        mem.unplug(Pfn(base + 50), PageCount(50)).unwrap(); // middle
        mem.unplug(Pfn(base + 10), PageCount(40)).unwrap(); // whole (lower)
        mem.unplug(Pfn(base + 100), PageCount(90)).unwrap(); // whole (upper)
        rounds += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let mut total_hits = 0;
    for reader in readers {
        let (hits, lookups) = reader.join().unwrap();
        assert!(lookups > 0);
        total_hits += hits;
    }
    assert!(rounds > 10, "writer made progress: {rounds}");
    assert!(total_hits > 0);
    mem.reclaim();
    assert_eq!(
        mem.pending_reclaim(),
        0,
        "nothing left once readers are gone"
    );
    assert_eq!(mem.len(), 1);
    assert_eq!(mem.slab_count(), 1, "churned slabs were freed");
}
