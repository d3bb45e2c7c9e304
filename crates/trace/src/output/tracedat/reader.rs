//! Reading `trace.dat` v6 (the files our writer and `trace-cmd record` produce).

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use super::pages::{decode_pages, TraceDatPageError};
use super::{TraceDat, MAGIC};
use crate::output::data::TraceData;
use crate::output::format::{EventDescription, FormatError};
use crate::output::symbols::{Comms, Symbols};

/// Why a `trace.dat` could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TraceDatError {
    /// The file does not start with the trace-cmd magic.
    BadMagic,
    /// A version other than 6.
    UnsupportedVersion(String),
    /// Big-endian files or 32-bit longs.
    UnsupportedLayout,
    /// The file ends inside `section`.
    Truncated(&'static str),
    /// A section marker is not where it should be.
    BadSection(&'static str),
    /// `latency` data instead of flyrecord.
    LatencyFormat,
    /// A text section is not UTF-8.
    NotText(&'static str),
    /// An event format does not parse.
    Format(FormatError),
    /// A ring-buffer page does not decode.
    Page {
        /// The CPU whose data holds it.
        cpu: u32,
        /// What is wrong.
        error: TraceDatPageError,
    },
}

impl fmt::Display for TraceDatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TraceDatError::BadMagic => f.write_str("not a trace.dat file (bad magic)"),
            TraceDatError::UnsupportedVersion(v) => {
                write!(f, "unsupported trace.dat version {v:?}")
            }
            TraceDatError::UnsupportedLayout => {
                f.write_str("only little-endian files with 64-bit longs are supported")
            }
            TraceDatError::Truncated(section) => write!(f, "file truncated in {section}"),
            TraceDatError::BadSection(section) => write!(f, "expected section {section}"),
            TraceDatError::LatencyFormat => f.write_str("latency-format files are not supported"),
            TraceDatError::NotText(section) => write!(f, "{section} is not text"),
            TraceDatError::Format(e) => write!(f, "{e}"),
            TraceDatError::Page { cpu, error } => write!(f, "cpu {cpu}: {error}"),
        }
    }
}

// The format and page errors' text is already in Display, so no `source`
// (reporters would print it twice).
impl core::error::Error for TraceDatError {}

struct Cursor<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, section: &'static str) -> Result<&'a [u8], TraceDatError> {
        let end = self
            .at
            .checked_add(n)
            .ok_or(TraceDatError::Truncated(section))?;
        let bytes = self
            .data
            .get(self.at..end)
            .ok_or(TraceDatError::Truncated(section))?;
        self.at = end;
        Ok(bytes)
    }

    fn u16(&mut self, section: &'static str) -> Result<u16, TraceDatError> {
        Ok(u16::from_le_bytes(
            self.take(2, section)?.try_into().unwrap_or_default(),
        ))
    }

    fn u32(&mut self, section: &'static str) -> Result<u32, TraceDatError> {
        Ok(u32::from_le_bytes(
            self.take(4, section)?.try_into().unwrap_or_default(),
        ))
    }

    fn u64(&mut self, section: &'static str) -> Result<u64, TraceDatError> {
        Ok(u64::from_le_bytes(
            self.take(8, section)?.try_into().unwrap_or_default(),
        ))
    }

    fn expect(&mut self, marker: &[u8], section: &'static str) -> Result<(), TraceDatError> {
        if self.take(marker.len(), section)? == marker {
            Ok(())
        } else {
            Err(TraceDatError::BadSection(section))
        }
    }

    fn text(&mut self, n: u64, section: &'static str) -> Result<String, TraceDatError> {
        let n = usize::try_from(n).map_err(|_| TraceDatError::Truncated(section))?;
        let bytes = self.take(n, section)?;
        core::str::from_utf8(bytes)
            .map(String::from)
            .map_err(|_| TraceDatError::NotText(section))
    }

    fn c_string(&mut self, section: &'static str) -> Result<String, TraceDatError> {
        let rest = self
            .data
            .get(self.at..)
            .ok_or(TraceDatError::Truncated(section))?;
        let len = rest
            .iter()
            .position(|&b| b == 0)
            .ok_or(TraceDatError::Truncated(section))?;
        let text = self.text(len as u64, section)?;
        self.at += 1;
        Ok(text)
    }
}

/// Parses a version-6 `trace.dat`. Never panics on bad input.
pub fn read_trace_dat(data: &[u8]) -> Result<TraceDat, TraceDatError> {
    let mut c = Cursor { data, at: 0 };
    if c.take(MAGIC.len(), "magic")
        .map_err(|_| TraceDatError::BadMagic)?
        != MAGIC
    {
        return Err(TraceDatError::BadMagic);
    }
    let version = c.c_string("version")?;
    if version != "6" {
        return Err(TraceDatError::UnsupportedVersion(version));
    }
    let layout = c.take(2, "layout")?;
    if layout != [0, 8] {
        return Err(TraceDatError::UnsupportedLayout);
    }
    let page_size = c.u32("page size")?;
    c.expect(b"header_page\0", "header_page")?;
    let n = c.u64("header_page")?;
    let header_page = c.text(n, "header_page")?;
    c.expect(b"header_event\0", "header_event")?;
    let n = c.u64("header_event")?;
    let header_event = c.text(n, "header_event")?;
    let count = c.u32("ftrace formats")?;
    let mut ftrace_formats = Vec::new();
    for _ in 0..count {
        let n = c.u64("ftrace formats")?;
        ftrace_formats.push(c.text(n, "ftrace formats")?);
    }
    let count = c.u32("event systems")?;
    let mut systems = Vec::new();
    for _ in 0..count {
        let name = c.c_string("event systems")?;
        let events = c.u32("event systems")?;
        let mut formats = Vec::new();
        for _ in 0..events {
            let n = c.u64("event systems")?;
            formats.push(c.text(n, "event systems")?);
        }
        systems.push((name, formats));
    }
    let n = c.u32("kallsyms")?;
    let kallsyms = c.text(u64::from(n), "kallsyms")?;
    let n = c.u32("printk formats")?;
    let printk_formats = c.text(u64::from(n), "printk formats")?;
    let n = c.u64("cmdlines")?;
    let cmdlines = c.text(n, "cmdlines")?;
    let cpus = c.u32("cpu count")?;
    let mut marker = c.take(10, "options")?;
    let mut options = Vec::new();
    if marker == b"options  \0" {
        loop {
            let kind = c.u16("options")?;
            if kind == 0 {
                break;
            }
            let size = c.u32("options")? as usize;
            options.push((kind, c.take(size, "options")?.to_vec()));
        }
        marker = c.take(10, "flyrecord")?;
    }
    if marker == b"latency  \0" {
        return Err(TraceDatError::LatencyFormat);
    }
    if marker != b"flyrecord\0" {
        return Err(TraceDatError::BadSection("flyrecord"));
    }
    let mut cpu_data = Vec::new();
    let mut table = Vec::new();
    for _ in 0..cpus {
        table.push((c.u64("cpu table")?, c.u64("cpu table")?));
    }
    for (offset, size) in table {
        let start = usize::try_from(offset).map_err(|_| TraceDatError::Truncated("cpu data"))?;
        let size = usize::try_from(size).map_err(|_| TraceDatError::Truncated("cpu data"))?;
        let end = start
            .checked_add(size)
            .ok_or(TraceDatError::Truncated("cpu data"))?;
        cpu_data.push(
            data.get(start..end)
                .ok_or(TraceDatError::Truncated("cpu data"))?
                .to_vec(),
        );
    }
    Ok(TraceDat {
        page_size,
        header_page,
        header_event,
        ftrace_formats,
        systems,
        kallsyms,
        printk_formats,
        cmdlines,
        options,
        cpu_data,
    })
}

/// Parses `printk_formats` text: `0xaddr : "format"` lines.
pub(crate) fn parse_printk_formats(text: &str) -> impl Iterator<Item = (u64, String)> + '_ {
    text.lines().filter_map(|line| {
        let (address, format) = line.split_once(" : ")?;
        let address = u64::from_str_radix(address.trim().trim_start_matches("0x"), 16).ok()?;
        let format = format.trim().strip_prefix('"')?.strip_suffix('"')?;
        Some((address, unescape(format)))
    })
}

fn unescape(text: &str) -> String {
    let mut out = String::new();
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('"') => out.push('"'),
            Some('\\') => out.push('\\'),
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    out
}

impl TraceDat {
    /// Decodes the file into a printable [`TraceData`].
    pub fn to_trace_data(&self) -> Result<TraceData, TraceDatError> {
        let mut trace = TraceData::new(self.cpu_data.len() as u32);
        for text in &self.ftrace_formats {
            trace
                .add_event(EventDescription::parse("ftrace", text).map_err(TraceDatError::Format)?);
        }
        for (system, formats) in &self.systems {
            for text in formats {
                trace.add_event(
                    EventDescription::parse(system, text).map_err(TraceDatError::Format)?,
                );
            }
        }
        trace.symbols = Symbols::from_kallsyms(&self.kallsyms);
        trace.comms = Comms::from_saved_cmdlines(&self.cmdlines);
        trace.printk_formats = parse_printk_formats(&self.printk_formats).collect();
        let mut streams = Vec::new();
        for (cpu, data) in self.cpu_data.iter().enumerate() {
            let cpu = cpu as u32;
            streams.push(
                decode_pages(cpu, data, self.page_size as usize)
                    .map_err(|error| TraceDatError::Page { cpu, error })?,
            );
        }
        trace.merge(streams);
        trace.entries_written = trace.event_count() as u64;
        Ok(trace)
    }
}
