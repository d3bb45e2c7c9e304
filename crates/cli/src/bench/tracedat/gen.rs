//! A large trace.dat made from real Linux ring-buffer pages: the version-6
//! corpus traces of hotkern-tracedat (sched, irq, timer, kmem, block,
//! syscalls, net and more, recorded from one running kernel) merged into
//! one file with the union of their event formats, and their CPU data
//! replayed copy after copy onto more CPUs, each page's time stamp moved so
//! every CPU's time runs forward. trace-cmd and hotkern then read events
//! that Linux wrote, of over a hundred formats, not a synthetic few.
//!
//! The version-6 layout is trace-cmd's `trace-cmd.dat(5)`: the initial
//! format, header_page and header_event, ftrace and event formats,
//! kallsyms, printk formats, saved cmdlines, the CPU count, options, then
//! `flyrecord` with one (offset, size) pair per CPU and the page-aligned
//! CPU data.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use hotkern_tracedat::TraceFile;

/// The Linux corpus traces in version 6, uncompressed (the same kernel,
/// so event ids agree between them; checked below all the same).
const SOURCES: [(&str, &[u8]); 6] = [
    (
        "all",
        include_bytes!("../../../../tracedat/tests/corpus/all.v6.dat"),
    ),
    (
        "io",
        include_bytes!("../../../../tracedat/tests/corpus/io.v6.dat"),
    ),
    (
        "mm",
        include_bytes!("../../../../tracedat/tests/corpus/mm.v6.dat"),
    ),
    (
        "net",
        include_bytes!("../../../../tracedat/tests/corpus/net.v6.dat"),
    ),
    (
        "sched",
        include_bytes!("../../../../tracedat/tests/corpus/sched.v6.dat"),
    ),
    (
        "syscalls",
        include_bytes!("../../../../tracedat/tests/corpus/syscalls.v6.dat"),
    ),
];

/// CPUs of the made trace.
pub const CPUS: u32 = 4;

/// Between two replayed traces on the time line, in nanoseconds.
const GAP_NS: u64 = 1_000_000;

/// `BUFFER` option: an instance's CPU data, which the made file has not.
const OPTION_BUFFER: u16 = 3;
/// `CPUCOUNT` option: the CPUs traced, which the made file has more of.
const OPTION_CPUCOUNT: u16 = 8;

/// What was written.
#[derive(Debug, Clone, Copy)]
pub struct Generated {
    /// File size in bytes.
    pub bytes: u64,
    /// Records in the file (the lines `trace-cmd report` prints for
    /// events, dropped-event notices apart).
    pub events: u64,
    /// Distinct event formats the file declares.
    pub formats: usize,
}

/// One source trace's sections, borrowed from its bytes.
struct Source<'a> {
    name: &'a str,
    head: &'a [u8],
    header_page: &'a [u8],
    header_event: &'a [u8],
    ftrace: Vec<&'a [u8]>,
    systems: Vec<(&'a [u8], Vec<&'a [u8]>)>,
    kallsyms: &'a [u8],
    printk: &'a [u8],
    cmdlines: &'a [u8],
    options: Vec<(u16, &'a [u8])>,
    /// Per CPU: its pages.
    cpus: Vec<&'a [u8]>,
    page_size: usize,
    /// Per CPU: records.
    events: Vec<u64>,
    /// Earliest page time stamp and latest record time stamp (raw).
    first: u64,
    last: u64,
}

/// A little-endian cursor over a source (the corpus is x86-64's).
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
    name: &'a str,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: u64) -> Result<&'a [u8], String> {
        let end = usize::try_from(n)
            .ok()
            .and_then(|n| self.pos.checked_add(n))
            .filter(|&end| end <= self.bytes.len())
            .ok_or_else(|| format!("{}: truncated at {}", self.name, self.pos))?;
        let out = &self.bytes[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    fn uint(&mut self, size: u64) -> Result<u64, String> {
        let b = self.take(size)?;
        Ok(b.iter().rev().fold(0, |v, &x| (v << 8) | u64::from(x)))
    }

    fn expect(&mut self, tag: &[u8]) -> Result<(), String> {
        if self.take(tag.len() as u64)? == tag {
            Ok(())
        } else {
            Err(format!(
                "{}: no {:?} at {}",
                self.name,
                String::from_utf8_lossy(tag),
                self.pos
            ))
        }
    }

    fn cstr(&mut self) -> Result<&'a [u8], String> {
        let len = self.bytes[self.pos..]
            .iter()
            .position(|&b| b == 0)
            .ok_or_else(|| format!("{}: unterminated string", self.name))?;
        let s = self.take(len as u64)?;
        self.pos += 1;
        Ok(s)
    }

    /// A `u64`-sized block.
    fn block(&mut self, size_bytes: u64) -> Result<&'a [u8], String> {
        let n = self.uint(size_bytes)?;
        self.take(n)
    }
}

fn parse<'a>(name: &'a str, bytes: &'a [u8]) -> Result<Source<'a>, String> {
    let mut c = Cursor {
        bytes,
        pos: 0,
        name,
    };
    c.expect(b"\x17\x08Dtracing6\0")?;
    let little = c.uint(1)? == 0;
    let long_size = c.uint(1)?;
    let page_size = c.uint(4)? as usize;
    if !little || long_size != 8 || page_size == 0 {
        return Err(format!("{name}: not a little-endian 64-bit trace"));
    }
    let head = &bytes[..c.pos];
    c.expect(b"header_page\0")?;
    let header_page = c.block(8)?;
    c.expect(b"header_event\0")?;
    let header_event = c.block(8)?;
    let ftrace = (0..c.uint(4)?)
        .map(|_| c.block(8))
        .collect::<Result<_, _>>()?;
    let mut systems = Vec::new();
    for _ in 0..c.uint(4)? {
        let system = c.cstr()?;
        let formats = (0..c.uint(4)?)
            .map(|_| c.block(8))
            .collect::<Result<_, _>>()?;
        systems.push((system, formats));
    }
    let kallsyms = c.block(4)?;
    let printk = c.block(4)?;
    let cmdlines = c.block(8)?;
    let cpu_count = c.uint(4)?;
    let mut options = Vec::new();
    loop {
        let tag = c.take(10)?;
        if tag == b"options  \0" {
            loop {
                let id = c.uint(2)? as u16;
                if id == 0 {
                    break;
                }
                options.push((id, c.block(4)?));
            }
        } else if tag == b"flyrecord\0" {
            break;
        } else {
            return Err(format!(
                "{name}: section {:?} not handled",
                String::from_utf8_lossy(tag)
            ));
        }
    }
    let mut cpus = Vec::new();
    for _ in 0..cpu_count {
        let offset = c.uint(8)?;
        let size = c.uint(8)?;
        let mut at = Cursor {
            bytes,
            pos: 0,
            name,
        };
        at.take(offset)?;
        cpus.push(at.take(size)?);
    }
    // Counts and times from hotkern-tracedat's own reading.
    let mut file = TraceFile::from_bytes(bytes.to_vec()).map_err(|e| format!("{name}: {e}"))?;
    let offset = file.metadata().time_offset as u64;
    let mut events = vec![0; cpus.len()];
    let mut last = 0;
    for record in file.records().map_err(|e| format!("{name}: {e}"))? {
        let record = record.map_err(|e| format!("{name}: {e}"))?;
        if let Some(n) = events.get_mut(record.cpu as usize) {
            *n += 1;
        }
        last = last.max(record.timestamp.wrapping_sub(offset));
    }
    let first = cpus
        .iter()
        .flat_map(|data| data.chunks(page_size))
        .filter(|page| page.len() >= 16 && page[8..16] != [0; 8])
        .map(|page| u64::from_le_bytes(page[..8].try_into().unwrap_or_default()))
        .min()
        .unwrap_or(0);
    Ok(Source {
        name,
        head,
        header_page,
        header_event,
        ftrace,
        systems,
        kallsyms,
        printk,
        cmdlines,
        options,
        cpus,
        page_size,
        events,
        first,
        last: last.max(first),
    })
}

/// The `ID:` of an event format's text.
fn format_id(text: &[u8]) -> Option<u32> {
    let text = std::str::from_utf8(text).ok()?;
    let rest = &text[text.find("\nID:")? + 4..];
    rest.lines().next()?.trim().parse().ok()
}

/// The lines of several texts, sorted and once each.
fn merged_lines<'a>(texts: impl Iterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut lines: Vec<&[u8]> = texts
        .flat_map(|t| t.split(|&b| b == b'\n'))
        .filter(|l| !l.is_empty())
        .collect();
    lines.sort_unstable();
    lines.dedup();
    let mut out = Vec::new();
    for line in lines {
        out.extend_from_slice(line);
        out.push(b'\n');
    }
    out
}

/// Moves a page's time stamp, and any absolute time stamp in it, by `by`.
fn shift_page(page: &mut [u8], by: u64) {
    if page.len() < 16 {
        return;
    }
    let ts = u64::from_le_bytes(page[..8].try_into().unwrap_or_default());
    page[..8].copy_from_slice(&ts.wrapping_add(by).to_le_bytes());
    let commit = u64::from_le_bytes(page[8..16].try_into().unwrap_or_default());
    let end = (16 + (commit & ((1 << 27) - 1)) as usize).min(page.len());
    let mut pos = 16;
    while pos + 8 <= end {
        let word = u32::from_le_bytes(page[pos..pos + 4].try_into().unwrap_or_default());
        let array0 = u32::from_le_bytes(page[pos + 4..pos + 8].try_into().unwrap_or_default());
        let (type_len, delta) = (word & 31, word >> 5);
        let len = match type_len {
            // Padding: to the end of the page, or array0 bytes on.
            29 if delta == 0 => break,
            29 | 0 => 4 + array0 as usize,
            30 => 8,
            31 => {
                // An absolute time stamp (Linux's RINGBUF_TYPE_TIME_STAMP):
                // its low 27 bits in the header, the rest in array0.
                let abs = ((u64::from(array0) << 27) | u64::from(delta)).wrapping_add(by);
                let word = ((abs as u32 & ((1 << 27) - 1)) << 5) | 31;
                page[pos..pos + 4].copy_from_slice(&word.to_le_bytes());
                page[pos + 4..pos + 8].copy_from_slice(&((abs >> 27) as u32).to_le_bytes());
                8
            }
            n => 4 + n as usize * 4,
        };
        pos += len.max(4);
    }
}

/// Writes a trace of at least `target` bytes to `path`.
pub fn generate(path: &Path, target: u64) -> Result<Generated, String> {
    let sources: Vec<Source> = SOURCES
        .iter()
        .map(|(name, bytes)| parse(name, bytes))
        .collect::<Result<_, _>>()?;
    let base = &sources[0];
    let page_size = base.page_size;
    // The union of event formats, by system; an id two sources disagree
    // about would print wrongly, so it is refused.
    let mut systems: BTreeMap<&[u8], BTreeMap<u32, &[u8]>> = BTreeMap::new();
    for source in &sources {
        if source.page_size != page_size || source.head != base.head {
            return Err(format!("{}: another machine's trace", source.name));
        }
        for (system, formats) in &source.systems {
            for text in formats {
                let id = format_id(text)
                    .ok_or_else(|| format!("{}: a format without ID", source.name))?;
                let known = systems.entry(system).or_default().entry(id).or_insert(text);
                if *known != *text {
                    return Err(format!("{}: event id {id} means two events", source.name));
                }
            }
        }
    }
    let formats = systems.values().map(BTreeMap::len).sum::<usize>() + base.ftrace.len();

    let mut head = Vec::new();
    head.extend_from_slice(base.head);
    head.extend_from_slice(b"header_page\0");
    head.extend_from_slice(&(base.header_page.len() as u64).to_le_bytes());
    head.extend_from_slice(base.header_page);
    head.extend_from_slice(b"header_event\0");
    head.extend_from_slice(&(base.header_event.len() as u64).to_le_bytes());
    head.extend_from_slice(base.header_event);
    head.extend_from_slice(&(base.ftrace.len() as u32).to_le_bytes());
    for text in &base.ftrace {
        head.extend_from_slice(&(text.len() as u64).to_le_bytes());
        head.extend_from_slice(text);
    }
    head.extend_from_slice(&(systems.len() as u32).to_le_bytes());
    for (system, formats) in &systems {
        head.extend_from_slice(system);
        head.push(0);
        head.extend_from_slice(&(formats.len() as u32).to_le_bytes());
        for text in formats.values() {
            head.extend_from_slice(&(text.len() as u64).to_le_bytes());
            head.extend_from_slice(text);
        }
    }
    let kallsyms = merged_lines(sources.iter().map(|s| s.kallsyms));
    head.extend_from_slice(&(kallsyms.len() as u32).to_le_bytes());
    head.extend_from_slice(&kallsyms);
    let printk = merged_lines(sources.iter().map(|s| s.printk));
    head.extend_from_slice(&(printk.len() as u32).to_le_bytes());
    head.extend_from_slice(&printk);
    let cmdlines = merged_lines(sources.iter().map(|s| s.cmdlines));
    head.extend_from_slice(&(cmdlines.len() as u64).to_le_bytes());
    head.extend_from_slice(&cmdlines);
    head.extend_from_slice(&CPUS.to_le_bytes());
    head.extend_from_slice(b"options  \0");
    let cpu_count = CPUS.to_le_bytes();
    for (id, mut data) in base.options.iter().copied() {
        match id {
            OPTION_BUFFER => continue,
            OPTION_CPUCOUNT => data = &cpu_count,
            _ => {}
        }
        head.extend_from_slice(&id.to_le_bytes());
        head.extend_from_slice(&(data.len() as u32).to_le_bytes());
        head.extend_from_slice(data);
    }
    head.extend_from_slice(&0u16.to_le_bytes());
    head.extend_from_slice(b"flyrecord\0");

    // Target CPU t replays source CPU t mod n of each source, copy after
    // copy; the sources follow each other on the time line.
    let src_cpu = |s: &Source, t: u32| (t as usize) % s.cpus.len().max(1);
    let per_copy: Vec<u64> = (0..CPUS)
        .map(|t| {
            sources
                .iter()
                .map(|s| s.cpus.get(src_cpu(s, t)).map_or(0, |d| d.len() as u64))
                .sum()
        })
        .collect();
    let copy_bytes: u64 = per_copy.iter().sum();
    let copies = target.div_ceil(copy_bytes.max(1)).max(1);
    let table_len = u64::from(CPUS) * 16;
    let data_start = (head.len() as u64 + table_len).next_multiple_of(page_size as u64);
    let mut offset = data_start;
    for size in &per_copy {
        head.extend_from_slice(&offset.to_le_bytes());
        head.extend_from_slice(&(size * copies).to_le_bytes());
        offset += size * copies;
    }
    head.resize(data_start as usize, 0);

    let file = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
    let io = |e: std::io::Error| format!("{}: {e}", path.display());
    out.write_all(&head).map_err(io)?;
    let cycle: u64 = sources.iter().map(|s| s.last - s.first + GAP_NS).sum();
    let mut events = 0;
    let mut page = vec![0; page_size];
    for t in 0..CPUS {
        // A CPU's replay of a source CPU lags the first replay by a few
        // microseconds, so CPUs do not tie.
        let lag = u64::from(t) / 2 * 3_000 + u64::from(t) * 17;
        for copy in 0..copies {
            let mut at = base.first + copy * cycle + lag;
            for source in &sources {
                let cpu = src_cpu(source, t);
                let by = at.wrapping_sub(source.first);
                for chunk in source
                    .cpus
                    .get(cpu)
                    .map_or(&[][..], |d| *d)
                    .chunks(page_size)
                {
                    page[..chunk.len()].copy_from_slice(chunk);
                    shift_page(&mut page[..chunk.len()], by);
                    out.write_all(&page[..chunk.len()]).map_err(io)?;
                }
                events += source.events.get(cpu).copied().unwrap_or(0);
                at += source.last - source.first + GAP_NS;
            }
        }
    }
    out.flush().map_err(io)?;
    Ok(Generated {
        bytes: offset,
        events,
        formats,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The made trace reads back with every record the sources hold,
    /// on all its CPUs, time stamps rising on each.
    #[test]
    fn a_small_trace_reads_back_whole_and_in_order() {
        let path = std::env::temp_dir().join(format!("hotkern-gen-{}.dat", std::process::id()));
        let made = generate(&path, 2 << 20).unwrap();
        let mut file = TraceFile::open(&path).unwrap();
        assert_eq!(file.metadata().cpu_count, CPUS);
        assert!(made.formats >= 100, "{}", made.formats);
        let mut last = vec![0u64; CPUS as usize];
        let mut count = 0;
        let mut unknown = 0;
        let (records, printer) = file.reader().unwrap();
        for record in records {
            let record = record.unwrap();
            let cpu = record.cpu as usize;
            assert!(record.timestamp >= last[cpu], "CPU {cpu} goes back");
            last[cpu] = record.timestamp;
            unknown += u64::from(printer.event_of(&record).is_none());
            count += 1;
        }
        std::fs::remove_file(&path).unwrap();
        assert_eq!(count, made.events);
        assert_eq!(unknown, 0);
        assert!(made.bytes >= 2 << 20);
    }

    /// Where trace-cmd is installed, it prints the made trace as hotkern
    /// does: the file is one trace-cmd reads whole, not one both misread.
    #[test]
    fn trace_cmd_prints_the_made_trace_as_hotkern_does() {
        let path = std::env::temp_dir().join(format!("hotkern-gen-tc-{}.dat", std::process::id()));
        let made = generate(&path, 1 << 20).unwrap();
        let theirs = std::process::Command::new("trace-cmd")
            .args(["report", "-N", "-i"])
            .arg(&path)
            .output();
        let mut ours = Vec::new();
        let mut file = TraceFile::open(&path).unwrap();
        hotkern_tracedat::write_report(&mut file, &Default::default(), &mut ours).unwrap();
        std::fs::remove_file(&path).unwrap();
        let Ok(theirs) = theirs else {
            eprintln!("trace-cmd not installed: comparison skipped");
            return;
        };
        let (theirs, ours) = (
            String::from_utf8_lossy(&theirs.stdout),
            String::from_utf8(ours).unwrap(),
        );
        let records = ours.lines().filter(|l| !l.ends_with("DROPPED]")).count() as u64 - 1;
        assert_eq!(records, made.events);
        for (n, (a, b)) in theirs.lines().zip(ours.lines()).enumerate() {
            assert_eq!(a, b, "line {}", n + 1);
        }
        assert_eq!(theirs.lines().count(), ours.lines().count());
    }

    #[test]
    fn absolute_time_stamps_move_with_the_page() {
        let mut page = vec![0u8; 64];
        page[8] = 8;
        let abs: u64 = 5 << 27 | 7;
        page[16..20].copy_from_slice(&((((abs as u32) & ((1 << 27) - 1)) << 5) | 31).to_le_bytes());
        page[20..24].copy_from_slice(&((abs >> 27) as u32).to_le_bytes());
        shift_page(&mut page, 1 << 27);
        assert_eq!(u64::from_le_bytes(page[..8].try_into().unwrap()), 1 << 27);
        assert_eq!(u32::from_le_bytes(page[20..24].try_into().unwrap()), 6);
        assert_eq!(
            u32::from_le_bytes(page[16..20].try_into().unwrap()),
            (7 << 5) | 31
        );
    }
}
