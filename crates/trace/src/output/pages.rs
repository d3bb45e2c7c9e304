//! Decoding raw ring-buffer pages into the output side's entries, loss
//! markers included (the `kbuffer` side of trace-cmd), for the live
//! `trace`, `trace_pipe` and `snapshot` files. Written independently of the
//! recorder's encoder and decoder ([`ring::page`](crate::ring::page)) so
//! that each checks the other; only the format's constants are shared.
//! (Files are read by [`hotkern_tracedat`], which needs `std`.)

use alloc::vec::Vec;
use core::fmt;

use crate::output::data::{Entry, RawRecord};
use crate::ring::page::{
    COMMIT_MASK, MISSED_EVENTS, MISSED_STORED, PAGE_HEADER_SIZE, TIME_DELTA_BITS, TIME_EXTEND_SIZE,
    TYPE_LEN_BITS, TYPE_LEN_MASK, TYPE_PADDING, TYPE_TIME_EXTEND, TYPE_TIME_STAMP,
};

/// A ring-buffer page copied out of the rings that does not decode.
/// (The live ring's own pages are decoded by
/// [`PageView`](crate::ring::PageView), whose error is
/// [`RingPageError`](crate::ring::RingPageError).)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageError {
    /// Index of the page in the CPU's data.
    pub page: usize,
    /// Byte offset in the page.
    pub offset: usize,
    /// What is wrong.
    pub message: &'static str,
}

impl fmt::Display for PageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "page {} offset {}: {}",
            self.page, self.offset, self.message
        )
    }
}

impl core::error::Error for PageError {}

fn u32_at(data: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(data.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(data: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(data.get(at..at + 8)?.try_into().ok()?))
}

/// Decodes one CPU's pages into events (and loss markers), in order.
pub fn decode_pages(cpu: u32, data: &[u8], page_size: usize) -> Result<Vec<Entry>, PageError> {
    let mut entries = Vec::new();
    if page_size <= PAGE_HEADER_SIZE {
        return Err(PageError {
            page: 0,
            offset: 0,
            message: "page size too small",
        });
    }
    for (index, page) in data.chunks(page_size).enumerate() {
        let error = |offset, message| PageError {
            page: index,
            offset,
            message,
        };
        let mut time = u64_at(page, 0).ok_or(error(0, "truncated page header"))?;
        let commit = u64_at(page, 8).ok_or(error(8, "truncated page header"))?;
        // The length bits as kbuffer (`kbuffer_load_subbuffer`) reads them.
        let length = (commit & COMMIT_MASK) as usize;
        if PAGE_HEADER_SIZE + length > page.len() {
            return Err(error(8, "commit beyond the page"));
        }
        if commit & MISSED_EVENTS != 0 {
            let count = if commit & MISSED_STORED != 0 {
                u64_at(page, PAGE_HEADER_SIZE + length)
                    .ok_or(error(PAGE_HEADER_SIZE + length, "truncated lost count"))?
            } else {
                0
            };
            entries.push(Entry::Lost { cpu, count });
        }
        let end = PAGE_HEADER_SIZE + length;
        let mut at = PAGE_HEADER_SIZE;
        while at < end {
            let header = u32_at(page, at).ok_or(error(at, "truncated event header"))?;
            let type_len = header & TYPE_LEN_MASK;
            let delta = u64::from(header >> TYPE_LEN_BITS);
            match type_len {
                TYPE_PADDING => {
                    if delta == 0 {
                        // Padding to the end of the page.
                        break;
                    }
                    let skip = u32_at(page, at + 4).ok_or(error(at, "truncated padding"))? as usize;
                    // A discarded event: its delta counts, as in kbuffer's
                    // `update_pointers` (see ring/page.rs for the sources).
                    time = time.wrapping_add(delta);
                    at += 4 + skip;
                }
                TYPE_TIME_EXTEND => {
                    let high =
                        u64::from(u32_at(page, at + 4).ok_or(error(at, "truncated time extend"))?);
                    time = time.wrapping_add((high << TIME_DELTA_BITS) + delta);
                    at += TIME_EXTEND_SIZE;
                }
                TYPE_TIME_STAMP => {
                    let high =
                        u64::from(u32_at(page, at + 4).ok_or(error(at, "truncated time stamp"))?);
                    time = (high << TIME_DELTA_BITS) + delta;
                    at += TIME_EXTEND_SIZE;
                }
                _ => {
                    let (data_at, data_len) = if type_len == 0 {
                        let length =
                            u32_at(page, at + 4).ok_or(error(at, "truncated length"))? as usize;
                        if length < 4 {
                            return Err(error(at, "bad event length"));
                        }
                        (at + 8, (length - 4 + 3) & !3)
                    } else {
                        (at + 4, type_len as usize * 4)
                    };
                    if data_at + data_len > end {
                        return Err(error(at, "event beyond the commit"));
                    }
                    time = time.wrapping_add(delta);
                    entries.push(Entry::Event(RawRecord {
                        cpu,
                        timestamp_ns: time,
                        payload: page[data_at..data_at + data_len].to_vec(),
                    }));
                    at = data_at + data_len;
                }
            }
        }
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::page::{PageView, PAGE_SIZE};
    use alloc::vec;

    /// A page at time 1000 holding a discarded event (padding with a delta
    /// of 50 and 8 bytes of body) and then a small event 7 ns later.
    fn page_with_discarded_event() -> Vec<u8> {
        let mut page = vec![0u8; PAGE_SIZE];
        page[..8].copy_from_slice(&1000u64.to_le_bytes());
        let padding = TYPE_PADDING | (50 << TYPE_LEN_BITS);
        page[16..20].copy_from_slice(&padding.to_le_bytes());
        page[20..24].copy_from_slice(&8u32.to_le_bytes());
        let event = 2u32 | (7 << TYPE_LEN_BITS);
        page[28..32].copy_from_slice(&event.to_le_bytes());
        page[32..40].copy_from_slice(b"payload!");
        page[8..16].copy_from_slice(&24u64.to_le_bytes());
        page
    }

    #[test]
    fn both_decoders_count_a_discarded_events_delta() {
        let page = page_with_discarded_event();
        let ring: Vec<(u64, &[u8])> = PageView::new(&page)
            .unwrap()
            .events()
            .map(|event| (event.timestamp_ns, event.payload))
            .collect();
        assert_eq!(ring, vec![(1057, &b"payload!"[..])]);
        let entries = decode_pages(0, &page, PAGE_SIZE).unwrap();
        let Some(Entry::Event(record)) = entries.first() else {
            panic!("no event in {entries:?}");
        };
        assert_eq!(entries.len(), 1);
        assert_eq!(
            (record.timestamp_ns, &record.payload[..]),
            (1057, &b"payload!"[..])
        );
    }
}
