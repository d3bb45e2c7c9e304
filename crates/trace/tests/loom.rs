//! Loom models of the ring buffer's lock-free parts: reserve/commit against
//! a concurrent reader, a writer nested inside another one's reservation,
//! and the reader's page swap racing the writer's overwrite.
//!
//! Each model runs the writer and the reader on their own loom threads; the
//! main thread then drains what is left and checks the accounting
//! (`written == read + lost`), the order and that no event is torn.
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test --release -p hotkern-trace --test loom`
#![cfg(loom)]

use hotkern_trace::ring::{Mode, PageView, RingBuffer, PAGE_SIZE};
use loom::sync::Arc;
use loom::thread;
use std::collections::BTreeSet;
use std::sync::Mutex;

/// Bytes that follow from the first one, so a torn or half-written copy shows.
fn bytes_from(first: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| first.wrapping_add(i as u8)).collect()
}

/// The payload of event `tag`; tags are chosen so first bytes increase.
fn payload(tag: u8, len: usize) -> Vec<u8> {
    bytes_from(tag.wrapping_mul(31), len)
}

fn check_page(page: &[u8; PAGE_SIZE], seen: &mut Vec<u8>) {
    let view = PageView::new(&page[..]).expect("valid page");
    assert!(view.check().is_ok());
    for event in view.events() {
        let expected = bytes_from(event.payload[0], event.payload.len());
        assert_eq!(event.payload, &expected[..], "torn event");
        seen.push(event.payload[0]);
    }
}

/// Runs `write` and a reader taking up to `reads` pages concurrently, then
/// drains; returns the first bytes of every event read, in order, and how
/// many of them the concurrent reader took.
fn race(
    ring: RingBuffer,
    reads: usize,
    write: impl FnOnce(&RingBuffer) + Send + 'static,
) -> (Arc<RingBuffer>, Vec<u8>, usize) {
    let ring = Arc::new(ring);
    let writer = {
        let ring = ring.clone();
        thread::spawn(move || write(&ring))
    };
    let reader = {
        let ring = ring.clone();
        thread::spawn(move || {
            let mut seen = Vec::new();
            let mut page = Box::new([0u8; PAGE_SIZE]);
            for _ in 0..reads {
                if ring.read_page(0, &mut page).is_some() {
                    check_page(&page, &mut seen);
                }
            }
            seen
        })
    };
    writer.join().unwrap();
    let mut seen = reader.join().unwrap();
    let during = seen.len();
    let mut page = Box::new([0u8; PAGE_SIZE]);
    while ring.read_page(0, &mut page).is_some() {
        check_page(&page, &mut seen);
    }
    let stats = ring.stats(0).unwrap();
    assert_eq!(stats.written, stats.read + stats.lost(), "{stats:?}");
    assert_eq!(seen.len() as u64, stats.read);
    let mut ordered = seen.clone();
    ordered.sort_unstable();
    ordered.dedup();
    assert_eq!(seen, ordered, "each event at most once, in order");
    (ring, seen, during)
}

/// Runs `f` under loom; returns how many executions it explored and the
/// set of outcomes they ended with (each test asserts that the outcomes
/// that only some schedules produce were all reached).
fn model<T: Ord + Send + 'static>(
    f: impl Fn() -> T + Sync + Send + 'static,
) -> (usize, BTreeSet<T>) {
    let seen = std::sync::Arc::new(Mutex::new((0usize, BTreeSet::new())));
    let record = seen.clone();
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(move || {
        let outcome = f();
        let mut seen = record.lock().unwrap();
        seen.0 += 1;
        seen.1.insert(outcome);
    });
    let (explored, outcomes) = std::mem::take(&mut *seen.lock().unwrap());
    eprintln!("explored {explored} interleavings");
    (explored, outcomes)
}

#[test]
fn reserve_commit_against_a_reader() {
    let (explored, during) = model(|| {
        let ring = RingBuffer::new(1, 2, Mode::Overwrite).unwrap();
        let (ring, seen, during) = race(ring, 2, |ring| {
            for tag in [10u8, 20, 30] {
                // Big events: two fill a page, the third one switches pages.
                // SAFETY: this thread is CPU 0's only writer.
                unsafe { ring.write(0, u64::from(tag), &payload(tag, 1800)) }.unwrap();
            }
        });
        assert_eq!(ring.stats(0).unwrap().written, 3);
        assert_eq!(seen.len(), 3, "nothing is lost without overwriting");
        during
    });
    // The writer's three commits against the reader's two loads of the
    // commit word alone can be ordered in C(5, 2) = 10 ways.
    assert!(explored >= 10, "only {explored} interleavings");
    // The reader ran before any commit (0), in between (a partial read of
    // the first event alone: 1), and after all of them (the whole first
    // page, then the second's one event: 3).
    for events in [0, 1, 3] {
        assert!(during.contains(&events), "never read {events}: {during:?}");
    }
}

#[test]
fn nested_writer_inside_a_reservation() {
    let (explored, during) = model(|| {
        let ring = RingBuffer::new(1, 2, Mode::Overwrite).unwrap();
        let (_, seen, during) = race(ring, 2, |ring| {
            // SAFETY: one writer thread; the inner write models an
            // interrupt arriving between reserve and commit.
            unsafe {
                let mut outer = ring.reserve(0, 100, 64).unwrap();
                ring.write(0, 150, &payload(2, 64)).unwrap();
                // The page bytes are plain memory, which loom does not
                // track, so nothing made it run the reader between the
                // nested commit and the outer payload, where a nested
                // writer that commits (it must not) hands out the outer
                // event unwritten. Loading the read counter, which a
                // reader that took events has added to, is an operation
                // loom orders against that reader: it then also runs the
                // reader before this point.
                let _ = ring.stats(0);
                outer.payload_mut().copy_from_slice(&payload(1, 64));
                outer.commit();
            }
        });
        assert_eq!(seen, vec![payload(1, 1)[0], payload(2, 1)[0]]);
        during
    });
    // The one commit (the outer writer's) lands before, between or after
    // the reader's two loads of the commit word.
    assert!(explored >= 3, "only {explored} interleavings");
    // That commit publishes both events at once: a reader racing it sees
    // neither or both, never the nested event without the outer one.
    assert_eq!(during, BTreeSet::from([0, 2]));
}

#[test]
fn reader_page_swap_races_overwrite() {
    let (explored, overruns) = model(|| {
        let ring = RingBuffer::new(1, 2, Mode::Overwrite).unwrap();
        let (ring, seen, _) = race(ring, 2, |ring| {
            for tag in [1u8, 2, 3, 4] {
                // Each fills most of a page: the third and fourth overwrite
                // unless the reader took the oldest page first.
                // SAFETY: CPU 0's only writer.
                unsafe { ring.write(0, u64::from(tag), &payload(tag, 3000)) }.unwrap();
            }
        });
        let stats = ring.stats(0).unwrap();
        assert_eq!(stats.written, 4);
        // The newest event always survives.
        assert_eq!(seen.last(), Some(&payload(4, 1)[0]));
        stats.overrun
    });
    // Four commits against two loads of the commit word: C(6, 2) = 15.
    assert!(explored >= 15, "only {explored} interleavings");
    // The reader took both old pages in time (nothing overwritten), one of
    // them, or neither (events 1 and 2 overwritten): every branch of the
    // slot exchange's race was run.
    assert_eq!(overruns, BTreeSet::from([0, 1, 2]));
}
