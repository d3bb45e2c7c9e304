//! Interrupts landing in the windows only they can reach (see
//! `cpu::interrupt`): a writer nesting just before the outermost writer
//! publishes its end, or just as it leaves; one arriving while the tail page
//! is being switched; and another CPU's writer overwriting the page the
//! reader is about to take, or the pages a peek is about to copy.

use super::*;
use crate::ring::cpu::interrupt::Window;
use crate::ring::cpu::interrupt::{arm, pending};
use crate::ring::cpu::CpuBuffer;

/// `write` for the code an interrupt runs, which gets the CPU's buffer.
fn write_on(cpu: &CpuBuffer, now: u64, tag: u32, len: usize) -> Result<(), Refused> {
    let mut reservation = cpu.reserve(now, len)?;
    reservation
        .payload_mut()
        .copy_from_slice(&payload(tag, len));
    reservation.commit();
    Ok(())
}

#[test]
fn a_writer_nesting_just_before_the_outer_commit_is_published_with_it() {
    let ring = RingBuffer::new(1, 4, Mode::Overwrite).unwrap();
    write(&ring, 0, 100, 1, 8).unwrap();
    // SAFETY: one thread is CPU 0's only writer; the armed write nests.
    let mut outer = unsafe { ring.reserve(0, 200, 8).unwrap() };
    outer.payload_mut().copy_from_slice(&payload(2, 8));
    // The outer writer still owns `word`, so it takes the short way out,
    // publishing its own end; the nested event lies past that end.
    arm(Window::CommitCheck, |cpu| write_on(cpu, 300, 3, 8).unwrap());
    outer.commit();
    assert!(!pending(), "the window was never reached");
    assert!(!ring.cpus[0].writing());
    assert_eq!(tags(&ring.drain_cpu(0)), vec![(100, 1), (200, 2), (300, 3)]);
}

#[test]
fn a_writer_nesting_as_the_outer_writer_leaves_is_published_by_it() {
    let ring = RingBuffer::new(1, 4, Mode::Overwrite).unwrap();
    // SAFETY: one thread is CPU 0's only writer; the other writes nest.
    let mut outer = unsafe { ring.reserve(0, 100, 8).unwrap() };
    outer.payload_mut().copy_from_slice(&payload(1, 8));
    // A nested event moves `word`: the outer writer leaves through
    // `finish`, which must look again after publishing.
    write(&ring, 0, 200, 2, 8).unwrap();
    arm(Window::FinishRecheck, |cpu| {
        write_on(cpu, 300, 3, 8).unwrap()
    });
    outer.commit();
    assert!(!pending(), "the window was never reached");
    assert!(!ring.cpus[0].writing());
    assert_eq!(tags(&ring.drain_cpu(0)), vec![(100, 1), (200, 2), (300, 3)]);
}

#[test]
fn a_writer_landing_while_the_page_is_switched_is_refused_and_counted() {
    let ring = RingBuffer::new(1, 2, Mode::Overwrite).unwrap();
    let full = SMALL_PER_PAGE as u32;
    for tag in 0..full {
        write(&ring, 0, u64::from(tag) + 1, tag, 8).unwrap();
    }
    arm(Window::Sealed, |cpu| {
        assert_eq!(write_on(cpu, 1_000, 7777, 8), Err(Refused::Lost));
    });
    // Does not fit the full page: switches to the next one.
    write(&ring, 0, 2_000, 9999, 8).unwrap();
    assert!(!pending(), "the window was never reached");
    let stats = ring.stats(0).unwrap();
    assert_eq!((stats.written, stats.dropped), (u64::from(full) + 2, 1));
    let mut expected: Vec<(u64, u32)> = (0..full).map(|tag| (u64::from(tag) + 1, tag)).collect();
    expected.push((2_000, 9999));
    assert_eq!(tags(&ring.drain_cpu(0)), expected);
}

#[test]
fn a_page_overwritten_as_the_reader_takes_it_is_skipped_and_counted() {
    let ring = RingBuffer::new(1, 2, Mode::Overwrite).unwrap();
    let full = SMALL_PER_PAGE as u32;
    // Page 0 full, 10 events in page 1.
    for tag in 0..full + 10 {
        write(&ring, 0, u64::from(tag) + 1, tag, 8).unwrap();
    }
    // After the reader settled on page 0 as the oldest, the writer fills
    // page 1 and starts page 2 in page 0's place.
    arm(Window::ReaderSlot, move |cpu| {
        for tag in full + 10..2 * full + 10 {
            write_on(cpu, u64::from(tag) + 1, tag, 8).unwrap();
        }
    });
    let mut page = Box::new([0u8; PAGE_SIZE]);
    let read = ring.read_page(0, &mut page).unwrap();
    assert!(!pending(), "the window was never reached");
    // The reader moved on to page 1, whole, and reports page 0 lost.
    let per_page = u64::from(full);
    assert_eq!(
        (read.events, read.missed, read.partial),
        (per_page, per_page, false)
    );
    let page_1: Vec<(u64, u32)> = (full..2 * full)
        .map(|tag| (u64::from(tag) + 1, tag))
        .collect();
    assert_eq!(tags(&[page]), page_1);
    let page_2: Vec<(u64, u32)> = (2 * full..2 * full + 10)
        .map(|tag| (u64::from(tag) + 1, tag))
        .collect();
    assert_eq!(tags(&ring.drain_cpu(0)), page_2);
    let stats = ring.stats(0).unwrap();
    assert_eq!(stats.overrun, per_page);
    assert_eq!(stats.written, stats.read + stats.lost());
}

#[test]
fn a_writer_nesting_before_the_exchange_goes_first_and_the_outer_retries() {
    let ring = RingBuffer::new(1, 4, Mode::Overwrite).unwrap();
    // The first event of a page takes the general path, where the nested
    // writer lands. The outer one read the clock first, yet ends up after
    // the nested event: its retry sees a time behind the last one reserved
    // and takes that time plus one.
    arm(Window::Exchange, |cpu| write_on(cpu, 2_000, 2, 8).unwrap());
    // SAFETY: one thread is CPU 0's only writer; the armed write nests.
    let mut outer = unsafe { ring.reserve(0, 1_000, 8).unwrap() };
    assert!(!pending(), "the window was never reached");
    outer.payload_mut().copy_from_slice(&payload(1, 8));
    outer.commit();
    assert_eq!(tags(&ring.drain_cpu(0)), vec![(2_000, 2), (2_001, 1)]);
}

#[test]
fn a_retried_reservation_decides_its_time_extend_again() {
    use crate::ring::page::MAX_TIME_DELTA;
    let ring = RingBuffer::new(1, 4, Mode::Overwrite).unwrap();
    write(&ring, 0, 100, 1, 8).unwrap();
    // Too far from 100 for an event header: the outer writer plans a time
    // extend. The nested event at 150 leaves it exactly MAX_TIME_DELTA
    // away, which a header holds: after the retry, no extend.
    let late = 150 + MAX_TIME_DELTA;
    arm(Window::Exchange, |cpu| write_on(cpu, 150, 2, 8).unwrap());
    // SAFETY: one thread is CPU 0's only writer; the armed write nests.
    let mut outer = unsafe { ring.reserve(0, late, 8).unwrap() };
    assert!(!pending(), "the window was never reached");
    outer.payload_mut().copy_from_slice(&payload(3, 8));
    outer.commit();
    let pages = ring.drain_cpu(0);
    assert_eq!(tags(&pages), vec![(100, 1), (150, 2), (late, 3)]);
    assert_eq!(
        PageView::new(&pages[0][..]).unwrap().data_len(),
        3 * SMALL_EVENT
    );
}

#[test]
fn a_writer_nesting_right_after_a_page_switch_starts_the_new_page() {
    let ring = RingBuffer::new(1, 4, Mode::Overwrite).unwrap();
    let full = SMALL_PER_PAGE as u32;
    for tag in 0..full {
        write(&ring, 0, u64::from(tag) + 1, tag, 8).unwrap();
    }
    // The outer event does not fit: its writer switches pages, and the
    // nested writer lands before it reserves at the new page's start. The
    // nested event becomes the page's first, with the absolute time in the
    // page header.
    arm(Window::Exchange, |cpu| write_on(cpu, 5_000, 2, 8).unwrap());
    write(&ring, 0, 4_000, 1, 8).unwrap();
    assert!(!pending(), "the window was never reached");
    let pages = ring.drain_cpu(0);
    assert_eq!(pages.len(), 2);
    assert_eq!(PageView::new(&pages[1][..]).unwrap().timestamp(), 5_000);
    assert_eq!(tags(&pages[1..]), vec![(5_000, 2), (5_001, 1)]);
}

#[test]
fn pages_reused_while_peeking_are_skipped() {
    let ring = RingBuffer::new(1, 4, Mode::Overwrite).unwrap();
    let full = SMALL_PER_PAGE as u32;
    // Pages 0 to 2 full, 10 events in page 3.
    for tag in 0..3 * full + 10 {
        write(&ring, 0, u64::from(tag) + 1, tag, 8).unwrap();
    }
    // After the peek settled on pages 0 to 3, the writer fills page 3,
    // fills page 4 in page 0's place and starts page 5 in page 1's: the
    // first slots peeked are not free but hold newer pages, one of them
    // complete.
    arm(Window::PeekSlots, move |cpu| {
        for tag in 3 * full + 10..5 * full + 5 {
            write_on(cpu, u64::from(tag) + 1, tag, 8).unwrap();
        }
    });
    let mut peeked = Vec::new();
    ring.peek_pages(0, |page| peeked.push(Box::new(*page)));
    assert!(!pending(), "the window was never reached");
    // Pages 2 and 3, the latter up to where it was committed when the peek
    // began; copying page 4 would put newer events before older ones.
    let expected: Vec<(u64, u32)> = (2 * full..3 * full + 10)
        .map(|tag| (u64::from(tag) + 1, tag))
        .collect();
    assert_eq!(tags(&peeked), expected);
}

#[test]
fn a_writer_cut_off_mid_record_leaves_only_the_committed_events() {
    // A crash dump (crates/baremetal/src/platform/crash.rs) reads the
    // rings of CPUs that stopped anywhere, mid-record included: it must get
    // the events before the cut, and nothing half-written.
    let ring = RingBuffer::new(1, 4, Mode::Overwrite).unwrap();
    write(&ring, 0, 100, 1, 8).unwrap();
    write(&ring, 0, 200, 2, 8).unwrap();
    // SAFETY: one thread is CPU 0's only writer; the nested write below
    // nests on the reservation.
    let mut cut = unsafe { ring.reserve(0, 300, 8).unwrap() };
    cut.payload_mut()[..4].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
    // An interrupt's event on top of it completes, but only the outermost
    // writer publishes, and it never returns: the CPU crashed.
    write(&ring, 0, 400, 4, 8).unwrap();
    core::mem::forget(cut);
    assert!(ring.cpus[0].writing());
    assert_eq!(tags(&ring.drain_cpu(0)), vec![(100, 1), (200, 2)]);
    // Read again (a second dump attempt): nothing more, nothing torn.
    assert!(ring.drain_cpu(0).is_empty());
}
