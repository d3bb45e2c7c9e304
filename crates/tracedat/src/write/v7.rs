//! Version 7: the file header names the compression and points at the
//! first option list; every part is a section (`u16 id, u16 flags, u32
//! name, u64 size`, then the body). Written in the order trace-cmd 3.1
//! writes them: the metadata sections, an option list pointing at them, the
//! `flyrecord` buffer section, a last option list with the BUFFER option,
//! and the strings section holding the section names.

use alloc::vec::Vec;

use super::{c_string, opt, Compression, Out, TraceDat, WriteError};

/// Section flag: the body is a compressed block.
const COMPRESSED: u16 = 1;
/// CPU data is compressed this many pages at a time, so that a reader
/// holds one chunk per CPU, not a CPU's whole data.
const CHUNK_PAGES: usize = 10;

/// A compression codec as version 7 names and applies it.
#[derive(Clone, Copy)]
struct Codec(Compression);

impl Codec {
    /// The name and version the file header carries.
    fn header(self) -> (&'static str, &'static str) {
        match self.0 {
            Compression::None => ("none", ""),
            // trace-cmd checks the name; the version is the format's,
            // which every zlib and zstd decoder reads.
            #[cfg(feature = "std")]
            Compression::Zlib => ("zlib", "1.2.13"),
            #[cfg(feature = "std")]
            Compression::Zstd => ("zstd", "1.5.4"),
        }
    }

    fn active(self) -> bool {
        self.0 != Compression::None
    }

    /// A compressed block: `u32 compressed size, u32 size, data`.
    fn block(self, data: &[u8], out: &mut Out) -> Result<(), WriteError> {
        let packed = self.compress(data);
        out.len32(packed.len(), "a compressed block")?;
        out.len32(data.len(), "a compressed block")?;
        out.raw(&packed);
        Ok(())
    }

    #[cfg_attr(not(feature = "std"), allow(clippy::unused_self))]
    fn compress(self, data: &[u8]) -> Vec<u8> {
        match self.0 {
            Compression::None => data.to_vec(),
            #[cfg(feature = "std")]
            Compression::Zlib => {
                use std::io::Write;
                let mut encoder =
                    flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
                // Writing into a Vec cannot fail.
                let _ = encoder.write_all(data);
                encoder.finish().unwrap_or_default()
            }
            #[cfg(feature = "std")]
            Compression::Zstd => {
                ruzstd::encoding::compress_to_vec(data, ruzstd::encoding::CompressionLevel::Fastest)
            }
        }
    }
}

/// Section names, kept as trace-cmd keeps them: one NUL-terminated string
/// table, each section header holding its name's offset.
struct Strings(Vec<u8>);

impl Strings {
    fn add(&mut self, name: &str) -> u32 {
        let at = self.0.len() as u32;
        self.0.extend_from_slice(&c_string(name));
        at
    }
}

struct Writer {
    out: Out,
    codec: Codec,
    strings: Strings,
}

impl Writer {
    /// Writes a section with `body`, compressed when the file is and
    /// `compress` allows; returns the section's offset.
    fn section(
        &mut self,
        kind: u16,
        name: &str,
        body: &[u8],
        compress: bool,
    ) -> Result<u64, WriteError> {
        let name = self.strings.add(name);
        self.section_named(kind, name, body, compress)
    }

    /// [`Writer::section`] with the name's offset in the strings given.
    fn section_named(
        &mut self,
        kind: u16,
        name: u32,
        body: &[u8],
        compress: bool,
    ) -> Result<u64, WriteError> {
        let at = self.out.bytes.len() as u64;
        let compress = compress && self.codec.active();
        self.out.u16(kind);
        self.out.u16(if compress { COMPRESSED } else { 0 });
        self.out.u32(name);
        if compress {
            let mut block = Out { bytes: Vec::new() };
            self.codec.block(body, &mut block)?;
            self.out.u64(block.bytes.len() as u64);
            self.out.raw(&block.bytes);
        } else {
            self.out.u64(body.len() as u64);
            self.out.raw(body);
        }
        Ok(at)
    }

    /// The body built by `fill`, as a (possibly compressed) section.
    fn part(
        &mut self,
        kind: u16,
        name: &str,
        fill: impl FnOnce(&mut Out) -> Result<(), WriteError>,
    ) -> Result<u64, WriteError> {
        let mut body = Out { bytes: Vec::new() };
        fill(&mut body)?;
        self.section(kind, name, &body.bytes, true)
    }
}

pub(super) fn write(file: &TraceDat, compression: Compression) -> Result<Vec<u8>, WriteError> {
    let codec = Codec(compression);
    let mut w = Writer {
        out: Out { bytes: Vec::new() },
        codec,
        strings: Strings(Vec::new()),
    };
    w.out.file_header(b"7\0", file.page_size);
    let (name, version) = codec.header();
    w.out.raw(&c_string(name));
    w.out.raw(&c_string(version));
    let first_options = w.out.bytes.len();
    w.out.u64(0);

    // The metadata sections, each named by an option of the first list.
    type Fill<'a> = &'a dyn Fn(&mut Out) -> Result<(), WriteError>;
    let parts: [(u16, &str, Fill); 6] = [
        (opt::HEADER_INFO, "headers", &|o| {
            o.headers(file);
            Ok(())
        }),
        (opt::FTRACE_EVENTS, "ftrace events", &|o| {
            o.ftrace_events(file)
        }),
        (opt::EVENT_FORMATS, "events format", &|o| {
            o.event_systems(file)
        }),
        (opt::KALLSYMS, "kallsyms", &|o| {
            o.text32(&file.kallsyms, "kallsyms")
        }),
        (opt::PRINTK, "printk", &|o| {
            o.text32(&file.printk_formats, "printk formats")
        }),
        (opt::CMDLINES, "command lines", &|o| {
            o.text64(&file.cmdlines);
            Ok(())
        }),
    ];
    let mut options: Vec<(u16, Vec<u8>)> = Vec::new();
    for (kind, name, fill) in parts {
        let at = w.part(kind, name, fill)?;
        options.push((kind, at.to_le_bytes().to_vec()));
    }
    options.extend(file.plain_options());
    let cpus = u32::try_from(file.cpu_data.len()).map_err(|_| WriteError::TooLarge("CPU count"))?;
    options.push((opt::CPUCOUNT, cpus.to_le_bytes().to_vec()));

    // The first option list; its DONE option points at the next one,
    // whose offset is known once the CPU data is written.
    let list = w.out.bytes.len() as u64;
    w.out.patch_u64(first_options, list);
    let next = option_list(&mut w, &options)?;

    let (buffer_at, cpu_table) = flyrecord(&mut w, file)?;
    let last = w.out.bytes.len() as u64;
    w.out.patch_u64(next, last);
    let mut buffer = Out { bytes: Vec::new() };
    buffer.u64(buffer_at);
    buffer.raw(b"\0"); // the top buffer has no name
    buffer.raw(&c_string(file.clock_name()));
    buffer.u32(file.page_size);
    buffer.u32(cpus);
    for (cpu, (offset, size)) in cpu_table.iter().enumerate() {
        buffer.u32(cpu as u32);
        buffer.u64(*offset);
        buffer.u64(*size);
    }
    // The last list: its DONE option's next offset stays 0.
    option_list(&mut w, &[(opt::BUFFER, buffer.bytes)])?;

    // The strings section names itself, so its name goes in first.
    let name = w.strings.add("strings");
    let strings = core::mem::take(&mut w.strings.0);
    w.section_named(opt::STRINGS, name, &strings, true)?;
    Ok(w.out.bytes)
}

/// An option list section (id 0, never compressed) ending in DONE, whose
/// u64 (the next list's offset) is left 0; returns where that u64 is.
fn option_list(w: &mut Writer, options: &[(u16, Vec<u8>)]) -> Result<usize, WriteError> {
    let mut body = Out { bytes: Vec::new() };
    for (kind, data) in options {
        body.option(*kind, data)?;
    }
    body.option(opt::DONE, &[0; 8])?;
    let at = w.section(opt::DONE, "options", &body.bytes, false)?;
    Ok(at as usize + 16 + body.bytes.len() - 8)
}

/// The `flyrecord` buffer section: each CPU's pages page-aligned, raw or
/// as `u32 chunk count` and compressed chunks. Returns the section's
/// offset and each CPU's (offset, size); a compressed CPU's size leaves
/// out its chunk count, as trace-cmd's does.
fn flyrecord(w: &mut Writer, file: &TraceDat) -> Result<(u64, Vec<(u64, u64)>), WriteError> {
    let at = w.out.bytes.len();
    let name = w.strings.add("buffer flyrecord ");
    w.out.u16(opt::BUFFER);
    w.out.u16(if w.codec.active() { COMPRESSED } else { 0 });
    w.out.u32(name);
    w.out.u64(0);
    let page = file.page_size as usize;
    let mut table = Vec::new();
    for data in &file.cpu_data {
        w.out.align(page);
        let start = w.out.bytes.len();
        if w.codec.active() {
            let chunks = data.chunks(page * CHUNK_PAGES);
            w.out.len32(chunks.len(), "CPU data")?;
            for chunk in chunks {
                w.codec.block(chunk, &mut w.out)?;
            }
            table.push((start as u64, (w.out.bytes.len() - start - 4) as u64));
        } else {
            w.out.raw(data);
            table.push((start as u64, data.len() as u64));
        }
    }
    let size = (w.out.bytes.len() - at - 16) as u64;
    w.out.patch_u64(at + 8, size);
    Ok((at as u64, table))
}
