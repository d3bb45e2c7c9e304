use super::*;
use alloc::string::ToString;
use alloc::vec;
use alloc::vec::Vec;

fn payload(tag: u32, len: usize) -> Vec<u8> {
    let mut bytes = vec![0u8; len.max(8)];
    bytes[..4].copy_from_slice(&tag.to_le_bytes());
    for (i, byte) in bytes.iter_mut().enumerate().skip(4) {
        *byte = (tag as usize).wrapping_add(i) as u8;
    }
    bytes
}

fn tags(pages: &[Box<[u8; PAGE_SIZE]>]) -> Vec<(u64, u32)> {
    let mut out = Vec::new();
    for page in pages {
        let view = PageView::new(&page[..]).unwrap();
        assert!(view.check().is_ok());
        for event in view.events() {
            let tag = u32::from_le_bytes(event.payload[..4].try_into().unwrap());
            // No torn event: the body must match the tag.
            let expected = payload(tag, event.payload.len());
            assert_eq!(&event.payload[4..], &expected[4..], "torn event {tag}");
            out.push((event.timestamp_ns, tag));
        }
    }
    out
}

/// Data bytes of an event with an 8-byte payload (a 4-byte header).
const SMALL_EVENT: usize = 12;
/// Such events in one page: 340, filling the 4080 data bytes exactly.
const SMALL_PER_PAGE: usize = PAGE_DATA_SIZE / SMALL_EVENT;

fn write(ring: &RingBuffer, cpu: usize, now: u64, tag: u32, len: usize) -> Result<(), Refused> {
    // SAFETY: tests write each CPU from one thread.
    unsafe { ring.write(cpu, now, &payload(tag, len)) }
}

#[test]
fn events_come_back_in_order_with_their_times() {
    let ring = RingBuffer::new(2, 4, Mode::Overwrite).unwrap();
    for i in 0..10u32 {
        write(&ring, 1, 1000 + u64::from(i) * 10, i, 16).unwrap();
    }
    let pages = ring.drain_cpu(1);
    let got = tags(&pages);
    assert_eq!(got.len(), 10);
    for (i, (time, tag)) in got.iter().enumerate() {
        assert_eq!(*tag, i as u32);
        assert_eq!(*time, 1000 + i as u64 * 10);
    }
    assert!(ring.drain_cpu(0).is_empty());
    let stats = ring.stats(1).unwrap();
    assert_eq!((stats.written, stats.read, stats.lost()), (10, 10, 0));
}

#[test]
fn equal_or_backward_times_stay_strictly_increasing() {
    let ring = RingBuffer::new(1, 2, Mode::Overwrite).unwrap();
    write(&ring, 0, 500, 0, 8).unwrap();
    write(&ring, 0, 500, 1, 8).unwrap();
    write(&ring, 0, 400, 2, 8).unwrap();
    let got = tags(&ring.drain_cpu(0));
    assert_eq!(got, vec![(500, 0), (501, 1), (502, 2)]);
}

#[test]
fn large_gaps_use_time_extends_and_big_payloads_use_length_words() {
    let ring = RingBuffer::new(1, 4, Mode::Overwrite).unwrap();
    let gap = 3u64 << 30;
    write(&ring, 0, 10, 1, 8).unwrap();
    write(&ring, 0, 10 + gap, 2, 300).unwrap();
    write(&ring, 0, 20 + gap, 3, 8).unwrap();
    let got = tags(&ring.drain_cpu(0));
    assert_eq!(got, vec![(10, 1), (10 + gap, 2), (20 + gap, 3)]);
}

#[test]
fn deltas_at_the_header_limit_take_the_short_path_or_an_extend() {
    use crate::ring::page::MAX_TIME_DELTA;
    // The largest delta an event header holds needs no extend (the short
    // path of `reserve`); one more needs one (the general path). Both must
    // decode to the exact times, and only the second event grows by 8 bytes.
    let ring = RingBuffer::new(1, 2, Mode::Overwrite).unwrap();
    let first = 1_000;
    let second = first + MAX_TIME_DELTA;
    let third = second + MAX_TIME_DELTA + 1;
    for (tag, now) in [(1, first), (2, second), (3, third), (4, third + 1)] {
        write(&ring, 0, now, tag, 8).unwrap();
    }
    let pages = ring.drain_cpu(0);
    assert_eq!(
        tags(&pages),
        vec![(first, 1), (second, 2), (third, 3), (third + 1, 4)]
    );
    let view = PageView::new(&pages[0][..]).unwrap();
    // Four 8-byte events (4-byte header each) and one 8-byte time extend.
    assert_eq!(view.data_len(), 4 * 12 + 8);
}

#[test]
fn events_cross_pages_and_overwrite_counts_every_loss() {
    let ring = RingBuffer::new(1, 3, Mode::Overwrite).unwrap();
    let total = 2000u32;
    for i in 0..total {
        write(&ring, 0, u64::from(i) * 7 + 1, i, 40).unwrap();
    }
    let got = tags(&ring.drain_cpu(0));
    let stats = ring.stats(0).unwrap();
    assert_eq!(stats.written, u64::from(total));
    assert_eq!(stats.dropped, 0);
    assert!(stats.overrun > 0);
    assert_eq!(stats.written, stats.read + stats.lost());
    assert_eq!(got.len() as u64, stats.read);
    // What survives is the newest, contiguous, ending with the last event.
    let first = got[0].1;
    for (k, (_, tag)) in got.iter().enumerate() {
        assert_eq!(*tag, first + k as u32);
    }
    assert_eq!(got.last().unwrap().1, total - 1);
}

#[test]
fn producer_consumer_drops_new_events_and_keeps_old_ones() {
    let ring = RingBuffer::new(1, 2, Mode::ProducerConsumer).unwrap();
    let mut refused = 0;
    for i in 0..1000u32 {
        if write(&ring, 0, u64::from(i) + 1, i, 40) == Err(Refused::Lost) {
            refused += 1;
        }
    }
    let got = tags(&ring.drain_cpu(0));
    let stats = ring.stats(0).unwrap();
    assert!(refused > 0);
    assert_eq!(stats.dropped, refused);
    assert_eq!(stats.overrun, 0);
    assert_eq!(got[0].1, 0, "the oldest event survives");
    for (k, (_, tag)) in got.iter().enumerate() {
        assert_eq!(*tag, k as u32);
    }
    assert_eq!(stats.written, stats.read + stats.lost());
    // Once read, there is room again.
    write(&ring, 0, 5000, 7777, 40).unwrap();
    assert_eq!(tags(&ring.drain_cpu(0)), vec![(5000, 7777)]);
}

#[test]
fn partial_reads_of_the_tail_page_are_not_read_twice() {
    let ring = RingBuffer::new(1, 4, Mode::Overwrite).unwrap();
    let mut page = Box::new([0u8; PAGE_SIZE]);
    write(&ring, 0, 100, 1, 8).unwrap();
    write(&ring, 0, 200, 2, 8).unwrap();
    let first = ring.read_page(0, &mut page).unwrap();
    assert!(first.partial);
    assert_eq!(first.events, 2);
    assert_eq!(tags(&[page.clone()]), vec![(100, 1), (200, 2)]);
    assert!(ring.read_page(0, &mut page).is_none());
    write(&ring, 0, 300, 3, 8).unwrap();
    let second = ring.read_page(0, &mut page).unwrap();
    assert_eq!(tags(&[page.clone()]), vec![(300, 3)]);
    assert_eq!(second.events, 1);
    // Fill past the page: the rest of the first page comes whole, without 1..3.
    for i in 4..400u32 {
        write(&ring, 0, u64::from(i) * 100, i, 8).unwrap();
    }
    let got = tags(&ring.drain_cpu(0));
    assert_eq!(got[0], (400, 4));
    assert_eq!(got.len(), 396);
    let stats = ring.stats(0).unwrap();
    assert_eq!(stats.written, stats.read + stats.lost());
    assert_eq!(stats.lost(), 0);
}

#[test]
fn overwrite_after_partial_read_counts_only_unread_events() {
    let ring = RingBuffer::new(1, 2, Mode::Overwrite).unwrap();
    let mut page = Box::new([0u8; PAGE_SIZE]);
    write(&ring, 0, 1, 0, 8).unwrap();
    assert_eq!(ring.read_page(0, &mut page).unwrap().events, 1);
    for i in 1..3000u32 {
        write(&ring, 0, u64::from(i) + 1, i, 24).unwrap();
    }
    ring.drain_cpu(0);
    let stats = ring.stats(0).unwrap();
    assert!(stats.overrun > 0);
    assert_eq!(stats.written, stats.read + stats.lost());
}

#[test]
fn nested_writer_between_reserve_and_commit_is_ordered_and_committed_by_the_outer() {
    let ring = RingBuffer::new(1, 4, Mode::Overwrite).unwrap();
    // SAFETY: one thread; the inner write models an interrupt.
    let mut outer = unsafe { ring.reserve(0, 100, 8).unwrap() };
    write(&ring, 0, 150, 2, 8).unwrap();
    // The nested event is not visible while the outer one is open.
    let mut page = Box::new([0u8; PAGE_SIZE]);
    assert!(ring.read_page(0, &mut page).is_none());
    outer.payload_mut().copy_from_slice(&payload(1, 8));
    outer.commit();
    let got = tags(&ring.drain_cpu(0));
    assert_eq!(got, vec![(100, 1), (150, 2)]);
}

#[test]
fn explicit_commit_and_drop_each_end_the_writer_once() {
    let ring = RingBuffer::new(1, 4, Mode::Overwrite).unwrap();
    // SAFETY: one thread is CPU 0's only writer.
    unsafe {
        let mut first = ring.reserve(0, 100, 8).unwrap();
        first.payload_mut().copy_from_slice(&payload(1, 8));
        first.commit();
        assert!(!ring.cpus[0].writing(), "commit ended the writer");
        let mut second = ring.reserve(0, 200, 8).unwrap();
        assert!(!second.nested(), "a committed writer is not nested on");
        second.payload_mut().copy_from_slice(&payload(2, 8));
        drop(second);
        assert!(!ring.cpus[0].writing(), "drop ended the writer");
        let third = ring.reserve(0, 300, 8).unwrap();
        assert!(!third.nested());
        let mut inner = ring.reserve(0, 400, 8).unwrap();
        assert!(inner.nested(), "a writer inside an open reservation nests");
        inner.payload_mut().copy_from_slice(&payload(4, 8));
        inner.commit();
        assert!(ring.cpus[0].writing(), "the outer writer is still open");
        let mut third = third;
        third.payload_mut().copy_from_slice(&payload(3, 8));
        third.commit();
    }
    let got = tags(&ring.drain_cpu(0));
    assert_eq!(got, vec![(100, 1), (200, 2), (300, 3), (400, 4)]);
    let stats = ring.stats(0).unwrap();
    assert_eq!((stats.written, stats.read), (4, 4));
}

#[test]
fn nested_writer_during_page_switch_is_dropped_and_counted() {
    let ring = RingBuffer::new(1, 4, Mode::Overwrite).unwrap();
    // Fill the first page almost completely, keeping an outer event open
    // whose successor (nested) must move the page.
    let mut i = 0u32;
    loop {
        write(&ring, 0, u64::from(i) + 1, i, 100).unwrap();
        i += 1;
        if ring.stats(0).unwrap().written * 108 > 3800 {
            break;
        }
    }
    // SAFETY: one thread; the writes below model interrupts nesting on it.
    let mut outer = unsafe { ring.reserve(0, 10_000, 8).unwrap() };
    // Nested writers fill the page and switch it; all fit.
    for k in 0..5u32 {
        write(&ring, 0, 10_001 + u64::from(k), 1000 + k, 100).unwrap();
    }
    outer.payload_mut().copy_from_slice(&payload(999, 8));
    drop(outer);
    let got = tags(&ring.drain_cpu(0));
    let stats = ring.stats(0).unwrap();
    assert_eq!(stats.written, stats.read + stats.lost());
    assert_eq!(got.len() as u64, stats.read);
    assert!(got.iter().any(|(_, tag)| *tag == 999));
}

#[test]
fn bad_arguments_are_refused_without_side_effects() {
    assert_eq!(
        RingBuffer::new(0, 4, Mode::Overwrite).unwrap_err(),
        RingError::NoCpus
    );
    assert_eq!(
        RingBuffer::new(1, 1, Mode::Overwrite).unwrap_err(),
        RingError::BadPageCount(1)
    );
    let ring = RingBuffer::new(1, 2, Mode::Overwrite).unwrap();
    assert_eq!(
        write(&ring, 0, 1, 1, page::MAX_PAYLOAD + 1),
        Err(Refused::TooLarge)
    );
    assert_eq!(write(&ring, 5, 1, 1, 8), Err(Refused::NoSuchCpu));
    assert_eq!(ring.stats(0).unwrap(), CpuStats::default());
    assert_eq!(ring.stats(5), Err(RingError::NoSuchCpu(5)));
    // The largest payload fits.
    write(&ring, 0, 1, 1, page::MAX_PAYLOAD).unwrap();
    assert_eq!(tags(&ring.drain_cpu(0)).len(), 1);
}

#[test]
fn errors_say_what_was_refused() {
    let error: &dyn core::error::Error = &RingError::BadPageCount(1);
    assert_eq!(
        error.to_string(),
        alloc::format!("1 pages per CPU: need between 2 and {MAX_PAGES_PER_CPU}")
    );
    let error: &dyn core::error::Error = &Refused::TooLarge;
    assert_eq!(
        error.to_string(),
        alloc::format!("event payload larger than {} bytes", page::MAX_PAYLOAD)
    );
    assert_eq!(
        Refused::Lost.to_string(),
        "event lost: the buffer is full or its page is busy"
    );
}

#[test]
fn lost_events_are_flagged_in_the_next_page() {
    let ring = RingBuffer::new(1, 2, Mode::Overwrite).unwrap();
    for i in 0..500u32 {
        write(&ring, 0, u64::from(i) + 1, i, 40).unwrap();
    }
    let mut page = Box::new([0u8; PAGE_SIZE]);
    ring.read_page(0, &mut page).unwrap();
    let view = PageView::new(&page[..]).unwrap();
    let lost = ring.stats(0).unwrap().lost();
    assert_eq!(view.missed_events(), Some(Some(lost)));
}

#[test]
fn peek_does_not_consume() {
    let ring = RingBuffer::new(1, 3, Mode::Overwrite).unwrap();
    for i in 0..150u32 {
        write(&ring, 0, u64::from(i) + 1, i, 40).unwrap();
    }
    let mut peeked = Vec::new();
    ring.peek_pages(0, |page| peeked.push(Box::new(*page)));
    let drained = ring.drain_cpu(0);
    assert_eq!(tags(&peeked), tags(&drained));
    assert_eq!(tags(&drained).len(), 150);
}

#[test]
fn clear_discards_and_accounts() {
    let ring = RingBuffer::new(2, 3, Mode::Overwrite).unwrap();
    for i in 0..50u32 {
        write(&ring, 0, u64::from(i) + 1, i, 40).unwrap();
    }
    assert_eq!(ring.clear(), 50);
    assert!(ring.drain_cpu(0).is_empty());
    let stats = ring.total_stats();
    assert_eq!((stats.written, stats.read), (50, 50));
}

#[test]
fn totals_add_every_cpus_counters() {
    // Each counter non-zero on both CPUs, so a total that subtracts or
    // multiplies instead of adding shows.
    for mode in [Mode::Overwrite, Mode::ProducerConsumer] {
        let ring = RingBuffer::new(2, 2, mode).unwrap();
        assert_eq!(ring.cpus(), 2);
        for cpu in 0..2 {
            let mut page = Box::new([0u8; PAGE_SIZE]);
            write(&ring, cpu, 1, 0, 40).unwrap();
            ring.read_page(cpu, &mut page).unwrap();
            for i in 1..(300 + 100 * cpu as u32) {
                let _ = write(&ring, cpu, u64::from(i) + 1, i, 40);
            }
        }
        let each = [ring.stats(0).unwrap(), ring.stats(1).unwrap()];
        let total = ring.total_stats();
        assert_eq!(total.written, each[0].written + each[1].written);
        assert_eq!(total.read, each[0].read + each[1].read);
        assert_eq!(total.dropped, each[0].dropped + each[1].dropped);
        assert_eq!(total.overrun, each[0].overrun + each[1].overrun);
        let lost = if mode == Mode::Overwrite {
            [each[0].overrun, each[1].overrun]
        } else {
            [each[0].dropped, each[1].dropped]
        };
        assert!(lost[0] > 1 && lost[1] > 1, "{each:?}");
        // Both rings still hold their newest (or oldest) pages.
        assert!((0..2).all(|cpu| !ring.drain_cpu(cpu).is_empty()));
    }
}

#[test]
fn debug_names_the_shape() {
    let ring = RingBuffer::new(3, 5, Mode::ProducerConsumer).unwrap();
    assert_eq!(
        alloc::format!("{ring:?}"),
        "RingBuffer { cpus: 3, pages_per_cpu: 5, mode: ProducerConsumer }"
    );
}

#[test]
fn alignment_padding_is_zeroed_not_stale() {
    let ring = RingBuffer::new(1, 2, Mode::Overwrite).unwrap();
    // Dirty the page, drain, then write payloads that need padding.
    write(&ring, 0, 1, 1, 64).unwrap();
    ring.drain_cpu(0);
    for (i, len) in [1usize, 5, 9, 10, 11].into_iter().enumerate() {
        // SAFETY: one writer thread.
        unsafe { ring.write(0, 10 + i as u64, &vec![0xaa; len]) }.unwrap();
    }
    for page in ring.drain_cpu(0) {
        for event in PageView::new(&page[..]).unwrap().events() {
            let len = event.payload.iter().rposition(|&b| b == 0xaa).unwrap() + 1;
            assert!(
                event.payload[len..].iter().all(|&b| b == 0),
                "{:?}",
                event.payload
            );
        }
    }
}

mod edges;

// Printing the shares, and the interrupts' thread-local, need `std`.
#[cfg(feature = "std")]
mod decode;
#[cfg(feature = "std")]
mod model;
#[cfg(feature = "std")]
mod windows;
