//! Decoding raw ring-buffer pages (the `kbuffer` side of trace-cmd),
//! written independently of the recorder's encoder so that each checks
//! the other.

use alloc::vec::Vec;
use core::fmt;

use crate::output::data::{Entry, Record};

const TYPE_PADDING: u32 = 29;
const TYPE_TIME_EXTEND: u32 = 30;
const TYPE_TIME_STAMP: u32 = 31;
const MISSED_EVENTS: u64 = 1 << 31;
const MISSED_STORED: u64 = 1 << 30;
const PAGE_HEADER: usize = 16;

/// A ring-buffer page read from a `trace.dat` file that does not decode.
/// (The live ring's own pages are decoded by
/// [`PageView`](crate::ring::page::PageView), whose error is
/// [`RingPageError`](crate::ring::page::RingPageError).)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TraceDatPageError {
    /// Index of the page in the CPU's data.
    pub page: usize,
    /// Byte offset in the page.
    pub offset: usize,
    /// What is wrong.
    pub message: &'static str,
}

impl fmt::Display for TraceDatPageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "page {} offset {}: {}",
            self.page, self.offset, self.message
        )
    }
}

impl core::error::Error for TraceDatPageError {}

fn u32_at(data: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(data.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(data: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(data.get(at..at + 8)?.try_into().ok()?))
}

/// Decodes one CPU's pages into events (and loss markers), in order.
pub fn decode_pages(
    cpu: u32,
    data: &[u8],
    page_size: usize,
) -> Result<Vec<Entry>, TraceDatPageError> {
    let mut entries = Vec::new();
    if page_size <= PAGE_HEADER {
        return Err(TraceDatPageError {
            page: 0,
            offset: 0,
            message: "page size too small",
        });
    }
    for (index, page) in data.chunks(page_size).enumerate() {
        let error = |offset, message| TraceDatPageError {
            page: index,
            offset,
            message,
        };
        let mut time = u64_at(page, 0).ok_or(error(0, "truncated page header"))?;
        let commit = u64_at(page, 8).ok_or(error(8, "truncated page header"))?;
        let length = (commit & !(MISSED_EVENTS | MISSED_STORED) & 0xffff_ffff) as usize;
        if PAGE_HEADER + length > page.len() {
            return Err(error(8, "commit beyond the page"));
        }
        if commit & MISSED_EVENTS != 0 {
            let count = if commit & MISSED_STORED != 0 {
                u64_at(page, PAGE_HEADER + length)
                    .ok_or(error(PAGE_HEADER + length, "truncated lost count"))?
            } else {
                0
            };
            entries.push(Entry::Lost { cpu, count });
        }
        let end = PAGE_HEADER + length;
        let mut at = PAGE_HEADER;
        while at < end {
            let header = u32_at(page, at).ok_or(error(at, "truncated event header"))?;
            let type_len = header & 0x1f;
            let delta = u64::from(header >> 5);
            match type_len {
                TYPE_PADDING => {
                    if delta == 0 {
                        // Padding to the end of the page.
                        break;
                    }
                    let skip = u32_at(page, at + 4).ok_or(error(at, "truncated padding"))? as usize;
                    at += 4 + skip;
                }
                TYPE_TIME_EXTEND => {
                    let high =
                        u64::from(u32_at(page, at + 4).ok_or(error(at, "truncated time extend"))?);
                    time = time.wrapping_add((high << 27) + delta);
                    at += 8;
                }
                TYPE_TIME_STAMP => {
                    let high =
                        u64::from(u32_at(page, at + 4).ok_or(error(at, "truncated time stamp"))?);
                    time = (high << 27) + delta;
                    at += 8;
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
                    entries.push(Entry::Event(Record {
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
