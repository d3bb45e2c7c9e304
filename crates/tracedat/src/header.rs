//! The metadata of a trace.dat: the initial header, then (version 6) a
//! fixed sequence of sections and an option list, or (version 7) sections
//! and options located through option lists chained by offsets.

use std::collections::HashMap;

use crate::compress::Codec;
use crate::error::{Error, Result};
use crate::format::{parse_field, EventFormat};
use crate::input::{Bytes, Cursor, Input, Seq};
use crate::print::Tables;
use crate::symbols::{parse_cmdlines, parse_printk, Kallsyms};
use crate::write::opt;

/// Where one CPU's ring-buffer pages are in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuData {
    /// The CPU number.
    pub cpu: u32,
    /// File offset of the data.
    pub offset: u64,
    /// Bytes of data in the file (compressed size for compressed files).
    pub size: u64,
}

/// A trace buffer: the top one or an instance (`trace-cmd record -B`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Buffer {
    /// The instance name; empty for the top buffer.
    pub name: String,
    /// The trace clock, where the file records it.
    pub clock: Option<String>,
    /// The CPUs' data.
    pub cpus: Vec<CpuData>,
}

/// Everything the file says about itself, apart from the CPU data.
#[derive(Clone, Debug, Default)]
pub struct Metadata {
    /// 6 or 7.
    pub version: u32,
    /// Byte order of the recording machine.
    pub big_endian: bool,
    /// `sizeof(long)` of the recording kernel.
    pub long_size: u8,
    /// Ring-buffer page size.
    pub page_size: u32,
    /// CPUs traced.
    pub cpu_count: u32,
    /// Event formats by id.
    pub events: HashMap<u32, EventFormat>,
    /// Saved command lines by pid (read with [`crate::Printer::comm`]).
    pub(crate) comms: HashMap<i32, String>,
    /// Kernel symbols.
    pub kallsyms: Kallsyms,
    /// The top buffer and any instances.
    pub buffers: Vec<Buffer>,
    /// `uname -a` of the recording machine.
    pub uname: Option<String>,
    /// The trace-cmd version that wrote the file.
    pub tracer_version: Option<String>,
    /// The trace_clock file's contents (`[local] global ...`).
    pub trace_clock: Option<String>,
    /// Per-CPU statistics text.
    pub cpustats: Vec<String>,
    /// Added to every time stamp (`OFFSET` option).
    pub time_offset: i64,
    /// TSC to nanoseconds: multiplier, shift, offset.
    /// Record time stamps are converted with it as they are read.
    pub(crate) tsc2nsec: Option<(u32, u32, u64)>,
    /// Options seen that this reader does not interpret.
    pub unknown_options: usize,
    pub(crate) header_page: HeaderPage,
    pub(crate) codec: Option<Codec>,
    pub(crate) printk: HashMap<u64, String>,
    /// The sections as the file holds them, for [`crate::TraceFile::to_trace_dat`].
    pub(crate) texts: Texts,
}

/// The metadata sections' texts as read (decompressed), and the options
/// the reader passes through, so a file can be written again.
#[derive(Clone, Debug, Default)]
pub(crate) struct Texts {
    pub(crate) header_page: String,
    pub(crate) header_event: String,
    pub(crate) ftrace_formats: Vec<String>,
    pub(crate) systems: Vec<(String, Vec<String>)>,
    pub(crate) kallsyms: String,
    pub(crate) printk: String,
    pub(crate) cmdlines: String,
    /// Options other than those the layout decides (buffers, CPU count,
    /// section offsets) and those kept as fields (clock, uname, version).
    pub(crate) options: Vec<(u16, Vec<u8>)>,
}

/// The ring-buffer page layout from `header_page`.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct HeaderPage {
    pub(crate) commit_offset: usize,
    pub(crate) commit_size: usize,
    pub(crate) data_offset: usize,
}

impl Metadata {
    pub(crate) fn tables(&self) -> Tables {
        Tables {
            big_endian: self.big_endian,
            long_size: usize::from(self.long_size),
            kallsyms: self.kallsyms.clone(),
            printk: self.printk.clone(),
        }
    }
}

pub(crate) fn read(input: &mut Input) -> Result<Metadata> {
    let head = input.read_upto(0, 64)?;
    if head.len() < 10 || head[..3] != [0x17, 0x08, 0x44] || &head[3..10] != b"tracing" {
        return Err(Error::BadMagic);
    }
    let (version, mut at) = input.cstr_at(10, "version")?;
    let fixed = input.read_at(at, 6, "file header")?;
    at += 6;
    let mut m = Metadata {
        big_endian: fixed[0] != 0,
        long_size: fixed[1],
        ..Metadata::default()
    };
    m.page_size = Bytes::new(&fixed[2..], m.big_endian, "file header").u32()?;
    if !matches!(m.long_size, 4 | 8) || !(64..=(1 << 24)).contains(&m.page_size) {
        return Err(Error::Corrupt(format!(
            "long size {} page size {}",
            m.long_size, m.page_size
        )));
    }
    match version.as_str() {
        "6" => {
            m.version = 6;
            read_v6(input, at, &mut m)?;
        }
        "7" => {
            m.version = 7;
            read_v7(input, at, &mut m)?;
        }
        other => return Err(Error::UnsupportedVersion(other.to_string())),
    }
    Ok(m)
}

fn read_v6(input: &mut Input, at: u64, m: &mut Metadata) -> Result<()> {
    let mut c = Seq {
        input,
        at,
        big_endian: m.big_endian,
    };
    // header_page and header_event, each "name\0" + u64 size + text.
    let mut headers = Vec::new();
    for what in ["header_page", "header_event"] {
        let name = c.cstr()?;
        if name != what {
            return Err(Error::Corrupt(format!("expected {what}, found {name:?}")));
        }
        let len = c.u64()?;
        headers.push(c.block(len)?);
    }
    m.header_page = parse_header_page(&headers[0], m.long_size);
    m.texts.header_page = String::from_utf8_lossy(&headers[0]).into_owned();
    m.texts.header_event = String::from_utf8_lossy(&headers[1]).into_owned();
    read_ftrace_events(&mut c, m)?;
    read_event_systems(&mut c, m)?;
    let ksyms = c.u32()?;
    read_kallsyms(&c.block(u64::from(ksyms))?, m);
    let printk = c.u32()?;
    read_printk(&c.block(u64::from(printk))?, m);
    let cmdlines = c.u64()?;
    read_cmdlines(&c.block(cmdlines)?, m);
    m.cpu_count = c.u32()?;
    let mut kind = String::from_utf8_lossy(&c.block(10)?).into_owned();
    let mut v6_buffers = Vec::new();
    if kind.starts_with("options") {
        loop {
            let id = c.u16()?;
            if id == opt::DONE {
                break;
            }
            let size = c.u32()?;
            let data = c.block(u64::from(size))?;
            if id == opt::BUFFER {
                // Version 6 names the instance and points at its
                // "flyrecord" per-CPU offset table.
                let mut ob = Bytes::new(&data, m.big_endian, "buffer option");
                let offset = ob.u64()?;
                v6_buffers.push((ob.cstr()?, offset));
            } else {
                apply_option(id, &data, m)?;
            }
        }
        kind = String::from_utf8_lossy(&c.block(10)?).into_owned();
    }
    if !kind.starts_with("flyrecord") {
        // "latency" files hold text, not ring-buffer pages.
        return Err(Error::Corrupt(format!(
            "unsupported data kind {:?}",
            kind.trim_end_matches('\0')
        )));
    }
    let top = Buffer {
        name: String::new(),
        clock: m.trace_clock.as_deref().and_then(selected_clock),
        cpus: cpu_table(&mut c, m.cpu_count)?,
    };
    m.buffers.push(top);
    for (name, offset) in v6_buffers {
        // trace-cmd writes "flyrecord\0" before the instance's table.
        c.at = offset;
        if !c.block(10)?.starts_with(b"flyrecord") {
            c.at = offset;
        }
        let cpus = cpu_table(&mut c, m.cpu_count)?;
        m.buffers.push(Buffer {
            name,
            clock: None,
            cpus,
        });
    }
    Ok(())
}

fn read_kallsyms(text: &[u8], m: &mut Metadata) {
    m.texts.kallsyms = String::from_utf8_lossy(text).into_owned();
    m.kallsyms = Kallsyms::parse(&m.texts.kallsyms);
}

fn read_printk(text: &[u8], m: &mut Metadata) {
    m.texts.printk = String::from_utf8_lossy(text).into_owned();
    m.printk = parse_printk(&m.texts.printk);
}

fn read_cmdlines(text: &[u8], m: &mut Metadata) {
    m.texts.cmdlines = String::from_utf8_lossy(text).into_owned();
    m.comms = parse_cmdlines(&m.texts.cmdlines);
}

fn cpu_table(b: &mut impl Cursor, count: u32) -> Result<Vec<CpuData>> {
    let mut cpus = Vec::new();
    for cpu in 0..count {
        let offset = b.u64()?;
        let size = b.u64()?;
        cpus.push(CpuData { cpu, offset, size });
    }
    Ok(cpus)
}

/// The clock in brackets in trace_clock's text.
fn selected_clock(text: &str) -> Option<String> {
    let start = text.find('[')?;
    let end = text[start..].find(']')? + start;
    Some(text[start + 1..end].to_string())
}

fn parse_header_page(text: &[u8], long_size: u8) -> HeaderPage {
    let text = String::from_utf8_lossy(text);
    let mut page = HeaderPage {
        commit_offset: 8,
        commit_size: usize::from(long_size),
        data_offset: 8 + usize::from(long_size),
    };
    for line in text.lines() {
        let Some(field) = parse_field(line.trim()) else {
            continue;
        };
        match field.name.as_str() {
            "commit" => {
                page.commit_offset = field.offset;
                page.commit_size = field.size;
            }
            "data" => page.data_offset = field.offset,
            _ => {}
        }
    }
    page
}

fn read_ftrace_events(b: &mut impl Cursor, m: &mut Metadata) -> Result<()> {
    let count = b.u32()?;
    for _ in 0..count {
        let len = b.u64()?;
        let text = String::from_utf8_lossy(&b.block(len)?).into_owned();
        if let Ok(e) = EventFormat::parse_keeping_failed("ftrace", &text) {
            m.events.insert(e.id, e);
        }
        m.texts.ftrace_formats.push(text);
    }
    Ok(())
}

fn read_event_systems(b: &mut impl Cursor, m: &mut Metadata) -> Result<()> {
    let systems = b.u32()?;
    for _ in 0..systems {
        let system = b.cstr()?;
        let count = b.u32()?;
        let mut texts = Vec::new();
        for _ in 0..count {
            let len = b.u64()?;
            let text = String::from_utf8_lossy(&b.block(len)?).into_owned();
            // A format with a line libtraceevent cannot read still names
            // its event: trace-cmd prints its records as failed to parse.
            if let Ok(e) = EventFormat::parse_keeping_failed(&system, &text) {
                m.events.insert(e.id, e);
            }
            texts.push(text);
        }
        m.texts.systems.push((system, texts));
    }
    Ok(())
}

fn cstring(data: &[u8]) -> String {
    let end = data.iter().position(|&b| b == 0).unwrap_or(data.len());
    String::from_utf8_lossy(&data[..end]).into_owned()
}

/// Options both versions share.
fn apply_option(id: u16, data: &[u8], m: &mut Metadata) -> Result<()> {
    let mut b = Bytes::new(data, m.big_endian, "option");
    if !matches!(
        id,
        opt::TRACECLOCK | opt::UNAME | opt::VERSION | opt::CPUCOUNT
    ) {
        m.texts.options.push((id, data.to_vec()));
    }
    match id {
        opt::TRACECLOCK => m.trace_clock = Some(cstring(data)),
        opt::UNAME => m.uname = Some(cstring(data)),
        opt::VERSION => m.tracer_version = Some(cstring(data)),
        opt::CPUSTAT => m.cpustats.push(cstring(data)),
        opt::CPUCOUNT => m.cpu_count = b.u32()?,
        opt::OFFSET => {
            // Text, read as trace-cmd reads it (strtoll, base from prefix);
            // several add up.
            let text = cstring(data);
            let offset = crate::print::parse_c_number(text.trim()).unwrap_or(0) as i64;
            m.time_offset = m.time_offset.wrapping_add(offset);
        }
        opt::TSC2NSEC => {
            let mult = b.u32()?;
            let shift = b.u32()?;
            let offset = b.u64()?;
            m.tsc2nsec = Some((mult, shift, offset));
        }
        opt::DATE | opt::HOOK | opt::PROCMAPS | opt::TRACEID | opt::TIME_SHIFT | opt::GUEST => {}
        _ => m.unknown_options += 1,
    }
    Ok(())
}

/// Version 7: after the header comes the compression name and version and
/// the offset of the first option list.
fn read_v7(input: &mut Input, at: u64, m: &mut Metadata) -> Result<()> {
    let (codec, at) = input.cstr_at(at, "compression")?;
    let (_codec_version, at) = input.cstr_at(at, "compression")?;
    m.codec = Codec::from_name(&codec)?;
    let raw = input.read_at(at, 8, "file header")?;
    let mut next = Bytes::new(&raw, m.big_endian, "file header").u64()?;
    let mut seen = Vec::new();
    let mut header_page = None;
    let mut buffers = Vec::new();
    while next != 0 {
        // A corrupt chain could loop; every list is read once.
        if seen.contains(&next) || seen.len() > 4096 {
            return Err(Error::Corrupt("option lists loop".into()));
        }
        seen.push(next);
        let (id, data) = read_section(input, m, next)?;
        if id != opt::DONE {
            return Err(Error::Corrupt(format!(
                "section {id} where options were expected"
            )));
        }
        next = 0;
        let mut b = Bytes::new(&data, m.big_endian, "options");
        while b.remaining() >= 6 {
            let id = b.u16()?;
            let size = b.u32()?;
            let body = b.take(u64::from(size))?;
            let mut ob = Bytes::new(body, m.big_endian, "option");
            match id {
                opt::DONE => {
                    next = ob.u64()?;
                    break;
                }
                opt::HEADER_INFO => header_page = Some(read_headers(input, m, ob.u64()?)?),
                opt::FTRACE_EVENTS => {
                    let (_, s) = read_section(input, m, ob.u64()?)?;
                    read_ftrace_events(&mut Bytes::new(&s, m.big_endian, "ftrace events"), m)?;
                }
                opt::EVENT_FORMATS => {
                    let (_, s) = read_section(input, m, ob.u64()?)?;
                    read_event_systems(&mut Bytes::new(&s, m.big_endian, "event formats"), m)?;
                }
                opt::KALLSYMS => {
                    let (_, s) = read_section(input, m, ob.u64()?)?;
                    let mut sb = Bytes::new(&s, m.big_endian, "kallsyms");
                    let len = sb.u32()?;
                    read_kallsyms(sb.take(u64::from(len))?, m);
                }
                opt::PRINTK => {
                    let (_, s) = read_section(input, m, ob.u64()?)?;
                    let mut sb = Bytes::new(&s, m.big_endian, "printk");
                    let len = sb.u32()?;
                    read_printk(sb.take(u64::from(len))?, m);
                }
                opt::CMDLINES => {
                    let (_, s) = read_section(input, m, ob.u64()?)?;
                    let mut sb = Bytes::new(&s, m.big_endian, "cmdlines");
                    let len = sb.u64()?;
                    read_cmdlines(sb.take(len)?, m);
                }
                opt::BUFFER => buffers.push(read_buffer_option(&mut ob)?),
                opt::BUFFER_TEXT | opt::STRINGS => {
                    m.unknown_options += usize::from(id == opt::BUFFER_TEXT)
                }
                _ => apply_option(id, body, m)?,
            }
        }
    }
    m.header_page = header_page.ok_or(Error::Corrupt("no header_page section".into()))?;
    // The top buffer first, as trace-cmd reports it.
    buffers.sort_by_key(|b: &Buffer| !b.name.is_empty());
    if m.cpu_count == 0 {
        m.cpu_count = buffers.first().map_or(0, |b| b.cpus.len() as u32);
    }
    m.buffers = buffers;
    Ok(())
}

/// Version 7's BUFFER option: section offset, name, clock, page size,
/// CPU count, then per CPU its id, data offset and size.
fn read_buffer_option(b: &mut Bytes<'_>) -> Result<Buffer> {
    let _section = b.u64()?;
    let name = b.cstr()?;
    let clock = b.cstr()?;
    let _page_size = b.u32()?;
    let count = b.u32()?;
    let mut cpus = Vec::new();
    for _ in 0..count {
        if b.remaining() < 20 {
            return Err(Error::Truncated("buffer option"));
        }
        let cpu = b.u32()?;
        let offset = b.u64()?;
        let size = b.u64()?;
        cpus.push(CpuData { cpu, offset, size });
    }
    Ok(Buffer {
        name,
        clock: Some(clock),
        cpus,
    })
}

/// A version 7 section: `u16 id, u16 flags, u32 name, u64 size`, then the
/// body, compressed when flag bit 0 is set.
pub(crate) fn read_section(input: &mut Input, m: &Metadata, offset: u64) -> Result<(u16, Vec<u8>)> {
    let raw = input.read_at(offset, 16, "section header")?;
    let mut b = Bytes::new(&raw, m.big_endian, "section header");
    let id = b.u16()?;
    let flags = b.u16()?;
    let _name = b.u32()?;
    let size = b.u64()?;
    let body = input.read_at(offset.saturating_add(16), size, "section")?;
    if flags & 1 == 0 {
        return Ok((id, body));
    }
    let codec = m.codec.ok_or(Error::Corrupt(
        "compressed section in an uncompressed file".into(),
    ))?;
    let mut bb = Bytes::new(&body, m.big_endian, "section");
    Ok((id, codec.block(&mut bb)?))
}

fn read_headers(input: &mut Input, m: &mut Metadata, offset: u64) -> Result<HeaderPage> {
    let (_, s) = read_section(input, m, offset)?;
    let mut b = Bytes::new(&s, m.big_endian, "headers");
    let name = b.cstr()?;
    if name != "header_page" {
        return Err(Error::Corrupt(format!(
            "expected header_page, found {name:?}"
        )));
    }
    let len = b.u64()?;
    let text = b.take(len)?;
    m.texts.header_page = String::from_utf8_lossy(text).into_owned();
    // header_event only matters when the file is written again.
    if b.cstr().is_ok_and(|name| name == "header_event") {
        if let Some(event) = b.u64().ok().and_then(|len| b.take(len).ok()) {
            m.texts.header_event = String::from_utf8_lossy(event).into_owned();
        }
    }
    Ok(parse_header_page(text, m.long_size))
}
