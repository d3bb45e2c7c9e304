//! The reader's side of a CPU buffer: whole pages taken by swapping a spare
//! page in for the oldest data page, copies of the committed part of the
//! page still being written, and the accounting of what readers consumed.

use super::words::{
    slot_consumed, slot_data, slot_free, slot_page, slot_seq, CONSUMED_MASK, FREE, SEQ_MASK,
};
use super::{CpuBuffer, Ordering, ReaderState, Window, OFF_BITS, OFF_MASK};
use crate::ring::page::{
    PageView, MISSED_EVENTS, MISSED_STORED, PAGE_DATA_SIZE, PAGE_HEADER_SIZE, PAGE_SIZE,
};

/// What a page read returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageRead {
    /// Data events in the page.
    pub events: u64,
    /// Events lost since the previous page was handed out.
    pub missed: u64,
    /// The page is the still-written tail page, of which only the committed
    /// part was copied.
    pub partial: bool,
}

impl CpuBuffer {
    /// Takes the oldest unread page (or, if only the tail page has unread
    /// committed events, a copy of them) into `out`. Writers are never
    /// stopped.
    pub(crate) fn read_page(&self, out: &mut [u8; PAGE_SIZE]) -> Option<PageRead> {
        let mut state = self.reader.state.lock();
        let n = self.ring.len() as u64;
        loop {
            let commit = self.commit.load(Ordering::Acquire);
            let committed_seq = commit >> OFF_BITS;
            let committed_off = (commit & OFF_MASK) as usize;
            let tail_seq = self.load_tail().seq();
            let oldest = (tail_seq + 1).saturating_sub(n);
            if state.read_seq < oldest {
                state.read_seq = oldest;
                state.read_off = 0;
            }
            let seq = state.read_seq;
            if seq > committed_seq {
                return None;
            }
            let slot = &self.ring[(seq % n) as usize];
            self.window(Window::ReaderSlot);
            let current = slot.load(Ordering::SeqCst);
            if current & FREE != 0 || slot_seq(current) != (seq & SEQ_MASK) {
                if current & FREE == 0 && slot_seq(current) > (seq & SEQ_MASK) {
                    // Overwritten under us.
                    state.read_seq = seq + 1;
                    state.read_off = 0;
                    continue;
                }
                return None;
            }
            let page = slot_page(current);
            if seq < committed_seq {
                // A complete page: swap our spare in for it.
                if slot
                    .compare_exchange(
                        current,
                        slot_free(state.spare),
                        Ordering::SeqCst,
                        Ordering::SeqCst,
                    )
                    .is_err()
                {
                    continue;
                }
                state.spare = page as u64;
                // SAFETY: the exchange made the page ours.
                let bytes = unsafe { &*self.pages[page].0.get() };
                let (events, len) = rebase(bytes, state.read_off, None, out);
                // What the partial reads consumed is exactly what we skipped.
                debug_assert_eq!(
                    count_from(bytes, 0).saturating_sub(slot_consumed(current)),
                    events
                );
                state.read_seq = seq + 1;
                state.read_off = 0;
                return Some(self.hand_out(&mut state, out, events, len, false));
            }
            // The tail page: copy what is committed and not yet read.
            if committed_off <= state.read_off {
                return None;
            }
            let mut copy = [0u8; PAGE_SIZE];
            // SAFETY: bytes below the commit offset (and the time stamp) are
            // complete and not written again until the page is overwritten,
            // which the exchange below detects, discarding the copy.
            unsafe {
                let source = self.page_ptr(page);
                core::ptr::copy_nonoverlapping(source, copy.as_mut_ptr(), 8);
                core::ptr::copy_nonoverlapping(
                    source.add(PAGE_HEADER_SIZE),
                    copy.as_mut_ptr().add(PAGE_HEADER_SIZE),
                    committed_off,
                );
            }
            let (events, len) = rebase(&copy, state.read_off, Some(committed_off), out);
            if events == 0 {
                state.read_off = committed_off;
                return None;
            }
            let consumed = slot_consumed(current) + events;
            if slot
                .compare_exchange(
                    current,
                    slot_data(seq, page as u64, consumed.min(CONSUMED_MASK)),
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                )
                .is_err()
            {
                continue;
            }
            state.read_off = committed_off;
            return Some(self.hand_out(&mut state, out, events, len, true));
        }
    }

    /// Counts `events` (of `len` bytes of data in `out`) as read and marks
    /// in `out`'s header the events lost since the last page handed out.
    fn hand_out(
        &self,
        state: &mut ReaderState,
        out: &mut [u8; PAGE_SIZE],
        events: u64,
        len: usize,
        partial: bool,
    ) -> PageRead {
        self.reader.read.fetch_add(events, Ordering::AcqRel);
        let missed = self.mark_missed(state, out, len);
        PageRead {
            events,
            missed,
            partial,
        }
    }

    fn mark_missed(&self, state: &mut ReaderState, out: &mut [u8; PAGE_SIZE], len: usize) -> u64 {
        let lost = self.dropped.load() + self.overrun.load();
        let missed = lost - state.lost_seen.min(lost);
        state.lost_seen = lost;
        if missed > 0 {
            let mut commit = len as u64 | MISSED_EVENTS;
            if len + 8 <= PAGE_DATA_SIZE {
                out[PAGE_HEADER_SIZE + len..PAGE_HEADER_SIZE + len + 8]
                    .copy_from_slice(&missed.to_le_bytes());
                commit |= MISSED_STORED;
            }
            out[8..16].copy_from_slice(&commit.to_le_bytes());
        }
        missed
    }

    /// Copies every unread committed page, oldest first, without consuming
    /// anything (ftrace's `trace` file). Pages overwritten while being copied
    /// are skipped.
    pub(crate) fn peek_pages(&self, mut each: impl FnMut(&[u8; PAGE_SIZE])) {
        let state = self.reader.state.lock();
        let n = self.ring.len() as u64;
        let commit = self.commit.load(Ordering::Acquire);
        let committed_seq = commit >> OFF_BITS;
        let committed_off = (commit & OFF_MASK) as usize;
        let tail_seq = self.load_tail().seq();
        let first = state.read_seq.max((tail_seq + 1).saturating_sub(n));
        self.window(Window::PeekSlots);
        let mut copy = alloc::boxed::Box::new([0u8; PAGE_SIZE]);
        let mut out = alloc::boxed::Box::new([0u8; PAGE_SIZE]);
        for seq in first..=committed_seq {
            let slot = &self.ring[(seq % n) as usize];
            let before = slot.load(Ordering::SeqCst);
            if before & FREE != 0 || slot_seq(before) != (seq & SEQ_MASK) {
                continue;
            }
            let end = if seq < committed_seq {
                None
            } else {
                Some(committed_off)
            };
            // SAFETY: as in `read_page`; a concurrent overwrite is detected
            // by re-reading the slot and the copy is then dropped.
            unsafe {
                let source = self.page_ptr(slot_page(before));
                core::ptr::copy_nonoverlapping(source, copy.as_mut_ptr(), PAGE_SIZE);
            }
            if slot.load(Ordering::SeqCst) != before {
                continue;
            }
            let skip = if seq == state.read_seq {
                state.read_off
            } else {
                0
            };
            let (events, _) = rebase(&copy[..], skip, end, &mut out);
            if events > 0 {
                each(&out);
            }
        }
    }

    /// Discards every unread event (counted as read). Returns how many.
    pub(crate) fn clear(&self) -> u64 {
        let mut page = alloc::boxed::Box::new([0u8; PAGE_SIZE]);
        let mut total = 0;
        while let Some(read) = self.read_page(&mut page) {
            total += read.events;
        }
        total
    }
}

/// Events in `page`'s data from byte `from` on.
fn count_from(page: &[u8], from: usize) -> u64 {
    PageView::new(page).map_or(0, |view| {
        view.events().filter(|event| event.offset >= from).count() as u64
    })
}

/// Writes into `out` a page holding the events of `page` from data offset
/// `skip` up to `end` (or the page's own commit), with the time stamp
/// rebased so deltas still add up. Returns (events, data length).
fn rebase(page: &[u8], skip: usize, end: Option<usize>, out: &mut [u8; PAGE_SIZE]) -> (u64, usize) {
    let mut header = [0u8; PAGE_SIZE];
    header.copy_from_slice(page);
    if let Some(end) = end {
        header[8..16].copy_from_slice(&(end as u64).to_le_bytes());
    }
    let Ok(view) = PageView::new(&header) else {
        out[8..16].copy_from_slice(&0u64.to_le_bytes());
        return (0, 0);
    };
    let len = view.data_len();
    let mut events = view.events();
    let mut base = view.timestamp();
    let mut count = 0;
    // Walk up to `skip`: the time reached there becomes the new base.
    while events.offset() < skip {
        if events.next().is_none() {
            break;
        }
        base = events.time();
    }
    let start = skip.min(len);
    for _ in events {
        count += 1;
    }
    let kept = len - start;
    out[..8].copy_from_slice(&base.to_le_bytes());
    out[8..16].copy_from_slice(&(kept as u64).to_le_bytes());
    out[PAGE_HEADER_SIZE..PAGE_HEADER_SIZE + kept]
        .copy_from_slice(&header[PAGE_HEADER_SIZE + start..PAGE_HEADER_SIZE + len]);
    (count, kept)
}
