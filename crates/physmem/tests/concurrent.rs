//! Real threads: readers look pages up without locks while a writer plugs
//! and unplugs (whole, front, back, middle). The writer runs a fixed number
//! of rounds and, twice a round, waits until every reader has run a whole
//! read section in the state it left: counts of read sections, not a clock,
//! make readers and writer overlap however the threads are scheduled.
// These use real threads and atomics; the loom build runs only tests/loom.rs.
#![cfg(not(loom))]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier, Condvar, Mutex, PoisonError};
use std::thread::{self, JoinHandle};

use hotkern_physmem::{BasicPage, Lookup, PageCount, Pfn, Physmem};

type Mem = Physmem<BasicPage, parking_lot::RawMutex>;

const READERS: usize = 3;
const ROUNDS: u64 = 200;
/// The writer churns 8 regions of this many frames from frame 64.
const REGION: u64 = 256;

/// Every shape a churned segment takes, relative to its region's start:
/// plugged, front cut, back cut, then the two halves of the middle cut.
const SHAPES: [(u64, u64); 5] = [(0, 200), (10, 200), (10, 190), (10, 50), (100, 190)];

/// What a reader did: lookups, hits, and hits in the churned regions.
#[derive(Default)]
struct Seen {
    lookups: u64,
    hits: u64,
    churned_hits: u64,
}

/// Read sections each reader has finished, and a condition variable the
/// writer sleeps on until they advance.
#[derive(Default)]
struct Progress {
    sections: Mutex<[u64; READERS]>,
    advanced: Condvar,
}

impl Progress {
    fn finished(&self, cpu: usize, sections: u64) {
        let mut counts = self.sections.lock().unwrap_or_else(PoisonError::into_inner);
        counts[cpu] = counts[cpu].saturating_add(sections);
        drop(counts);
        self.advanced.notify_all();
    }

    /// Waits until every reader has run a read section that began after
    /// this call: a section counted now may have begun before the write
    /// that preceded the call, so each count must move by two.
    fn wait_for_readers(&self) {
        let counts = self.sections.lock().unwrap_or_else(PoisonError::into_inner);
        let from = *counts;
        let behind = |counts: &mut [u64; READERS]| counts.iter().zip(from).any(|(&n, f)| n < f + 2);
        drop(
            self.advanced
                .wait_while(counts, behind)
                .unwrap_or_else(PoisonError::into_inner),
        );
    }
}

/// Marks a reader as done however it ends, so that a reader that panics
/// does not leave the writer waiting (joining it reports the panic).
struct Done<'a>(&'a Progress, usize);

impl Drop for Done<'_> {
    fn drop(&mut self) {
        self.0.finished(self.1, u64::MAX);
    }
}

fn reader(mem: &Mem, cpu: usize, stop: &AtomicBool, progress: &Progress) -> Seen {
    let _done = Done(progress, cpu);
    let mut seen = Seen::default();
    let mut pfn = cpu as u64;
    while !stop.load(Ordering::Acquire) {
        let guard = mem.read_on(cpu);
        for _ in 0..64 {
            // Full period modulo 4096: every frame once per 64 sections.
            pfn = (pfn * 37 + 11) % 4096;
            seen.lookups += 1;
            let Some(page) = guard.page(Pfn(pfn)) else {
                assert!(pfn >= 64, "the permanent segment vanished");
                continue;
            };
            seen.hits += 1;
            assert_eq!(page.phys_addr, Pfn(pfn).phys_addr());
            let Lookup {
                segment: handle,
                offset,
            } = guard.find(Pfn(pfn)).unwrap();
            let segment = guard.segment(handle).unwrap();
            let (start, end) = (segment.start().0, segment.end().0);
            assert_eq!(start + offset.0, pfn);
            assert!(pfn < end);
            if pfn >= 64 {
                seen.churned_hits += 1;
                // A torn write would show bounds no write produced.
                let region = 64 + (pfn - 64) / REGION * REGION;
                let shape = (start - region, end - region);
                assert!(SHAPES.contains(&shape), "segment [{start}, {end}) at {pfn}");
            }
        }
        // The snapshot is consistent: segments sorted, disjoint.
        let mut last_end = 0;
        for segment in guard.segments() {
            assert!(segment.start().0 >= last_end);
            last_end = segment.end().0;
        }
        drop(guard);
        progress.finished(cpu, 1);
    }
    seen
}

#[test]
fn readers_see_consistent_pages_while_a_writer_churns() {
    let mem = Arc::new(Mem::initialized());
    // A segment that never goes, and regions the writer churns.
    mem.plug(Pfn(0), PageCount(64)).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let progress = Arc::new(Progress::default());
    let start = Arc::new(Barrier::new(READERS + 1));
    let readers: Vec<JoinHandle<Seen>> = (0..READERS)
        .map(|cpu| {
            let (mem, stop, progress, start) =
                (mem.clone(), stop.clone(), progress.clone(), start.clone());
            thread::spawn(move || {
                start.wait();
                reader(&mem, cpu, &stop, &progress)
            })
        })
        .collect();
    start.wait();
    for round in 0..ROUNDS {
        let base = 64 + (round % 8) * REGION;
        mem.plug(Pfn(base), PageCount(200)).unwrap();
        progress.wait_for_readers();
        mem.unplug(Pfn(base), PageCount(10)).unwrap(); // front
        mem.unplug(Pfn(base + 190), PageCount(10)).unwrap(); // back
        mem.unplug(Pfn(base + 50), PageCount(50)).unwrap(); // middle
        progress.wait_for_readers();
        mem.unplug(Pfn(base + 10), PageCount(40)).unwrap(); // whole (lower)
        mem.unplug(Pfn(base + 100), PageCount(90)).unwrap(); // whole (upper)
    }
    stop.store(true, Ordering::Release);
    for (cpu, reader) in readers.into_iter().enumerate() {
        let seen = reader.join().unwrap();
        // At least four sections of 64 lookups per round, and the lookups
        // sweep every frame each 64 sections: some land in churned segments.
        assert!(
            seen.lookups >= ROUNDS * 4 * 64,
            "reader {cpu}: {}",
            seen.lookups
        );
        assert!(seen.hits > 0, "reader {cpu} found nothing");
        assert!(
            seen.churned_hits > 0,
            "reader {cpu} never saw a churned segment"
        );
    }
    mem.reclaim();
    assert_eq!(
        mem.pending_reclaim(),
        0,
        "nothing left once readers are gone"
    );
    assert_eq!(mem.len(), 1);
    assert_eq!(mem.slab_count(), 1, "churned slabs were freed");
}
