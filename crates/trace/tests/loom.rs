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
/// drains; returns the first bytes of every event read, in order.
fn race(
    ring: RingBuffer,
    reads: usize,
    write: impl FnOnce(&RingBuffer) + Send + 'static,
) -> (Arc<RingBuffer>, Vec<u8>) {
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
    (ring, seen)
}

/// Runs `f` under loom and checks it explored more than one schedule.
fn model(f: impl Fn() + Sync + Send + 'static) {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let runs = std::sync::Arc::new(AtomicUsize::new(0));
    let counter = runs.clone();
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(move || {
        counter.fetch_add(1, Ordering::Relaxed);
        f();
    });
    let explored = runs.load(Ordering::Relaxed);
    assert!(explored > 1, "only {explored} interleaving explored");
    eprintln!("explored {explored} interleavings");
}

#[test]
fn reserve_commit_against_a_reader() {
    model(|| {
        let ring = RingBuffer::new(1, 2, Mode::Overwrite).unwrap();
        let (ring, seen) = race(ring, 2, |ring| {
            for tag in [10u8, 20, 30] {
                // Big events: the third one switches pages.
                // SAFETY: this thread is CPU 0's only writer.
                unsafe { ring.write(0, u64::from(tag), &payload(tag, 1800)) }.unwrap();
            }
        });
        assert_eq!(ring.stats(0).unwrap().written, 3);
        assert_eq!(seen.len(), 3, "nothing is lost without overwriting");
    });
}

#[test]
fn nested_writer_inside_a_reservation() {
    model(|| {
        let ring = RingBuffer::new(1, 2, Mode::Overwrite).unwrap();
        let (_, seen) = race(ring, 2, |ring| {
            // SAFETY: one writer thread; the inner write models an
            // interrupt arriving between reserve and commit.
            unsafe {
                let mut outer = ring.reserve(0, 100, 64).unwrap();
                ring.write(0, 150, &payload(2, 64)).unwrap();
                // The interrupted writer resumes later: the reader may run
                // while the outer event is still being filled.
                thread::yield_now();
                outer.payload_mut().copy_from_slice(&payload(1, 64));
                outer.commit();
            }
        });
        assert_eq!(seen, vec![payload(1, 1)[0], payload(2, 1)[0]]);
    });
}

#[test]
fn reader_page_swap_races_overwrite() {
    model(|| {
        let ring = RingBuffer::new(1, 2, Mode::Overwrite).unwrap();
        let (ring, seen) = race(ring, 2, |ring| {
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
    });
}
