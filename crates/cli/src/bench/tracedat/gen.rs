//! A large trace.dat made from real Linux ring-buffer pages: the version-6
//! corpus traces of hotkern-tracedat (sched, irq, timer, kmem, block,
//! syscalls, net and more, recorded from one running kernel) merged into
//! one file with the union of their event formats, and their CPU data
//! replayed copy after copy onto more CPUs, each page's time stamp moved so
//! every CPU's time runs forward. trace-cmd and hotkern then read events
//! that Linux wrote, of over a hundred formats, not a synthetic few.
//!
//! hotkern-tracedat does the file format both ways: its reader takes each
//! source apart into the writer's inputs (`TraceFile::to_trace_dat`) and
//! its streaming writer lays the made file out, each CPU's pages read from
//! a replay as they are written, so the file need not fit in memory.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use hotkern_tracedat::write::{write_trace_dat_v6_streaming, CpuReader, TraceDat};
use hotkern_tracedat::{EventFormat, TraceFile};

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

/// One source trace as the writer's inputs, with what the replay needs.
struct Source<'a> {
    name: &'a str,
    file: TraceDat,
    /// Per CPU: records.
    events: Vec<u64>,
    /// Earliest page time stamp and latest record time stamp (raw).
    first: u64,
    last: u64,
}

fn read_source<'a>(name: &'a str, bytes: &[u8]) -> Result<Source<'a>, String> {
    let fail = |e: hotkern_tracedat::Error| format!("{name}: {e}");
    let mut trace = TraceFile::from_bytes(bytes.to_vec()).map_err(fail)?;
    let meta = trace.metadata();
    // The replay moves time stamps in place, in x86-64's page layout.
    if meta.big_endian || meta.long_size != 8 {
        return Err(format!("{name}: not a little-endian 64-bit trace"));
    }
    let offset = meta.time_offset as u64;
    let file = trace.to_trace_dat().map_err(fail)?;
    let mut events = vec![0; file.cpu_data.len()];
    let mut last = 0;
    for record in trace.records().map_err(fail)? {
        let record = record.map_err(fail)?;
        if let Some(n) = events.get_mut(record.cpu as usize) {
            *n += 1;
        }
        last = last.max(record.timestamp.wrapping_sub(offset));
    }
    let first = file
        .cpu_data
        .iter()
        .flat_map(|data| data.chunks(file.page_size as usize))
        .filter(|page| page.len() >= 16 && page[8..16] != [0; 8])
        .map(|page| u64::from_le_bytes(page[..8].try_into().unwrap_or_default()))
        .min()
        .unwrap_or(0);
    Ok(Source {
        name,
        file,
        events,
        first,
        last: last.max(first),
    })
}

/// The lines of several texts, sorted and once each.
fn merged_lines<'a>(texts: impl Iterator<Item = &'a str>) -> String {
    let mut lines: Vec<&str> = texts
        .flat_map(str::lines)
        .filter(|l| !l.is_empty())
        .collect();
    lines.sort_unstable();
    lines.dedup();
    let mut out = String::new();
    for line in lines {
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// A CPU's data read from its pages as they are made.
struct Pages<I> {
    pages: I,
    page: Vec<u8>,
    pos: usize,
}

impl<I: Iterator<Item = Vec<u8>>> Read for Pages<I> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.pos == self.page.len() {
            match self.pages.next() {
                Some(page) => (self.page, self.pos) = (page, 0),
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.page.len() - self.pos);
        buf[..n].copy_from_slice(&self.page[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

/// The source CPU that target CPU `t` replays: `t` mod the source's CPUs.
fn src_cpu(s: &Source, t: u32) -> usize {
    (t as usize) % s.file.cpu_data.len().max(1)
}

/// The pages target CPU `t` replays of `s`.
fn data_of<'a>(s: &'a Source, t: u32) -> &'a [u8] {
    s.file
        .cpu_data
        .get(src_cpu(s, t))
        .map_or(&[][..], Vec::as_slice)
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
        .map(|(name, bytes)| read_source(name, bytes))
        .collect::<Result<_, _>>()?;
    let base = &sources[0].file;
    let page_size = base.page_size as usize;
    // The union of event formats, by system; an id two sources disagree
    // about would print wrongly, so it is refused.
    let mut systems: BTreeMap<&str, BTreeMap<u32, &String>> = BTreeMap::new();
    for source in &sources {
        if source.file.page_size != base.page_size {
            return Err(format!("{}: another machine's trace", source.name));
        }
        for (system, formats) in &source.file.systems {
            for text in formats {
                let id = EventFormat::parse(system, text)
                    .map_err(|e| format!("{}: {e}", source.name))?
                    .id;
                let known = systems.entry(system).or_default().entry(id).or_insert(text);
                if *known != text {
                    return Err(format!("{}: event id {id} means two events", source.name));
                }
            }
        }
    }
    let formats = systems.values().map(BTreeMap::len).sum::<usize>() + base.ftrace_formats.len();
    let made = TraceDat {
        systems: systems
            .iter()
            .map(|(system, formats)| {
                (
                    system.to_string(),
                    formats.values().map(|t| t.to_string()).collect(),
                )
            })
            .collect(),
        kallsyms: merged_lines(sources.iter().map(|s| s.file.kallsyms.as_str())),
        printk_formats: merged_lines(sources.iter().map(|s| s.file.printk_formats.as_str())),
        cmdlines: merged_lines(sources.iter().map(|s| s.file.cmdlines.as_str())),
        cpu_data: Vec::new(),
        ..base.clone()
    };

    // Target CPU t replays source CPU t mod n of each source, copy after
    // copy; the sources follow each other on the time line.
    let per_copy: Vec<u64> = (0..CPUS)
        .map(|t| sources.iter().map(|s| data_of(s, t).len() as u64).sum())
        .collect();
    let copies = target.div_ceil(per_copy.iter().sum::<u64>().max(1)).max(1);
    // Where each source starts in a copy's stretch of time.
    let mut starts = Vec::new();
    let mut cycle = 0;
    for s in &sources {
        starts.push(cycle);
        cycle += s.last - s.first + GAP_NS;
    }
    let first = sources[0].first;
    let (sources, starts) = (&sources, &starts);
    let cpus = (0..CPUS)
        .map(|t| {
            // A CPU's replay of a source CPU lags the first replay by a few
            // microseconds, so CPUs do not tie.
            let lag = u64::from(t) / 2 * 3_000 + u64::from(t) * 17;
            let pages = (0..copies).flat_map(move |copy| {
                sources.iter().zip(starts).flat_map(move |(source, start)| {
                    let by = (first + copy * cycle + lag + start).wrapping_sub(source.first);
                    data_of(source, t).chunks(page_size).map(move |chunk| {
                        let mut page = chunk.to_vec();
                        shift_page(&mut page, by);
                        page
                    })
                })
            });
            CpuReader {
                size: per_copy[t as usize] * copies,
                data: Pages {
                    pages,
                    page: Vec::new(),
                    pos: 0,
                },
            }
        })
        .collect();
    let events = (0..CPUS)
        .map(|t| {
            let one: u64 = sources
                .iter()
                .map(|s| s.events.get(src_cpu(s, t)).copied().unwrap_or(0))
                .sum();
            one * copies
        })
        .sum();

    let file = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let out = std::io::BufWriter::with_capacity(1 << 20, file);
    let bytes = write_trace_dat_v6_streaming(&made, cpus, out)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(Generated {
        bytes,
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
