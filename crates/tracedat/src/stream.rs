//! CPU data: ring-buffer pages read one at a time (decompressed one chunk
//! at a time in compressed files), split into events, and the CPUs merged
//! by time stamp. Memory use is a page (or a chunk) per CPU, whatever the
//! file's size.

use crate::compress::Codec;
use crate::error::{Error, Result};
use crate::header::{CpuData, HeaderPage};
use crate::input::{read_uint, Bytes, Input};

/// Set in a page's commit word when events were lost before the page.
const MISSED_EVENTS: u64 = 1 << 31;
/// Set when the number lost is stored after the page's data.
const MISSED_STORED: u64 = 1 << 30;
/// The commit word's low bits are the page's data length.
const COMMIT_MASK: u64 = (1 << 27) - 1;

const PADDING: u32 = 29;
const TIME_EXTEND: u32 = 30;
const TIME_STAMP: u32 = 31;

/// Where the next page comes from.
enum Pages {
    Raw {
        next: u64,
        end: u64,
    },
    /// `u32 chunk count`, then chunks of `[u32 size][u32 raw size][data]`.
    Compressed {
        codec: Codec,
        next_chunk: u64,
        chunks_left: u32,
        chunk: Vec<u8>,
        pos: usize,
    },
}

/// Things worth knowing about the record about to be returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lost {
    /// The ring buffer dropped events before this page; the count is
    /// known when the kernel stored it.
    Events(Option<u64>),
}

/// One event record.
#[derive(Clone, Debug)]
pub struct Record {
    /// Which of [`crate::Metadata::buffers`] holds it (0: the top buffer).
    pub buffer: usize,
    /// The CPU that recorded it.
    pub cpu: u32,
    /// Time stamp in the trace clock's units (nanoseconds for most clocks).
    pub timestamp: u64,
    /// The event's bytes, starting with the common fields.
    pub data: Vec<u8>,
    /// Events lost on this CPU just before this record.
    pub lost_before: Option<Lost>,
}

pub(crate) struct CpuStream {
    buffer: usize,
    cpu: u32,
    pages: Pages,
    page: Vec<u8>,
    pos: usize,
    end: usize,
    ts: u64,
    lost: Option<Lost>,
    big_endian: bool,
    long_size: usize,
    page_size: usize,
    layout: HeaderPage,
    /// The next record, read ahead so CPUs can be merged by time.
    pub(crate) peeked: Option<Record>,
    /// Pages whose events could not all be read.
    pub(crate) corrupt_pages: u64,
}

pub(crate) struct StreamConfig {
    pub(crate) big_endian: bool,
    pub(crate) long_size: usize,
    pub(crate) page_size: usize,
    pub(crate) layout: HeaderPage,
    pub(crate) codec: Option<Codec>,
}

impl CpuStream {
    pub(crate) fn new(
        input: &mut Input,
        buffer: usize,
        data: &CpuData,
        cfg: &StreamConfig,
    ) -> Result<CpuStream> {
        let pages = match cfg.codec {
            None => Pages::Raw {
                next: data.offset,
                end: data.offset.saturating_add(data.size).min(input.len()),
            },
            Some(codec) if data.size > 0 => {
                let raw = input.read_at(data.offset, 4, "CPU data")?;
                Pages::Compressed {
                    codec,
                    next_chunk: data.offset.saturating_add(4),
                    chunks_left: Bytes::new(&raw, cfg.big_endian, "CPU data").u32()?,
                    chunk: Vec::new(),
                    pos: 0,
                }
            }
            Some(_) => Pages::Raw { next: 0, end: 0 },
        };
        Ok(CpuStream {
            buffer,
            cpu: data.cpu,
            pages,
            page: Vec::new(),
            pos: 0,
            end: 0,
            ts: 0,
            lost: None,
            big_endian: cfg.big_endian,
            long_size: cfg.long_size,
            page_size: cfg.page_size,
            layout: cfg.layout,
            peeked: None,
            corrupt_pages: 0,
        })
    }

    fn next_page(&mut self, input: &mut Input) -> Result<bool> {
        match self.raw_page(input)? {
            Some(page) => self.load_page(page),
            None => Ok(false),
        }
    }

    /// The next page as the file holds it (decompressed), not parsed.
    pub(crate) fn raw_page(&mut self, input: &mut Input) -> Result<Option<Vec<u8>>> {
        let ps = self.page_size as u64;
        let page = match &mut self.pages {
            Pages::Raw { next, end } => {
                if *next >= *end {
                    return Ok(None);
                }
                let len = ps.min(*end - *next);
                let page = input.read_at(*next, len, "CPU data")?;
                *next += len;
                page
            }
            Pages::Compressed {
                codec,
                next_chunk,
                chunks_left,
                chunk,
                pos,
            } => {
                if *pos >= chunk.len() {
                    if *chunks_left == 0 {
                        return Ok(None);
                    }
                    let head = input.read_at(*next_chunk, 8, "CPU data chunk")?;
                    let mut b = Bytes::new(&head, self.big_endian, "CPU data chunk");
                    let csize = b.u32()?;
                    let size = b.u32()?;
                    let data = input.read_at(
                        next_chunk.saturating_add(8),
                        u64::from(csize),
                        "CPU data chunk",
                    )?;
                    *chunk = codec.decompress(&data, size)?;
                    *next_chunk = next_chunk.saturating_add(8 + u64::from(csize));
                    *chunks_left -= 1;
                    *pos = 0;
                    if chunk.is_empty() {
                        return Ok(None);
                    }
                }
                let len = self.page_size.min(chunk.len() - *pos);
                let page = chunk[*pos..*pos + len].to_vec();
                *pos += len;
                page
            }
        };
        Ok(Some(page))
    }

    fn load_page(&mut self, page: Vec<u8>) -> Result<bool> {
        let l = self.layout;
        let ts = read_uint(&page, self.big_endian, 8).ok_or(Error::Truncated("page header"))?;
        let commit = page
            .get(l.commit_offset..)
            .and_then(|c| read_uint(c, self.big_endian, l.commit_size))
            .ok_or(Error::Truncated("page header"))?;
        let size = (commit & COMMIT_MASK) as usize;
        let end = l.data_offset.saturating_add(size);
        if end > page.len() {
            self.corrupt_pages += 1;
        }
        self.end = end.min(page.len());
        if commit & MISSED_EVENTS != 0 {
            let count = if commit & MISSED_STORED != 0 {
                page.get(end..)
                    .and_then(|c| read_uint(c, self.big_endian, self.long_size))
            } else {
                None
            };
            self.lost = Some(Lost::Events(count));
        }
        self.ts = ts;
        self.pos = l.data_offset;
        self.page = page;
        Ok(true)
    }

    /// Reads the next event of this CPU into `peeked`.
    pub(crate) fn advance(&mut self, input: &mut Input) -> Result<()> {
        self.peeked = None;
        loop {
            if self.pos + 4 > self.end {
                if !self.next_page(input)? {
                    return Ok(());
                }
                continue;
            }
            let word = read_uint(&self.page[self.pos..], self.big_endian, 4).unwrap_or(0) as u32;
            let (type_len, delta) = if self.big_endian {
                (word >> 27, u64::from(word & ((1 << 27) - 1)))
            } else {
                (word & 31, u64::from(word >> 5))
            };
            let (len, payload) = match type_len {
                PADDING => {
                    if delta == 0 {
                        // The rest of the page is empty.
                        self.pos = self.end;
                        continue;
                    }
                    // Unreadable length: past the page, so the page is bad.
                    let n = self.array0().unwrap_or(u64::MAX) as usize;
                    (n.saturating_add(4), None)
                }
                TIME_EXTEND => {
                    let Some(high) = self.array0() else {
                        self.bad_page();
                        continue;
                    };
                    self.ts = self.ts.wrapping_add((high << 27) | delta);
                    (8, None)
                }
                TIME_STAMP => {
                    let Some(high) = self.array0() else {
                        self.bad_page();
                        continue;
                    };
                    // Absolute: the low 59 bits replace the clock's.
                    let abs = (high << 27) | delta;
                    self.ts = (self.ts & !((1u64 << 59) - 1)) | abs;
                    (8, None)
                }
                0 => {
                    let Some(n) = self.array0() else {
                        self.bad_page();
                        continue;
                    };
                    self.ts = self.ts.wrapping_add(delta);
                    let n = n as usize;
                    (4 + n, Some((self.pos + 8, n.saturating_sub(4))))
                }
                n => {
                    self.ts = self.ts.wrapping_add(delta);
                    let n = n as usize * 4;
                    (4 + n, Some((self.pos + 4, n)))
                }
            };
            let overrun = self.pos.saturating_add(len) > self.end;
            if overrun {
                // trace-cmd still hands out an event that runs past its
                // page (with what bytes the page has), then drops the
                // rest of the page; so does this reader, counting it.
                self.bad_page();
            } else {
                self.pos += len;
            }
            if let Some((start, n)) = payload {
                let end = start
                    .saturating_add(n)
                    .min(self.end)
                    .max(start.min(self.end));
                let start = start.min(end);
                self.peeked = Some(Record {
                    buffer: self.buffer,
                    cpu: self.cpu,
                    timestamp: self.ts,
                    data: self.page[start..end].to_vec(),
                    lost_before: self.lost.take(),
                });
                return Ok(());
            }
        }
    }

    /// An event runs past its page: count the page and go on with the
    /// next, as trace-cmd skips what it cannot read.
    fn bad_page(&mut self) {
        self.corrupt_pages += 1;
        self.pos = self.end;
    }

    /// The word after the current event header.
    fn array0(&self) -> Option<u64> {
        self.page
            .get(self.pos + 4..self.end)
            .and_then(|a| read_uint(a, self.big_endian, 4))
    }
}
