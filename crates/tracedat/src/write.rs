//! Writing trace.dat, version 6 or 7, from plain inputs: the per-CPU
//! ring-buffer pages and the texts tracefs shows (header page and event,
//! event formats, kallsyms, printk formats, saved cmdlines). Nothing here
//! knows who recorded the pages; a Linux tracefs copy and hotkern's
//! recorder are written the same way.
//!
//! Version 6 is one fixed run of sections, an option list and the
//! `flyrecord` CPU table. Version 7 (trace-cmd 3.x) puts each part in a
//! section with a 16-byte header, finds them through option lists chained
//! by offsets, and may compress sections and CPU data with zlib or zstd.
//! The layouts are described in trace-cmd's `trace.dat(5)` man page and
//! follow what trace-cmd 3.1 writes (checked with `trace-cmd dump`).
//!
//! This module needs only `alloc`: a kernel without `std` writes
//! uncompressed files with it; compression needs the `std` feature.
//!
//! ```
//! use hotkern_tracedat::write::{write_trace_dat, Compression, FileVersion, TraceDat, WriteOptions};
//!
//! let file = TraceDat { page_size: 4096, cpu_data: vec![vec![0; 4096]], ..TraceDat::default() };
//! let v6 = write_trace_dat(&file, &WriteOptions::default()).unwrap();
//! assert_eq!(&v6[..13], b"\x17\x08\x44tracing6\0\0");
//! let options = WriteOptions { version: FileVersion::V7, compression: Compression::None };
//! let v7 = write_trace_dat(&file, &options).unwrap();
//! assert_eq!(&v7[..24], b"\x17\x08\x44tracing7\0\0\x08\0\x10\0\0none\0\0");
//! ```

#[cfg(feature = "std")]
mod stream;
mod v7;

#[cfg(feature = "std")]
pub use stream::{write_trace_dat_v6_streaming, CpuReader, StreamError};

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

/// The file's magic bytes.
const MAGIC: &[u8; 10] = b"\x17\x08\x44tracing";

/// trace-cmd's option ids (`enum tracecmd_option_id` in trace-cmd.h), for
/// the writer and the reader alike; the writer uses a few.
#[cfg_attr(not(feature = "std"), allow(dead_code))]
pub(crate) mod opt {
    pub const DONE: u16 = 0;
    pub const DATE: u16 = 1;
    pub const CPUSTAT: u16 = 2;
    pub const BUFFER: u16 = 3;
    pub const TRACECLOCK: u16 = 4;
    pub const UNAME: u16 = 5;
    pub const HOOK: u16 = 6;
    pub const OFFSET: u16 = 7;
    pub const CPUCOUNT: u16 = 8;
    pub const VERSION: u16 = 9;
    pub const PROCMAPS: u16 = 10;
    pub const TRACEID: u16 = 11;
    pub const TIME_SHIFT: u16 = 12;
    pub const GUEST: u16 = 13;
    pub const TSC2NSEC: u16 = 14;
    pub const STRINGS: u16 = 15;
    pub const HEADER_INFO: u16 = 16;
    pub const FTRACE_EVENTS: u16 = 17;
    pub const EVENT_FORMATS: u16 = 18;
    pub const KALLSYMS: u16 = 19;
    pub const PRINTK: u16 = 20;
    pub const CMDLINES: u16 = 21;
    pub const BUFFER_TEXT: u16 = 22;
}

/// What goes into a trace.dat: texts as tracefs shows them and each CPU's
/// raw ring-buffer pages. Little-endian, 64-bit longs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TraceDat {
    /// Ring-buffer page size (`getpagesize()` on Linux).
    pub page_size: u32,
    /// Text of `events/header_page`.
    pub header_page: String,
    /// Text of `events/header_event`.
    pub header_event: String,
    /// Format texts of the `ftrace` system's events.
    pub ftrace_formats: Vec<String>,
    /// Other systems: name and the format texts of its events.
    pub systems: Vec<(String, Vec<String>)>,
    /// `/proc/kallsyms` text.
    pub kallsyms: String,
    /// `printk_formats` text (`0xaddr : "format"` lines).
    pub printk_formats: String,
    /// `saved_cmdlines` text (`pid comm` lines).
    pub cmdlines: String,
    /// The `trace_clock` file's text, the clock in use in brackets
    /// (`[local] global counter`); none writes no clock option and names
    /// the clock `local` where version 7 needs a name.
    pub trace_clock: Option<String>,
    /// `uname -a` of the traced machine.
    pub uname: Option<String>,
    /// The version of the program that wrote the file.
    pub tracer_version: Option<String>,
    /// Further options as (trace-cmd option id, data), written as given,
    /// except the ones the layout itself decides (CPU count, buffers,
    /// section offsets), which are left out: `cpu_data` says those.
    pub options: Vec<(u16, Vec<u8>)>,
    /// Each CPU's raw ring-buffer pages, back to back.
    pub cpu_data: Vec<Vec<u8>>,
}

/// The file version to write.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum FileVersion {
    /// Version 6: what trace-cmd 2.x writes and every reader knows.
    #[default]
    V6,
    /// Version 7: trace-cmd 3.x's sections, optionally compressed.
    V7,
}

/// How version 7 compresses its sections and CPU data.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Compression {
    /// Not compressed (the file header says `none`).
    #[default]
    None,
    /// zlib streams (flate2).
    #[cfg(feature = "std")]
    Zlib,
    /// zstd frames (ruzstd's encoder).
    #[cfg(feature = "std")]
    Zstd,
}

/// How to write: version and compression.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteOptions {
    /// The file version; 6 unless asked.
    pub version: FileVersion,
    /// Compression, version 7 only.
    pub compression: Compression,
}

/// Why a trace.dat could not be written.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum WriteError {
    /// Compression was asked for a version 6 file, which has none.
    CompressionNeedsVersion7,
    /// A page size of zero.
    NoPageSize,
    /// The named part is larger than its length field can say.
    TooLarge(&'static str),
}

impl fmt::Display for WriteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WriteError::CompressionNeedsVersion7 => {
                f.write_str("compression needs trace.dat version 7")
            }
            WriteError::NoPageSize => f.write_str("the page size is zero"),
            WriteError::TooLarge(what) => write!(f, "{what} is too large for trace.dat"),
        }
    }
}

impl core::error::Error for WriteError {}

/// Serialises `file` as trace.dat of the version and compression
/// `options` ask for. Each CPU's data starts page-aligned.
///
/// ```
/// use hotkern_tracedat::write::{write_trace_dat, TraceDat, WriteError, WriteOptions};
///
/// let empty = TraceDat::default();
/// assert_eq!(write_trace_dat(&empty, &WriteOptions::default()), Err(WriteError::NoPageSize));
/// ```
pub fn write_trace_dat(file: &TraceDat, options: &WriteOptions) -> Result<Vec<u8>, WriteError> {
    if file.page_size == 0 {
        return Err(WriteError::NoPageSize);
    }
    match options.version {
        FileVersion::V6 if options.compression != Compression::None => {
            Err(WriteError::CompressionNeedsVersion7)
        }
        FileVersion::V6 => write_v6(file),
        FileVersion::V7 => v7::write(file, options.compression),
    }
}

impl TraceDat {
    /// The options both versions carry in their option lists: clock,
    /// uname, version, then the caller's.
    fn plain_options(&self) -> Vec<(u16, Vec<u8>)> {
        let mut options = Vec::new();
        let texts = [
            (opt::TRACECLOCK, &self.trace_clock),
            (opt::UNAME, &self.uname),
            (opt::VERSION, &self.tracer_version),
        ];
        for (kind, text) in texts {
            if let Some(text) = text {
                options.push((kind, c_string(text)));
            }
        }
        let derived = |kind: &u16| {
            matches!(
                *kind,
                opt::DONE | opt::BUFFER | opt::CPUCOUNT | opt::STRINGS | opt::BUFFER_TEXT
            ) || (opt::HEADER_INFO..=opt::CMDLINES).contains(kind)
        };
        let given = self.options.iter().filter(|(kind, _)| !derived(kind));
        options.extend(given.cloned());
        options
    }

    /// The clock name in brackets in `trace_clock`, `local` without one.
    fn clock_name(&self) -> &str {
        self.trace_clock
            .as_deref()
            .and_then(|text| {
                let open = text.find('[')?;
                let close = text[open..].find(']')? + open;
                Some(&text[open + 1..close])
            })
            .unwrap_or("local")
    }
}

fn c_string(text: &str) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(text.len() + 1);
    bytes.extend_from_slice(text.as_bytes());
    bytes.push(0);
    bytes
}

/// Little-endian appends with checked length fields.
pub(crate) struct Out {
    pub(crate) bytes: Vec<u8>,
}

impl Out {
    pub(crate) fn u16(&mut self, v: u16) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }

    pub(crate) fn u32(&mut self, v: u32) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }

    pub(crate) fn u64(&mut self, v: u64) {
        self.bytes.extend_from_slice(&v.to_le_bytes());
    }

    pub(crate) fn raw(&mut self, bytes: &[u8]) {
        self.bytes.extend_from_slice(bytes);
    }

    /// `len` as a u32 length field, or the named part is too large.
    pub(crate) fn len32(&mut self, len: usize, what: &'static str) -> Result<(), WriteError> {
        self.u32(u32::try_from(len).map_err(|_| WriteError::TooLarge(what))?);
        Ok(())
    }

    /// `u32 size` + text.
    pub(crate) fn text32(&mut self, text: &str, what: &'static str) -> Result<(), WriteError> {
        self.len32(text.len(), what)?;
        self.raw(text.as_bytes());
        Ok(())
    }

    /// `u64 size` + text.
    pub(crate) fn text64(&mut self, text: &str) {
        self.u64(text.len() as u64);
        self.raw(text.as_bytes());
    }

    /// Zeroes up to the next multiple of `align`.
    pub(crate) fn align(&mut self, align: usize) {
        let aligned = self.bytes.len().div_ceil(align) * align;
        self.bytes.resize(aligned, 0);
    }

    /// Overwrites the u64 at `at` (a placeholder written earlier).
    pub(crate) fn patch_u64(&mut self, at: usize, v: u64) {
        self.bytes[at..at + 8].copy_from_slice(&v.to_le_bytes());
    }

    /// The initial header both versions share: magic, version, endianness,
    /// long size and page size.
    pub(crate) fn file_header(&mut self, version: &[u8], page_size: u32) {
        self.raw(MAGIC);
        self.raw(version);
        self.raw(&[0, 8]); // little-endian, 8-byte longs
        self.u32(page_size);
    }

    /// `header_page` and `header_event`, each `name\0` + u64 size + text.
    pub(crate) fn headers(&mut self, file: &TraceDat) {
        self.raw(b"header_page\0");
        self.text64(&file.header_page);
        self.raw(b"header_event\0");
        self.text64(&file.header_event);
    }

    /// u32 count, then each ftrace format as u64 size + text.
    pub(crate) fn ftrace_events(&mut self, file: &TraceDat) -> Result<(), WriteError> {
        self.len32(file.ftrace_formats.len(), "the ftrace event list")?;
        for format in &file.ftrace_formats {
            self.text64(format);
        }
        Ok(())
    }

    /// u32 count of systems, each `name\0` + u32 count + formats.
    pub(crate) fn event_systems(&mut self, file: &TraceDat) -> Result<(), WriteError> {
        self.len32(file.systems.len(), "the event system list")?;
        for (system, formats) in &file.systems {
            self.raw(&c_string(system));
            self.len32(formats.len(), "an event system")?;
            for format in formats {
                self.text64(format);
            }
        }
        Ok(())
    }

    /// One option: u16 id, u32 size, data.
    pub(crate) fn option(&mut self, kind: u16, data: &[u8]) -> Result<(), WriteError> {
        self.u16(kind);
        self.len32(data.len(), "an option")?;
        self.raw(data);
        Ok(())
    }
}

fn write_v6(file: &TraceDat) -> Result<Vec<u8>, WriteError> {
    let sizes: Vec<u64> = file.cpu_data.iter().map(|d| d.len() as u64).collect();
    let (mut bytes, offsets) = v6_head(file, &sizes)?;
    for (data, offset) in file.cpu_data.iter().zip(offsets) {
        bytes.resize(offset as usize, 0);
        bytes.extend_from_slice(data);
    }
    Ok(bytes)
}

/// Version 6 up to its CPU data: every section, the options and the
/// `flyrecord` table for CPUs of `sizes` bytes; and where each CPU's data
/// starts (page-aligned, after the previous CPU's). The in-memory and the
/// streaming writer both lay the file out here.
fn v6_head(file: &TraceDat, sizes: &[u64]) -> Result<(Vec<u8>, Vec<u64>), WriteError> {
    let mut out = Out { bytes: Vec::new() };
    out.file_header(b"6\0", file.page_size);
    out.headers(file);
    out.ftrace_events(file)?;
    out.event_systems(file)?;
    out.text32(&file.kallsyms, "kallsyms")?;
    out.text32(&file.printk_formats, "printk formats")?;
    out.text64(&file.cmdlines);
    out.len32(sizes.len(), "the CPU count")?;
    out.raw(b"options  \0");
    for (kind, data) in file.plain_options() {
        out.option(kind, &data)?;
    }
    out.u16(opt::DONE);
    out.raw(b"flyrecord\0");
    // The offsets table comes first; the data follows, page-aligned.
    let page = u64::from(file.page_size);
    let aligned = |at: u64| at.checked_next_multiple_of(page);
    let too_large = WriteError::TooLarge("the CPU data");
    let table_end = out.bytes.len() as u64 + 16 * sizes.len() as u64;
    let mut offset = aligned(table_end).ok_or(too_large.clone())?;
    let mut offsets = Vec::with_capacity(sizes.len());
    for &size in sizes {
        out.u64(offset);
        out.u64(size);
        offsets.push(offset);
        offset = offset
            .checked_add(size)
            .and_then(aligned)
            .ok_or(too_large.clone())?;
    }
    Ok((out.bytes, offsets))
}
