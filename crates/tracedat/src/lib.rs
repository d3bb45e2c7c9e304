//! Reads the `trace.dat` files trace-cmd writes (versions 6 and 7, zlib-
//! and zstd-compressed or not) and prints them as `trace-cmd report -N`
//! does: libtraceevent's rules for event formats and print formats, without
//! plugins.
//!
//! ```no_run
//! use hotkern_tracedat::{ReportOptions, TraceFile};
//!
//! let mut file = TraceFile::open("trace.dat")?;
//! for record in file.records()? {
//!     let record = record?;
//!     println!("{} {}", record.cpu, record.timestamp);
//! }
//! let mut out = Vec::new();
//! hotkern_tracedat::write_report(&mut TraceFile::open("trace.dat")?, &ReportOptions::default(), &mut out)?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![warn(missing_docs)]
// Links from the other hotkern crates to this one point here when this
// crate's docs are not beside theirs (a fresh `cargo doc --no-deps`).
#![doc(html_root_url = "https://docs.rs/hotkern-tracedat/0.1")]
// Without `std` (a kernel's build) only the writer is compiled.
#![cfg_attr(not(feature = "std"), no_std)]

extern crate alloc;

/// What `std`'s prelude gives and a `no_std` build must import, for the
/// modules built both ways (the event formats, the printer, the symbols).
mod prelude {
    #[allow(unused_imports)]
    pub(crate) use alloc::{
        borrow::ToOwned,
        boxed::Box,
        format,
        string::{String, ToString},
        vec,
        vec::Vec,
    };
    /// Lookup tables: hashed with `std`, ordered without.
    #[cfg(feature = "std")]
    pub(crate) type Map<K, V> = std::collections::HashMap<K, V>;
    #[cfg(not(feature = "std"))]
    pub(crate) type Map<K, V> = alloc::collections::BTreeMap<K, V>;
}

mod format;
pub mod print;
mod symbols;
pub mod write;

pub use format::{EventFormat, Field, FieldKind, FormatError};
pub use symbols::{cmdline_lines, kallsyms_lines, Kallsyms};

/// Declares the items that need `std`: the reader and the JSON export.
macro_rules! with_std {
    ($($item:item)*) => { $(#[cfg(feature = "std")] $item)* };
}

with_std! {
mod compress;
mod error;
mod header;
mod input;
pub mod json;
mod report;
mod stream;

use std::path::Path;

pub use error::{Error, Result};
pub use header::{Buffer, CpuData, Metadata};
pub use report::{write_report, ReportOptions, ReportSummary};
pub use stream::{Lost, Record};

use input::{Input, Source};
use print::Tables;
use stream::{CpuStream, StreamConfig};
}

/// An open trace.dat: its metadata read, its CPU data read on demand.
#[cfg(feature = "std")]
pub struct TraceFile {
    input: Input,
    meta: Metadata,
    tables: Tables,
}

#[cfg(feature = "std")]
impl TraceFile {
    /// Opens and reads the metadata of the file at `path`.
    ///
    /// ```no_run
    /// let file = hotkern_tracedat::TraceFile::open("trace.dat")?;
    /// println!("version {}, {} CPUs", file.metadata().version, file.metadata().cpu_count);
    /// # Ok::<(), hotkern_tracedat::Error>(())
    /// ```
    pub fn open(path: impl AsRef<Path>) -> Result<TraceFile> {
        let file = std::fs::File::open(path)?;
        Self::from_source(Box::new(std::io::BufReader::new(file)))
    }

    /// Reads a trace held in memory.
    ///
    /// ```
    /// assert!(hotkern_tracedat::TraceFile::from_bytes(vec![0x17, 0x08, 0x44]).is_err());
    /// ```
    pub fn from_bytes(bytes: Vec<u8>) -> Result<TraceFile> {
        Self::from_source(Box::new(std::io::Cursor::new(bytes)))
    }

    /// Reads a trace from any seekable reader (a file wrapped to report
    /// progress, say). Reads are page-sized; buffer a raw file descriptor.
    ///
    /// ```
    /// let bytes = std::io::Cursor::new(b"\x17\x08\x44tracing9\0".to_vec());
    /// assert!(hotkern_tracedat::TraceFile::from_reader(bytes).is_err());
    /// ```
    pub fn from_reader(
        reader: impl std::io::Read + std::io::Seek + Send + 'static,
    ) -> Result<TraceFile> {
        Self::from_source(Box::new(reader))
    }

    fn from_source(source: Box<dyn Source>) -> Result<TraceFile> {
        let mut input = Input::new(source)?;
        let meta = header::read(&mut input)?;
        let tables = meta.tables();
        Ok(TraceFile {
            input,
            meta,
            tables,
        })
    }

    /// What the file says about itself.
    pub fn metadata(&self) -> &Metadata {
        &self.meta
    }

    /// All records, every buffer's CPUs merged by time stamp.
    pub fn records(&mut self) -> Result<Records<'_>> {
        Ok(self.reader()?.0)
    }

    /// The records of every buffer (the top one and any instances), merged
    /// by time stamp as trace-cmd reports them, and a [`Printer`] to format
    /// them with while they are read.
    pub fn reader(&mut self) -> Result<(Records<'_>, Printer<'_>)> {
        let all: Vec<usize> = (0..self.meta.buffers.len()).collect();
        self.open_buffers(&all)
    }

    /// The records of buffer `index` of [`Metadata::buffers`] alone, and a
    /// [`Printer`].
    pub fn buffer_records(&mut self, index: usize) -> Result<(Records<'_>, Printer<'_>)> {
        self.open_buffers(&[index])
    }

    fn open_buffers(&mut self, buffers: &[usize]) -> Result<(Records<'_>, Printer<'_>)> {
        let cfg = self.stream_config();
        let mut streams = Vec::new();
        for &index in buffers {
            let Some(buffer) = self.meta.buffers.get(index) else {
                continue;
            };
            for cpu in &buffer.cpus {
                let mut s = CpuStream::new(&mut self.input, index, cpu, &cfg)?;
                s.advance(&mut self.input)?;
                streams.push(s);
            }
        }
        let records = Records {
            input: &mut self.input,
            streams,
            time_offset: self.meta.time_offset,
            tsc2nsec: self.meta.tsc2nsec,
        };
        let printer = Printer {
            meta: &self.meta,
            tables: &self.tables,
        };
        Ok((records, printer))
    }

    /// The file as the writer's input: its sections' texts, the options
    /// it passes through, and the top buffer's raw CPU pages (decompressed),
    /// so that `write::write_trace_dat` writes it again, in either version.
    /// Instances (`trace-cmd record -B`) are left out.
    ///
    /// ```
    /// use hotkern_tracedat::write::{write_trace_dat, TraceDat, WriteOptions};
    ///
    /// let made = TraceDat { page_size: 4096, cpu_data: vec![vec![0; 4096]; 2], ..TraceDat::default() };
    /// let bytes = write_trace_dat(&made, &WriteOptions::default())?;
    /// let read = hotkern_tracedat::TraceFile::from_bytes(bytes)?.to_trace_dat()?;
    /// assert_eq!(read, made);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn to_trace_dat(&mut self) -> Result<write::TraceDat> {
        let cfg = self.stream_config();
        let mut cpu_data = Vec::new();
        for cpu in self.meta.buffers.first().map_or(&[][..], |b| &b.cpus[..]) {
            let mut stream = CpuStream::new(&mut self.input, 0, cpu, &cfg)?;
            let mut data = Vec::new();
            while let Some(page) = stream.raw_page(&mut self.input)? {
                data.extend_from_slice(&page);
            }
            cpu_data.push(data);
        }
        let t = &self.meta.texts;
        Ok(write::TraceDat {
            page_size: self.meta.page_size,
            header_page: t.header_page.clone(),
            header_event: t.header_event.clone(),
            ftrace_formats: t.ftrace_formats.clone(),
            systems: t.systems.clone(),
            kallsyms: t.kallsyms.clone(),
            printk_formats: t.printk.clone(),
            cmdlines: t.cmdlines.clone(),
            trace_clock: self.meta.trace_clock.clone(),
            uname: self.meta.uname.clone(),
            tracer_version: self.meta.tracer_version.clone(),
            options: t.options.clone(),
            cpu_data,
        })
    }

    fn stream_config(&self) -> StreamConfig {
        StreamConfig {
            big_endian: self.meta.big_endian,
            long_size: usize::from(self.meta.long_size),
            page_size: self.meta.page_size as usize,
            layout: self.meta.header_page,
            codec: self.meta.codec,
        }
    }

    /// A [`Printer`] for this file's records.
    pub fn printer(&self) -> Printer<'_> {
        Printer {
            meta: &self.meta,
            tables: &self.tables,
        }
    }
}

/// Formats records with a file's event formats and symbol tables.
#[cfg(feature = "std")]
#[derive(Clone, Copy)]
pub struct Printer<'a> {
    meta: &'a Metadata,
    tables: &'a Tables,
}

#[cfg(feature = "std")]
impl<'a> Printer<'a> {
    /// The format of the event a record holds.
    pub fn event_of(&self, record: &Record) -> Option<&'a EventFormat> {
        let id = input::read_uint(&record.data, self.meta.big_endian, 2)?;
        self.meta.events.get(&(id as u32))
    }

    /// The pid in a record's common fields.
    pub fn pid_of(&self, record: &Record) -> i32 {
        input::read_uint(record.data.get(4..).unwrap_or(&[]), self.meta.big_endian, 4).unwrap_or(0)
            as i32
    }

    /// Whether the recording machine was big-endian.
    pub fn big_endian(&self) -> bool {
        self.meta.big_endian
    }

    /// The name of buffer `index` (empty for the top buffer).
    pub fn buffer_name(&self, index: usize) -> &'a str {
        self.meta.buffers.get(index).map_or("", |b| b.name.as_str())
    }

    /// The command name trace-cmd shows for `pid`.
    pub fn comm(&self, pid: i32) -> &'a str {
        if pid == 0 {
            return "<idle>";
        }
        self.meta.comms.get(&pid).map_or("<...>", String::as_str)
    }

    /// Appends the event's text (its print format evaluated) to `out`.
    pub fn write_event(&self, event: &EventFormat, record: &Record, out: &mut String) {
        print::write_event(event, &record.data, self.tables, out);
    }
}

/// Records of all CPUs in time-stamp order (an iterator).
#[cfg(feature = "std")]
pub struct Records<'a> {
    input: &'a mut Input,
    streams: Vec<CpuStream>,
    time_offset: i64,
    tsc2nsec: Option<(u32, u32, u64)>,
}

#[cfg(feature = "std")]
impl Records<'_> {
    /// Pages that held an event running past their end, so far.
    pub fn corrupt_pages(&self) -> u64 {
        self.streams.iter().map(|s| s.corrupt_pages).sum()
    }
}

#[cfg(feature = "std")]
impl Iterator for Records<'_> {
    type Item = Result<Record>;

    fn next(&mut self) -> Option<Result<Record>> {
        // The earliest record; on a tie the first buffer's, then the lowest
        // CPU's, as trace-cmd does.
        let mut best: Option<usize> = None;
        for (i, s) in self.streams.iter().enumerate() {
            if let Some(r) = &s.peeked {
                if best.is_none_or(|b| {
                    r.timestamp
                        < self.streams[b]
                            .peeked
                            .as_ref()
                            .map_or(u64::MAX, |p| p.timestamp)
                }) {
                    best = Some(i);
                }
            }
        }
        let stream = &mut self.streams[best?];
        let mut record = stream.peeked.take()?;
        if let Err(e) = stream.advance(self.input) {
            return Some(Err(e));
        }
        if let Some((mult, shift, offset)) = self.tsc2nsec {
            let ns = (u128::from(record.timestamp) * u128::from(mult))
                .checked_shr(shift)
                .unwrap_or(0);
            record.timestamp = (ns as u64).wrapping_add(offset);
        }
        record.timestamp = record.timestamp.wrapping_add(self.time_offset as u64);
        Some(Ok(record))
    }
}
