//! One CPU's ring buffer: pages written by that CPU alone (plus writers that
//! nest on it), read by whole pages by anyone holding the reader lock.
//!
//! The design in four words (each a single atomic location):
//!
//! * `word` = `off:12 | time:52` — the write offset in the tail page and the
//!   time of the last event reserved. Reserving is one compare-and-exchange
//!   on it, so an event's position and the time its delta is relative to are
//!   claimed together: a writer that nests (a signal handler, an interrupt)
//!   between our load and our exchange makes the exchange fail and we retry.
//!   Times are made strictly increasing, so the word never repeats a value.
//!   `off == SEALED` means the page is full and its sealer is moving on.
//! * `tail` = `seq:48 | page:16` — which page (by sequence number) is being
//!   written, and the frame holding it. Only the sealer of the previous page
//!   changes it.
//! * `commit` = `seq:52 | off:12` — everything before it is completely
//!   written. Only the outermost writer on the CPU moves it, when it
//!   finishes, to cover what the writers it was interrupted by reserved.
//! * one slot per ring position = `free:1 | consumed:10 | page:14 | seq:39`.
//!   The reader and the writer meet only here, through compare-and-exchange:
//!   the reader swaps a spare page in for the oldest data page (FREE), the
//!   writer in overwrite mode claims the oldest data page for new data. The
//!   loser sees a changed slot and retries, so a page has one owner. A reader
//!   that copies part of the page still being written records how many events
//!   it consumed in the slot, so a later overwrite counts only the rest lost.
//!
//! The bit layouts of `tail` and the slots, and their helpers: `words.rs`.
//!
//! Accounting: every `reserve` counts one `written`; a refused event counts
//! one `dropped`; an overwritten page adds its unread events to `overrun`;
//! events handed to the reader count `read`. Once drained,
//! `written == read + dropped + overrun` exactly.

use core::cell::UnsafeCell;

pub(crate) mod interrupt;
mod reader;
mod reservation;
mod words;

use interrupt::Window;
pub use reader::PageRead;
pub use reservation::Reservation;

use super::local::{AtomicU64, LocalU64, Ordering};
use super::page::{
    encode_data_header, encode_time_extend, event_size, MAX_PAYLOAD, MAX_TIME_DELTA,
    PAGE_DATA_SIZE, PAGE_HEADER_SIZE, PAGE_SIZE, TIME_EXTEND_SIZE,
};
use super::{Mode, RawLock};
use words::{
    slot_consumed, slot_data, slot_free, slot_page, slot_seq, Tail, FREE, PAGE_BITS, SEQ_MASK,
};

const OFF_BITS: u32 = 12;
const OFF_MASK: u64 = (1 << OFF_BITS) - 1;
const SEALED: u64 = OFF_MASK;
const TIME_MASK: u64 = (1 << (64 - OFF_BITS)) - 1;

/// Most pages one CPU's ring may have (the spare page needs an id too).
pub const MAX_PAGES_PER_CPU: usize = (1 << PAGE_BITS) - 2;

/// Why an event was not recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Refused {
    /// The buffer is full (producer/consumer mode), the page the writer would
    /// overwrite is still being written by an interrupted writer, or a nested
    /// writer arrived while the page was being switched. Counted as lost.
    Lost,
    /// The payload is larger than [`MAX_PAYLOAD`]; not counted anywhere.
    TooLarge,
    /// The CPU number is outside the buffer; not counted anywhere.
    NoSuchCpu,
}

impl core::fmt::Display for Refused {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Refused::Lost => f.write_str("event lost: the buffer is full or its page is busy"),
            Refused::TooLarge => write!(f, "event payload larger than {MAX_PAYLOAD} bytes"),
            Refused::NoSuchCpu => f.write_str("no such CPU in this buffer"),
        }
    }
}

impl core::error::Error for Refused {}

/// How an event's time is written (see `CpuBuffer::place`).
#[derive(Clone, Copy)]
enum Stamp {
    /// A delta in the event header.
    Delta(u64),
    /// The first event of a page: the page header holds the absolute time.
    PageStart(u64),
    /// A delta too large for the header: a time-extend event first.
    Extend(u64),
}

#[repr(C, align(4096))]
struct Page(UnsafeCell<[u8; PAGE_SIZE]>);

impl Page {
    fn new() -> Self {
        Page(UnsafeCell::new([0; PAGE_SIZE]))
    }
}

#[derive(Debug)]
struct ReaderState {
    /// Sequence number of the next page to hand out.
    read_seq: u64,
    /// Bytes of page `read_seq` already handed out (a partial read).
    read_off: usize,
    /// The page the reader owns, to swap in for the next one it takes.
    spare: u64,
    /// `dropped + overrun` when the last page was handed out.
    lost_seen: u64,
}

/// Counters of one CPU's buffer (see the module documentation).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuStats {
    /// Events offered to the buffer.
    pub written: u64,
    /// Events handed to readers (including those discarded by a clear).
    pub read: u64,
    /// Events refused when offered.
    pub dropped: u64,
    /// Recorded events overwritten before they were read.
    pub overrun: u64,
}

impl CpuStats {
    /// Events lost, whichever way.
    pub fn lost(&self) -> u64 {
        self.dropped + self.overrun
    }

    /// Events still in the buffer (exact when no writer is active).
    pub fn entries(&self) -> u64 {
        self.written.saturating_sub(self.read + self.lost())
    }
}

/// Keeps what the reader writes off the writer's cache line.
#[repr(align(128))]
struct ReaderSide {
    read: AtomicU64,
    state: lock_api::Mutex<RawLock, ReaderState>,
}

/// One CPU's ring of pages. Aligned so that two CPUs' writer fields never
/// share a cache line.
///
/// Which words may use `LocalU64` (non-locked `xadd`/`add`/`cmpxchg`, like
/// the kernel's `local_t`): only the owning CPU's writers — `reserve`,
/// `advance`, `refuse`, `finish*`, and writers nesting on them on the same
/// thread — modify `word`, `tail`, `nesting`, `written`, `dropped`,
/// `overrun` and `entries`; every other thread only loads them (`read_page`
/// and `peek_pages` load `tail`, `mark_missed` and `stats` the counters).
/// Nothing else writes them: a resize or a snapshot swap replaces the whole
/// ring (the old one is kept, never reset), and `clear` goes through
/// `read_page`. The writer's CPU is owned by one thread at a time, handed
/// over with release/acquire by the platform. Words another thread writes —
/// the ring slots (the reader swaps pages) and `reader.read` — stay locked
/// atomics; `commit` has one writer but is published with a release store.
#[repr(C, align(128))]
pub(crate) struct CpuBuffer {
    /// Owning CPU's writers only (see above); readers load nothing of it.
    word: LocalU64,
    /// Owning CPU's writers only; readers load it.
    tail: LocalU64,
    /// Owning CPU's writers only.
    nesting: LocalU64,
    /// Owning CPU's writers only; `stats` loads it.
    written: LocalU64,
    /// Owning CPU's writers only; `stats` and the reader load it.
    dropped: LocalU64,
    /// Owning CPU's writers only; `stats` and the reader load it.
    overrun: LocalU64,
    /// Written by the outermost writer (release), loaded by the reader.
    commit: AtomicU64,
    mode: Mode,
    /// Written by the writer and by the reader: locked compare-and-exchange.
    ring: alloc::boxed::Box<[AtomicU64]>,
    pages: alloc::boxed::Box<[Page]>,
    /// Events reserved in each page (by page id), for overwrite accounting.
    /// Owning CPU's writers only (the reader never touches it).
    entries: alloc::boxed::Box<[LocalU64]>,
    reader: ReaderSide,
}

// SAFETY: page bytes are written only by the CPU owning the reservation and
// read only after `commit` (release/acquire) or a slot exchange hands them
// over; every other field is atomic or behind the reader lock.
unsafe impl Sync for CpuBuffer {}
// SAFETY: as above; nothing is tied to a thread.
unsafe impl Send for CpuBuffer {}

impl CpuBuffer {
    /// A ring of `pages` pages (at least 2, at most [`MAX_PAGES_PER_CPU`]).
    pub(crate) fn new(pages: usize, mode: Mode) -> Self {
        let pages = pages.clamp(2, MAX_PAGES_PER_CPU);
        let frames: alloc::vec::Vec<Page> = (0..=pages).map(|_| Page::new()).collect();
        let ring: alloc::vec::Vec<AtomicU64> = (0..pages)
            .map(|i| {
                AtomicU64::new(if i == 0 {
                    slot_data(0, 0, 0)
                } else {
                    slot_free(i as u64)
                })
            })
            .collect();
        CpuBuffer {
            word: LocalU64::new(0),
            tail: LocalU64::new(0),
            nesting: LocalU64::new(0),
            written: LocalU64::new(0),
            dropped: LocalU64::new(0),
            overrun: LocalU64::new(0),
            commit: AtomicU64::new(0),
            mode,
            ring: ring.into_boxed_slice(),
            pages: frames.into_boxed_slice(),
            entries: (0..=pages).map(|_| LocalU64::new(0)).collect(),
            reader: ReaderSide {
                read: AtomicU64::new(0),
                state: lock_api::Mutex::new(ReaderState {
                    read_seq: 0,
                    read_off: 0,
                    spare: pages as u64,
                    lost_seen: 0,
                }),
            },
        }
    }

    /// Whether a writer is between reserve and commit (tests).
    #[cfg(test)]
    pub(crate) fn writing(&self) -> bool {
        self.nesting.load() != 0
    }

    /// Pages in the ring.
    pub(crate) fn pages(&self) -> usize {
        self.ring.len()
    }

    /// The tail word (see [`Tail`]).
    #[inline(always)]
    fn load_tail(&self) -> Tail {
        Tail::from_bits(self.tail.load())
    }

    #[inline(always)]
    fn page_ptr(&self, page: usize) -> *mut u8 {
        self.pages[page].0.get().cast::<u8>()
    }

    /// Reserves room for an event of `payload` bytes stamped `now` (ns).
    /// Only the CPU owning this buffer (and code nesting on it) may call this.
    ///
    /// The common case — room left in a tail page that already has events,
    /// and a time delta that fits the event header — takes a straight path
    /// whose result depends on `word` through three operations only (mask,
    /// add, or); everything else (first event of a page, time extends,
    /// non-increasing clocks, full pages, a nested writer in the way) goes
    /// through [`CpuBuffer::reserve_general`], which handles every case and
    /// would produce the same reservation for this one.
    #[inline(always)]
    pub(crate) fn reserve(&self, now: u64, payload: usize) -> Result<Reservation<'_>, Refused> {
        if payload > MAX_PAYLOAD {
            return Err(Refused::TooLarge);
        }
        let nested = self.nesting.fetch_add(1) > 0;
        self.written.add(1);
        let need = event_size(payload) as u64;
        let word = self.word.load();
        let tail = self.load_tail();
        let off = word & OFF_MASK;
        let now_low = now & TIME_MASK;
        let delta = now_low.wrapping_sub(word >> OFF_BITS) & TIME_MASK;
        // `off + need` within the page also rules out SEALED (> the data
        // size); 1 <= delta <= MAX_TIME_DELTA means no extend is needed and
        // the new time is `now_low` itself.
        let new = (now_low << OFF_BITS) | (off + need);
        let (data, word) = if off != 0
            && off + need <= PAGE_DATA_SIZE as u64
            && delta.wrapping_sub(1) < MAX_TIME_DELTA
            && self.word.compare_exchange(word, new).is_ok()
        {
            (
                self.place(tail, off, need, payload, Stamp::Delta(delta)),
                new,
            )
        } else {
            // Two words back from the cold path, so that the reservation
            // is built here for both paths and stays in registers.
            let (data, word) = self.reserve_general(now, payload, need);
            if data.is_null() {
                return Err(Refused::Lost);
            }
            (data, word)
        };
        Ok(Reservation {
            buffer: self,
            data,
            len: payload,
            word,
            nested,
        })
    }

    /// Every case of [`CpuBuffer::reserve`], in a loop that retries when a
    /// nested writer moved `word` under us. Returns the payload's address
    /// and `word` after the reservation, or a null address if the event was
    /// refused (and counted lost).
    #[cold]
    #[inline(never)]
    fn reserve_general(&self, now: u64, payload: usize, need: u64) -> (*mut u8, u64) {
        loop {
            let word = self.word.load();
            let tail = self.load_tail();
            let off = word & OFF_MASK;
            if off == SEALED {
                // We interrupted the writer that is switching pages.
                self.refuse();
                return (core::ptr::null_mut(), 0);
            }
            let last = word >> OFF_BITS;
            let now_low = now & TIME_MASK;
            let mut delta = now_low.wrapping_sub(last) & TIME_MASK;
            if delta == 0 || delta > TIME_MASK / 2 {
                // Keep times strictly increasing (no ABA on `word`, and a
                // writer interrupted after reading the clock stays in order).
                delta = 1;
            }
            let time = (last + delta) & TIME_MASK;
            let extend = off != 0 && delta > MAX_TIME_DELTA;
            let size = need + if extend { TIME_EXTEND_SIZE as u64 } else { 0 };
            if off + size <= PAGE_DATA_SIZE as u64 {
                let new = (time << OFF_BITS) | (off + size);
                self.window(Window::Exchange);
                if self.word.compare_exchange(word, new).is_err() {
                    continue;
                }
                let stamp = if off == 0 {
                    Stamp::PageStart(now.wrapping_add(time.wrapping_sub(now_low) & TIME_MASK))
                } else if extend {
                    Stamp::Extend(delta)
                } else {
                    Stamp::Delta(delta)
                };
                return (self.place(tail, off, size, payload, stamp), new);
            }
            if !self.advance(word, tail) {
                self.refuse();
                return (core::ptr::null_mut(), 0);
            }
        }
    }

    /// Writes the header of the event that owns bytes `off..off + size` of
    /// the tail page named by `tail` (just claimed through `word`) and
    /// returns the address of its payload.
    #[inline(always)]
    fn place(&self, tail: Tail, off: u64, size: u64, payload: usize, stamp: Stamp) -> *mut u8 {
        let page_id = tail.page();
        debug_assert!(page_id < self.pages.len() && page_id < self.entries.len());
        // SAFETY: `tail` only ever names a page id taken from a ring slot,
        // and slots only hold ids below `pages.len()` (which is also
        // `entries.len()`), set in `new` and moved around by exchanges,
        // never computed.
        unsafe { self.entries.get_unchecked(page_id) }.add(1);
        // SAFETY: as above.
        let page = unsafe { self.pages.get_unchecked(page_id) }
            .0
            .get()
            .cast::<u8>();
        // SAFETY: bytes `off..off+size` of the page's data were claimed by
        // the exchange; nobody else writes them.
        let event = unsafe {
            core::slice::from_raw_parts_mut(
                page.add(PAGE_HEADER_SIZE + off as usize),
                size as usize,
            )
        };
        let at = match stamp {
            Stamp::Delta(delta) => encode_data_header(event, payload, delta as u32),
            Stamp::PageStart(absolute) => {
                // SAFETY: the first event of a page owns its time stamp.
                unsafe { core::ptr::write_unaligned(page.cast::<u64>(), absolute.to_le()) };
                encode_data_header(event, payload, 0)
            }
            Stamp::Extend(delta) => {
                encode_time_extend(event, delta);
                TIME_EXTEND_SIZE + encode_data_header(&mut event[TIME_EXTEND_SIZE..], payload, 0)
            }
        };
        if payload & 3 != 0 || payload == 0 {
            // Zero the alignment padding, so no stale bytes of an earlier
            // event leak into the trace.
            let end = event.len();
            event[end - 4..].fill(0);
        }
        // SAFETY: in bounds of `event`.
        unsafe { event.as_mut_ptr().add(at) }
    }

    #[cold]
    fn refuse(&self) -> Refused {
        self.dropped.add(1);
        self.finish();
        Refused::Lost
    }

    /// Seals the full tail page and moves to the next one. Returns false if
    /// the event must be dropped; true to retry (moved, or `word` changed).
    #[cold]
    fn advance(&self, word: u64, tail: Tail) -> bool {
        let sealed = (word & !OFF_MASK) | SEALED;
        if self.word.compare_exchange(word, sealed).is_err() {
            return true;
        }
        // From here until `word` is reset, writers nesting on us drop their
        // events, so this CPU's page switch is ours alone.
        self.window(Window::Sealed);
        let old_page = tail.page();
        let next = tail.seq() + 1;
        let n = self.ring.len() as u64;
        let slot = &self.ring[(next % n) as usize];
        let new_page = loop {
            let current = slot.load(Ordering::SeqCst);
            let free = current & FREE != 0;
            if !free {
                let oldest = next.wrapping_sub(n) & SEQ_MASK;
                let committed_seq = self.commit.load(Ordering::Acquire) >> OFF_BITS;
                if slot_seq(current) != oldest
                    || self.mode == Mode::ProducerConsumer
                    || committed_seq <= next - n
                {
                    // Full (producer/consumer), or an interrupted writer is
                    // still inside the oldest page: refuse rather than
                    // corrupt it.
                    self.word.store(word);
                    return false;
                }
            }
            // Claim the page, free or oldest; a reader swapping it under us
            // makes the exchange fail and we look again.
            let page = slot_page(current);
            if slot
                .compare_exchange(
                    current,
                    slot_data(next, page as u64, 0),
                    Ordering::SeqCst,
                    Ordering::SeqCst,
                )
                .is_ok()
            {
                if !free {
                    let events = self.entries[page].load();
                    self.overrun
                        .add(events.saturating_sub(slot_consumed(current)));
                }
                break page;
            }
        };
        // SAFETY: the old page's header `commit` is written once, by its
        // sealer; the new page is ours (just claimed through its slot).
        unsafe {
            let old = self.page_ptr(old_page);
            core::ptr::write_unaligned(old.add(8).cast::<u64>(), (word & OFF_MASK).to_le());
            self.entries[new_page].store(0);
            let new = self.page_ptr(new_page);
            core::ptr::write_unaligned(new.cast::<u64>(), 0);
            core::ptr::write_unaligned(new.add(8).cast::<u64>(), 0);
        }
        self.tail.store(Tail::new(next, new_page).bits());
        self.word.store(word & !OFF_MASK);
        true
    }

    /// Where the next event would go: `seq << 12 | off`.
    #[inline(always)]
    fn position(&self) -> u64 {
        let tail = self.load_tail();
        let off = self.word.load() & OFF_MASK;
        let off = if off == SEALED {
            PAGE_DATA_SIZE as u64
        } else {
            off
        };
        (tail.seq() << OFF_BITS) | off
    }

    /// Ends the writer of a reservation. The common case — outermost, and
    /// still the last reservation (`word` unchanged, so no page switch
    /// either) — publishes our own end without re-reading the position.
    ///
    /// `nested` is what `reserve` saw: writers that interrupt us leave
    /// `nesting` as they found it, so an outer writer knows without loading
    /// it that it is still 1 (one store-forwarded load less per event).
    #[inline(always)]
    fn finish_reserved(&self, word: u64, nested: bool) {
        if !nested {
            // Loaded before `word` is checked: a page switch changes `word`
            // for good (times only grow, and a switch ends at offset 0), so
            // if `word` is still ours, `tail` still names our page.
            let tail = self.load_tail();
            if self.word.load() == word {
                self.window(Window::CommitCheck);
                // Our end is past every earlier commit, so no max is needed.
                let end = (tail.seq() << OFF_BITS) | (word & OFF_MASK);
                self.commit.store(end, Ordering::Release);
                self.nesting.sub(1);
                if self.word.load() == word {
                    return;
                }
                // A writer nested on us between the check and the
                // decrement (it did not commit, being nested): take the
                // general path.
                self.nesting.add(1);
            }
        }
        self.finish();
    }

    /// Ends a writer: the outermost one publishes everything reserved so far
    /// (all of it is complete, since nested writers finish before it resumes).
    #[inline(never)]
    fn finish(&self) {
        loop {
            let position = self.position();
            if self.nesting.load() == 1 && position > self.commit.load(Ordering::Relaxed) {
                self.commit.store(position, Ordering::Release);
            }
            self.window(Window::FinishRecheck);
            self.nesting.sub(1);
            if self.nesting.load() != 0 || self.position() == position {
                return;
            }
            // A writer nested on us after we read the position: commit its
            // event too.
            self.nesting.add(1);
        }
    }

    /// The counters.
    pub(crate) fn stats(&self) -> CpuStats {
        CpuStats {
            written: self.written.load(),
            read: self.reader.read.load(Ordering::Acquire),
            dropped: self.dropped.load(),
            overrun: self.overrun.load(),
        }
    }
}
