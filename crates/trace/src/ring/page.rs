//! ftrace's binary page and event-header encoding, and a decoder for it.
//!
//! A page (`buffer_data_page`) is [`PAGE_SIZE`] bytes:
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | `time_stamp`: absolute time (ns) of the first event |
//! | 8 | 8 | `commit`: bytes of data in the low bits, plus [`MISSED_EVENTS`] / [`MISSED_STORED`] |
//! | 16 | 4080 | data: events, back to back, 4-byte aligned |
//!
//! Each event starts with a little-endian `u32`: `type_len:5 | time_delta:27`
//! (`type_len` in the low 5 bits). `type_len` 1..=28 means `type_len * 4`
//! bytes of data follow; 0 means the next `u32` holds the data length plus 4
//! and the data follows it; [`TYPE_PADDING`], [`TYPE_TIME_EXTEND`] and
//! [`TYPE_TIME_STAMP`] are ftrace's special types. Each event's time is the
//! previous event's time plus its delta; the first event's delta is relative
//! to the page's `time_stamp`. This is exactly what trace-cmd's `kbuffer`
//! parses ("header_page" / "header_event" in `trace.dat`).

/// Bytes in one ring-buffer page.
pub const PAGE_SIZE: usize = 4096;
/// Bytes of the page header (`time_stamp` + `commit`, 64-bit `local_t`).
pub const PAGE_HEADER_SIZE: usize = 16;
/// Bytes available for events in one page.
pub const PAGE_DATA_SIZE: usize = PAGE_SIZE - PAGE_HEADER_SIZE;
/// `commit` flag: events were lost before this page.
pub const MISSED_EVENTS: u64 = 1 << 31;
/// `commit` flag: the number of lost events is stored as a `u64` right after the data.
pub const MISSED_STORED: u64 = 1 << 30;
/// Mask of the data-length bits of `commit`.
pub const COMMIT_MASK: u64 = (1 << 27) - 1;

/// Bits of `type_len`, the low bits of an event header.
pub const TYPE_LEN_BITS: u32 = 5;
/// Mask of `type_len` in an event header.
pub const TYPE_LEN_MASK: u32 = (1 << TYPE_LEN_BITS) - 1;
/// Bits of the time delta in an event header (above `type_len`).
pub const TIME_DELTA_BITS: u32 = 27;
const _: () = assert!(TYPE_LEN_BITS + TIME_DELTA_BITS == 32);
/// Largest delta that fits in a header; larger ones need a time extend.
pub const MAX_TIME_DELTA: u64 = (1 << TIME_DELTA_BITS) - 1;
/// Largest `type_len` that encodes the data length directly.
pub const TYPE_DATA_MAX: u32 = 28;
/// `type_len` of padding (also used for discarded events).
pub const TYPE_PADDING: u32 = 29;
/// `type_len` of a time extend: `array[0]` holds `delta >> 27`.
pub const TYPE_TIME_EXTEND: u32 = 30;
/// `type_len` of an absolute time stamp.
pub const TYPE_TIME_STAMP: u32 = 31;
/// Bytes of a time extend or time stamp record (Linux's
/// `RB_LEN_TIME_EXTEND`): the header and the delta's (or time's) high bits.
pub const TIME_EXTEND_SIZE: usize = 8;
/// Largest payload that a small (type_len 1..=28) header describes.
pub const SMALL_DATA_MAX: usize = TYPE_DATA_MAX as usize * 4;
/// Largest payload of one event (one page, minus a large event's two
/// header words and a time extend).
pub const MAX_PAYLOAD: usize = PAGE_DATA_SIZE - 8 - TIME_EXTEND_SIZE;

/// The `header_page` text of trace.dat / `events/header_page`, for 64-bit.
pub const HEADER_PAGE_FORMAT: &str = "\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;\n\
\tfield: local_t commit;\toffset:8;\tsize:8;\tsigned:1;\n\
\tfield: int overwrite;\toffset:8;\tsize:1;\tsigned:1;\n\
\tfield: char data;\toffset:16;\tsize:4080;\tsigned:1;\n";

/// The `header_event` text of trace.dat / `events/header_event`.
pub const HEADER_EVENT_FORMAT: &str = "# compressed entry header\n\
\ttype_len    :    5 bits\n\
\ttime_delta  :   27 bits\n\
\tarray       :   32 bits\n\
\n\
\tpadding     : type == 29\n\
\ttime_extend : type == 30\n\
\ttime_stamp : type == 31\n\
\tdata max type_len  == 28\n";

/// Bytes an event with `payload` bytes of data takes (header included,
/// without a time extend).
#[inline(always)]
pub(crate) const fn event_size(payload: usize) -> usize {
    let data = (payload + 3) & !3;
    let data = if data == 0 { 4 } else { data };
    if data <= SMALL_DATA_MAX {
        4 + data
    } else {
        8 + data
    }
}

/// Writes the header of a data event with `payload` bytes at `out[0..]`;
/// returns the offset where the payload starts.
#[inline(always)]
pub(crate) fn encode_data_header(out: &mut [u8], payload: usize, delta: u32) -> usize {
    let data = (payload + 3) & !3;
    let data = if data == 0 { 4 } else { data };
    if data <= SMALL_DATA_MAX {
        let word = (data as u32 / 4) | (delta << TYPE_LEN_BITS);
        out[..4].copy_from_slice(&word.to_le_bytes());
        4
    } else {
        let word = delta << TYPE_LEN_BITS;
        out[..4].copy_from_slice(&word.to_le_bytes());
        out[4..8].copy_from_slice(&(data as u32 + 4).to_le_bytes());
        8
    }
}

/// Writes a time extend for `delta` at `out[..TIME_EXTEND_SIZE]`.
#[inline(always)]
pub(crate) fn encode_time_extend(out: &mut [u8], delta: u64) {
    let word = TYPE_TIME_EXTEND | (((delta & MAX_TIME_DELTA) as u32) << TYPE_LEN_BITS);
    out[..4].copy_from_slice(&word.to_le_bytes());
    out[4..8].copy_from_slice(&((delta >> TIME_DELTA_BITS) as u32).to_le_bytes());
}

/// One decoded data event of a page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawEvent<'a> {
    /// Absolute time (ns) of the event.
    pub timestamp_ns: u64,
    /// Offset of the event's header in the page's data area (where a
    /// partial read resumes).
    pub(crate) offset: usize,
    /// The event's data: ftrace's common header followed by its fields.
    pub payload: &'a [u8],
}

/// Why [`PageView`] could not decode a page of the live ring (or a copy of
/// one). Pages turned into text go through the output side's own decoder
/// (written apart from this one, so that each checks the other).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RingPageError {
    /// The buffer is not [`PAGE_SIZE`] bytes long.
    WrongSize(usize),
    /// `commit` says more data than a page holds.
    CommitTooLarge(u64),
    /// An event header at this data offset runs past the committed data.
    Truncated(usize),
}

impl core::fmt::Display for RingPageError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            RingPageError::WrongSize(n) => write!(f, "page is {n} bytes, expected {PAGE_SIZE}"),
            RingPageError::CommitTooLarge(c) => {
                write!(f, "page commit {c} exceeds {PAGE_DATA_SIZE}")
            }
            RingPageError::Truncated(at) => write!(f, "event at data offset {at} is truncated"),
        }
    }
}

impl core::error::Error for RingPageError {}

/// A read-only view of one page in ftrace's layout.
///
/// ```
/// use hotkern_trace::ring::{PageView, PAGE_SIZE};
/// let page = [0u8; PAGE_SIZE];
/// let view = PageView::new(&page).unwrap();
/// assert_eq!(view.events().count(), 0);
/// assert_eq!(view.check(), Ok(0));
/// ```
#[derive(Debug, Clone, Copy)]
pub struct PageView<'a> {
    bytes: &'a [u8],
    len: usize,
}

impl<'a> PageView<'a> {
    /// Checks the header of `bytes` (a whole page).
    pub fn new(bytes: &'a [u8]) -> Result<Self, RingPageError> {
        if bytes.len() != PAGE_SIZE {
            return Err(RingPageError::WrongSize(bytes.len()));
        }
        let commit = read_u64(bytes, 8);
        let len = commit & COMMIT_MASK;
        if len > PAGE_DATA_SIZE as u64 {
            return Err(RingPageError::CommitTooLarge(len));
        }
        Ok(PageView {
            bytes,
            len: len as usize,
        })
    }

    /// The page's base timestamp.
    pub fn timestamp(&self) -> u64 {
        read_u64(self.bytes, 0)
    }

    /// Bytes of event data.
    pub(crate) fn data_len(&self) -> usize {
        self.len
    }

    /// Lost events recorded before this page: `None` if none were lost,
    /// `Some(None)` if some were lost but the count was not stored.
    #[cfg(test)]
    pub(crate) fn missed_events(&self) -> Option<Option<u64>> {
        let commit = read_u64(self.bytes, 8);
        if commit & MISSED_EVENTS == 0 {
            return None;
        }
        if commit & MISSED_STORED != 0 && self.len + 8 <= PAGE_DATA_SIZE {
            return Some(Some(read_u64(self.bytes, PAGE_HEADER_SIZE + self.len)));
        }
        Some(None)
    }

    /// The data events of the page, in order, with absolute timestamps.
    pub fn events(&self) -> Events<'a> {
        Events {
            data: &self.bytes[PAGE_HEADER_SIZE..PAGE_HEADER_SIZE + self.len],
            offset: 0,
            time: self.timestamp(),
            error: None,
        }
    }

    /// Decodes every event, failing on the first malformed one.
    pub fn check(&self) -> Result<usize, RingPageError> {
        let mut events = self.events();
        let mut count = 0;
        for _ in events.by_ref() {
            count += 1;
        }
        match events.error {
            Some(error) => Err(error),
            None => Ok(count),
        }
    }
}

/// Iterator over the data events of a page (see [`PageView::events`]).
#[derive(Debug, Clone)]
pub struct Events<'a> {
    data: &'a [u8],
    offset: usize,
    time: u64,
    error: Option<RingPageError>,
}

impl Events<'_> {
    /// The time reached so far (the last event's or extend's time).
    pub(crate) fn time(&self) -> u64 {
        self.time
    }

    /// The offset of the next header.
    pub(crate) fn offset(&self) -> usize {
        self.offset
    }

    /// The decoding error that stopped the iteration, if any.
    #[cfg(test)]
    pub(crate) fn error(&self) -> Option<RingPageError> {
        self.error
    }
}

impl<'a> Iterator for Events<'a> {
    type Item = RawEvent<'a>;

    fn next(&mut self) -> Option<RawEvent<'a>> {
        loop {
            let at = self.offset;
            if at >= self.data.len() {
                return None;
            }
            if at + 4 > self.data.len() {
                // A header cut short: the live ring commits whole words, so
                // only a damaged page ends in one (the trace.dat decoder
                // rejects it too).
                self.error = Some(RingPageError::Truncated(at));
                return None;
            }
            let word = read_u32(self.data, at);
            let type_len = word & TYPE_LEN_MASK;
            let delta = u64::from(word >> TYPE_LEN_BITS);
            // Times add up modulo 2^64, as in kbuffer (C's unsigned
            // arithmetic) and the trace.dat decoder: a page copied from
            // anywhere may carry any time stamp, and overflowing it makes
            // wrong times, never a panic.
            match type_len {
                TYPE_PADDING => {
                    // A padding with a zero delta ends the page; otherwise
                    // (a discarded event) its length minus the header follows.
                    if delta == 0 || at + 8 > self.data.len() {
                        self.offset = self.data.len();
                        return None;
                    }
                    let length = read_u32(self.data, at + 4) as usize;
                    if length < 4 {
                        self.error = Some(RingPageError::Truncated(at));
                        return None;
                    }
                    // A discarded event keeps its delta, and the next
                    // event's delta is relative to it, so it counts: as in
                    // libtraceevent's kbuffer (`update_pointers` in
                    // src/kbuffer-parse.c adds every record's delta but a
                    // time stamp's), which reads trace-cmd's files, and in
                    // Linux's own delta checker (`check_buffer` in
                    // kernel/trace/ring_buffer.c); Linux's consuming reader
                    // (`rb_update_read_stamp`) skips it. The trace.dat
                    // decoder (output/pages.rs) does the same.
                    self.time = self.time.wrapping_add(delta);
                    self.offset = at + 4 + length;
                }
                TYPE_TIME_EXTEND | TYPE_TIME_STAMP => {
                    if at + TIME_EXTEND_SIZE > self.data.len() {
                        self.error = Some(RingPageError::Truncated(at));
                        return None;
                    }
                    let high = u64::from(read_u32(self.data, at + 4));
                    let value = (high << TIME_DELTA_BITS) + delta;
                    if type_len == TYPE_TIME_EXTEND {
                        self.time = self.time.wrapping_add(value);
                    } else {
                        self.time = value;
                    }
                    self.offset = at + TIME_EXTEND_SIZE;
                }
                0 => {
                    if at + 8 > self.data.len() {
                        self.error = Some(RingPageError::Truncated(at));
                        return None;
                    }
                    let length = (read_u32(self.data, at + 4) as usize).saturating_sub(4);
                    let start = at + 8;
                    let end = start + ((length + 3) & !3);
                    if end > self.data.len() || length == 0 {
                        self.error = Some(RingPageError::Truncated(at));
                        return None;
                    }
                    self.time = self.time.wrapping_add(delta);
                    self.offset = end;
                    return Some(RawEvent {
                        timestamp_ns: self.time,
                        offset: at,
                        payload: &self.data[start..start + length],
                    });
                }
                small => {
                    let start = at + 4;
                    let end = start + small as usize * 4;
                    if end > self.data.len() {
                        self.error = Some(RingPageError::Truncated(at));
                        return None;
                    }
                    self.time = self.time.wrapping_add(delta);
                    self.offset = end;
                    return Some(RawEvent {
                        timestamp_ns: self.time,
                        offset: at,
                        payload: &self.data[start..end],
                    });
                }
            }
        }
    }
}

#[inline(always)]
pub(crate) fn read_u32(bytes: &[u8], at: usize) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(word)
}

#[inline(always)]
pub(crate) fn read_u64(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use alloc::vec;

    fn page_with(events: &[(u32, &[u8])], extend: Option<(usize, u64)>) -> alloc::vec::Vec<u8> {
        let mut page = vec![0u8; PAGE_SIZE];
        page[..8].copy_from_slice(&1000u64.to_le_bytes());
        let mut at = PAGE_HEADER_SIZE;
        for (i, (delta, payload)) in events.iter().enumerate() {
            if let Some((before, big)) = extend {
                if before == i {
                    encode_time_extend(&mut page[at..], big);
                    at += TIME_EXTEND_SIZE;
                }
            }
            let start = encode_data_header(&mut page[at..], payload.len(), *delta);
            page[at + start..at + start + payload.len()].copy_from_slice(payload);
            at += event_size(payload.len());
        }
        let len = (at - PAGE_HEADER_SIZE) as u64;
        page[8..16].copy_from_slice(&len.to_le_bytes());
        page
    }

    #[test]
    fn small_and_large_events_round_trip_with_deltas() {
        let big = [7u8; 200];
        let page = page_with(&[(0, b"abcdefgh"), (5, &big), (3, b"xyz")], None);
        let view = PageView::new(&page).unwrap();
        let events: alloc::vec::Vec<_> = view.events().collect();
        assert_eq!(events.len(), 3);
        assert_eq!(events[0].timestamp_ns, 1000);
        assert_eq!(events[0].payload, b"abcdefgh");
        assert_eq!(events[1].timestamp_ns, 1005);
        assert_eq!(events[1].payload, &big[..]);
        assert_eq!(events[2].timestamp_ns, 1008);
        // Payloads are padded to 4 bytes; the reader sees the padded length.
        assert_eq!(&events[2].payload[..3], b"xyz");
        assert_eq!(view.check(), Ok(3));
    }

    #[test]
    fn time_extend_carries_large_gaps() {
        let gap = (5u64 << TIME_DELTA_BITS) + 17;
        let page = page_with(&[(0, b"aaaa"), (0, b"bbbb")], Some((1, gap)));
        let view = PageView::new(&page).unwrap();
        let times: alloc::vec::Vec<u64> = view.events().map(|e| e.timestamp_ns).collect();
        assert_eq!(times, vec![1000, 1000 + gap]);
    }

    #[test]
    fn malformed_pages_are_reported_not_panicked_on() {
        assert_eq!(
            PageView::new(&[0u8; 10]).unwrap_err(),
            RingPageError::WrongSize(10)
        );
        let mut page = vec![0u8; PAGE_SIZE];
        page[8..16].copy_from_slice(&5000u64.to_le_bytes());
        assert_eq!(
            PageView::new(&page).unwrap_err(),
            RingPageError::CommitTooLarge(5000)
        );
        // A large-event header claiming more data than committed.
        let mut page = vec![0u8; PAGE_SIZE];
        page[8..16].copy_from_slice(&12u64.to_le_bytes());
        page[16..20].copy_from_slice(&0u32.to_le_bytes());
        page[20..24].copy_from_slice(&400u32.to_le_bytes());
        let view = PageView::new(&page).unwrap();
        assert_eq!(view.check(), Err(RingPageError::Truncated(0)));
    }

    #[test]
    fn page_errors_say_where() {
        let error: &dyn core::error::Error = &RingPageError::Truncated(24);
        assert_eq!(
            alloc::string::ToString::to_string(error),
            "event at data offset 24 is truncated"
        );
        assert_eq!(
            alloc::string::ToString::to_string(&RingPageError::WrongSize(10)),
            "page is 10 bytes, expected 4096"
        );
    }

    #[test]
    fn missed_event_flags_decode() {
        let mut page = page_with(&[(0, b"abcd")], None);
        let len = 8u64;
        page[8..16].copy_from_slice(&(len | MISSED_EVENTS | MISSED_STORED).to_le_bytes());
        page[PAGE_HEADER_SIZE + 8..PAGE_HEADER_SIZE + 16].copy_from_slice(&42u64.to_le_bytes());
        assert_eq!(
            PageView::new(&page).unwrap().missed_events(),
            Some(Some(42))
        );
        page[8..16].copy_from_slice(&(len | MISSED_EVENTS).to_le_bytes());
        assert_eq!(PageView::new(&page).unwrap().missed_events(), Some(None));
        page[8..16].copy_from_slice(&len.to_le_bytes());
        assert_eq!(PageView::new(&page).unwrap().missed_events(), None);
    }

    #[test]
    fn headers_take_linuxs_small_and_large_forms() {
        // Linux (`rb_update_event`) writes data of up to 28 words as
        // `type_len` = words, anything longer as `type_len` 0 with the
        // length plus 4 in the next word; an empty event still takes a
        // word. (payload bytes, first word, second word, event size)
        let cases: [(usize, u32, Option<u32>, usize); 6] = [
            (0, 1, None, 8),
            (1, 1, None, 8),
            (5, 2, None, 12),
            (112, 28, None, 116),
            (113, 0, Some(120), 124),
            (MAX_PAYLOAD, 0, Some(4068), 4072),
        ];
        for (payload, first, second, size) in cases {
            let mut out = [0xffu8; 8];
            let at = encode_data_header(&mut out, payload, 5);
            assert_eq!(read_u32(&out, 0), first | 5 << 5, "{payload} bytes");
            match second {
                Some(length) => assert_eq!((at, read_u32(&out, 4)), (8, length)),
                None => assert_eq!((at, read_u32(&out, 4)), (4, u32::MAX)),
            }
            assert_eq!(event_size(payload), size, "{payload} bytes");
        }
        assert_eq!(MAX_PAYLOAD, 4096 - 16 - 8 - 8);
        // A time extend: type 30, the delta's low 27 bits, then the rest.
        let mut out = [0u8; 8];
        encode_time_extend(&mut out, (3 << 27) | 9);
        assert_eq!((read_u32(&out, 0), read_u32(&out, 4)), (30 | 9 << 5, 3));
    }
}
