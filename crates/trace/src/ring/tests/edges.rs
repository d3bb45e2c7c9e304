//! The writer at its limits — clock times past the word's 52 bits, jumps at
//! the edge of "backwards", the largest ring, recycled dirty pages, an
//! interrupted writer in the page the ring would overwrite — and the
//! reader's loss mark on a page with no room for the count, and a peek after
//! a partial read.

use super::*;
use crate::ring::page::MAX_TIME_DELTA;

#[test]
fn counters_derive_lost_and_entries() {
    let stats = CpuStats {
        written: 10,
        read: 3,
        dropped: 2,
        overrun: 1,
    };
    assert_eq!(stats.lost(), 3);
    assert_eq!(stats.entries(), 4);
    // While a writer is between `written` and its event, more may read as
    // handed out than written: never a negative count.
    let racing = CpuStats {
        written: 1,
        read: 1,
        dropped: 1,
        overrun: 0,
    };
    assert_eq!(racing.entries(), 0);
}

#[test]
fn the_largest_ring_is_accepted_and_one_page_more_refused() {
    // 2^14 frame ids, the spare frame included, and one id left unused.
    assert_eq!(MAX_PAGES_PER_CPU, 16_382);
    let ring = RingBuffer::new(1, 16_382, Mode::Overwrite).unwrap();
    assert_eq!(ring.pages_per_cpu(), 16_382);
    assert_eq!(
        RingBuffer::new(1, 16_383, Mode::Overwrite).unwrap_err(),
        RingError::BadPageCount(16_383)
    );
}

#[test]
fn times_past_the_words_52_bits_come_back_exact() {
    // `word` keeps the low 52 bits of the time; a clock beyond 2^52 ns
    // (52 days of uptime) must still give exact times, across the wrap of
    // those bits, a page switch (absolute time in the page header) and a
    // time extend.
    let ring = RingBuffer::new(1, 4, Mode::Overwrite).unwrap();
    let wrap = 1u64 << 52;
    // Up there in steps of a quarter of the range (forward jumps: less
    // than half of it), then across the wrap.
    let mut times = vec![1_000, 1 << 50, 1 << 51, 3 << 50];
    times.extend([wrap - 1000, wrap - 990, wrap - 1, wrap, wrap + 9]);
    // Enough 8-byte events to fill the first page and start the next.
    let mut now = wrap + 9;
    while times.len() < SMALL_PER_PAGE + 5 {
        now += 7;
        times.push(now);
    }
    times.push(now + (3 << 30));
    for (tag, now) in times.iter().enumerate() {
        write(&ring, 0, *now, tag as u32, 8).unwrap();
    }
    let expected: Vec<(u64, u32)> = times
        .iter()
        .enumerate()
        .map(|(tag, now)| (*now, tag as u32))
        .collect();
    assert_eq!(tags(&ring.drain_cpu(0)), expected);
}

#[test]
fn a_jump_of_half_the_time_range_is_forward_and_more_is_backward() {
    // The 52-bit time difference is read as forward up to half its range
    // (`TIME_MASK / 2`); beyond that it is a clock that went backwards,
    // and the event gets the last time plus one.
    let ring = RingBuffer::new(1, 2, Mode::Overwrite).unwrap();
    let half = (1u64 << 51) - 1;
    let start = 1_000;
    write(&ring, 0, start, 1, 8).unwrap();
    write(&ring, 0, start + half, 2, 8).unwrap();
    write(&ring, 0, start + half + half + 1, 3, 8).unwrap();
    assert_eq!(
        tags(&ring.drain_cpu(0)),
        vec![(start, 1), (start + half, 2), (start + half + 1, 3)]
    );
    // At the far end: a jump of all but 100 ns of the range is 100 ns
    // backwards, not a small step forward.
    let ring = RingBuffer::new(1, 2, Mode::Overwrite).unwrap();
    write(&ring, 0, 1, 1, 8).unwrap();
    write(&ring, 0, (1 << 52) - 100, 2, 8).unwrap();
    assert_eq!(tags(&ring.drain_cpu(0)), vec![(1, 1), (2, 2)]);
}

#[test]
fn padding_in_recycled_pages_is_zeroed() {
    // Pages are reused without being cleared: lap a 2-page ring with
    // events full of 0xee, so the frames the next events land in hold old
    // bytes where their padding goes.
    let ring = RingBuffer::new(1, 2, Mode::Overwrite).unwrap();
    for i in 0..400u64 {
        // SAFETY: one writer thread.
        unsafe { ring.write(0, i + 1, &[0xee; 60]) }.unwrap();
    }
    let after = 10_000;
    let lens = [0usize, 1, 2, 3, 5, 6, 7, 9, 10, 11];
    for (i, len) in lens.into_iter().enumerate() {
        // SAFETY: one writer thread.
        unsafe { ring.write(0, after + i as u64, &vec![0xaa; len]) }.unwrap();
    }
    let mut checked = 0;
    for page in ring.drain_cpu(0) {
        for event in PageView::new(&page[..]).unwrap().events() {
            if event.timestamp_ns < after {
                continue;
            }
            let len = lens[(event.timestamp_ns - after) as usize];
            // Payloads are whole words; what lies past `len` is padding.
            assert_eq!(event.payload.len(), len.div_ceil(4).max(1) * 4);
            assert!(event.payload[..len].iter().all(|&b| b == 0xaa));
            assert!(
                event.payload[len..].iter().all(|&b| b == 0),
                "stale padding after {len} bytes: {:?}",
                event.payload
            );
            checked += 1;
        }
    }
    assert_eq!(checked, lens.len());
}

#[test]
fn nested_writers_do_not_overwrite_the_page_an_interrupted_writer_is_in() {
    // Two pages. Fill pages 0..=2 and put 10 events in page 3, so the
    // commit word names page 3, then open an outer event there. Nested
    // writers fill page 3, move to page 4 (overwriting page 2, which is
    // complete), fill it, and then would have to overwrite page 3, where
    // the outer event is still being written: they must be refused.
    let ring = RingBuffer::new(1, 2, Mode::Overwrite).unwrap();
    let first = 3 * SMALL_PER_PAGE as u32 + 10;
    for tag in 1..=first {
        write(&ring, 0, u64::from(tag) * 3, tag, 8).unwrap();
    }
    let outer_time = 1_000_000;
    // SAFETY: one thread; the writes below model interrupts nesting on it.
    let mut outer = unsafe { ring.reserve(0, outer_time, 8).unwrap() };
    // What is left of page 3 after its 10 events and the outer one, and
    // then all of page 4.
    let room = SMALL_PER_PAGE as u32 - 11 + SMALL_PER_PAGE as u32;
    let nested: Vec<(u64, u32)> = (1..=room)
        .map(|k| (outer_time + u64::from(k), first + k))
        .collect();
    for (time, tag) in &nested {
        write(&ring, 0, *time, *tag, 8).unwrap();
    }
    for k in 1..=5 {
        let late = outer_time + u64::from(room + k);
        assert_eq!(
            write(&ring, 0, late, first + room + k, 8),
            Err(Refused::Lost)
        );
    }
    outer.payload_mut().copy_from_slice(&payload(999_999, 8));
    outer.commit();

    let got = tags(&ring.drain_cpu(0));
    let mut expected: Vec<(u64, u32)> = (first - 9..=first)
        .map(|tag| (u64::from(tag) * 3, tag))
        .collect();
    expected.push((outer_time, 999_999));
    expected.extend(nested);
    assert_eq!(got, expected);
    let stats = ring.stats(0).unwrap();
    assert_eq!(stats.dropped, 5);
    // Pages 0, 1 and 2 were overwritten whole.
    assert_eq!(stats.overrun, 3 * SMALL_PER_PAGE as u64);
    assert_eq!(stats.written, stats.read + stats.lost());
}

#[test]
fn a_loss_before_a_full_page_is_flagged_without_a_count() {
    // The count of lost events goes right after the data; a page whose
    // data fills all 4080 bytes has no room for it, so only the flag is
    // set (as `ring_buffer_read_page` does).
    let ring = RingBuffer::new(1, 2, Mode::Overwrite).unwrap();
    for i in 0..3 * SMALL_PER_PAGE + 1 {
        write(&ring, 0, i as u64 + 1, i as u32, 8).unwrap();
    }
    let mut page = Box::new([0u8; PAGE_SIZE]);
    let read = ring.read_page(0, &mut page).unwrap();
    let view = PageView::new(&page[..]).unwrap();
    assert_eq!(view.data_len(), PAGE_DATA_SIZE);
    assert_eq!(read.missed, 2 * SMALL_PER_PAGE as u64);
    assert_eq!(view.missed_events(), Some(None));
    // 40-byte payloads take 44 bytes: 92 of them leave 32 bytes of a page
    // free, room for the count. Page 3 (one small event) takes 92 more,
    // page 4 takes 92, and one in page 5 overwrites page 3's 93 events.
    for i in 0..2 * 92 + 1 {
        write(&ring, 0, 10_000 + i as u64, i as u32, 40).unwrap();
    }
    let read = ring.read_page(0, &mut page).unwrap();
    let view = PageView::new(&page[..]).unwrap();
    assert_eq!((read.events, read.missed), (92, 93));
    assert_eq!(view.data_len(), 92 * 44);
    assert_eq!(view.missed_events(), Some(Some(93)));
}

#[test]
fn deltas_at_the_header_limit_need_no_extend_after_a_page_switch_either() {
    // The first event of a page carries its absolute time in the page
    // header: a delta of MAX_TIME_DELTA + 1 since the previous page's last
    // event needs no time extend there.
    let ring = RingBuffer::new(1, 4, Mode::Overwrite).unwrap();
    for i in 0..SMALL_PER_PAGE {
        write(&ring, 0, i as u64 + 1, i as u32, 8).unwrap();
    }
    let late = SMALL_PER_PAGE as u64 + MAX_TIME_DELTA + 1;
    write(&ring, 0, late, 7777, 8).unwrap();
    let pages = ring.drain_cpu(0);
    assert_eq!(pages.len(), 2);
    let view = PageView::new(&pages[1][..]).unwrap();
    assert_eq!(view.timestamp(), late);
    assert_eq!(view.data_len(), SMALL_EVENT);
}

#[test]
fn peek_after_a_partial_read_shows_only_the_unread_events() {
    let ring = RingBuffer::new(1, 4, Mode::Overwrite).unwrap();
    for tag in 0..5u32 {
        write(&ring, 0, 100 + u64::from(tag), tag, 8).unwrap();
    }
    let mut page = Box::new([0u8; PAGE_SIZE]);
    let read = ring.read_page(0, &mut page).unwrap();
    assert!(read.partial);
    // Nothing was lost: no loss mark on the page.
    assert_eq!((read.events, read.missed), (5, 0));
    assert_eq!(PageView::new(&page[..]).unwrap().missed_events(), None);
    // Everything is read: there is no page to show.
    let mut calls = 0;
    ring.peek_pages(0, |_| calls += 1);
    assert_eq!(calls, 0);
    for tag in 5..8u32 {
        write(&ring, 0, 100 + u64::from(tag), tag, 8).unwrap();
    }
    let mut peeked = Vec::new();
    ring.peek_pages(0, |page| peeked.push(Box::new(*page)));
    assert_eq!(tags(&peeked), vec![(105, 5), (106, 6), (107, 7)]);
    // Peeking consumed nothing.
    assert_eq!(tags(&ring.drain_cpu(0)), tags(&peeked));
}
