//! The writer: corpus traces recorded from Linux are taken apart into the
//! writer's plain inputs, written again as version 6 and as version 7
//! (uncompressed, zlib, zstd), and must print exactly what
//! `trace-cmd report -N` printed for the original, through this crate's
//! reader and through the real trace-cmd where it is installed. The
//! streaming version 6 writer must write the in-memory writer's bytes.

// The trace crate's tests run trace-cmd the same way; one helper serves both.
#[path = "../../trace/tests/common/mod.rs"]
mod common;

use std::io::Read;
use std::path::Path;

use hotkern_tracedat::write::{
    write_trace_dat, write_trace_dat_v6_streaming, Compression, CpuReader, FileVersion,
    StreamError, TraceDat, WriteOptions,
};
use hotkern_tracedat::{write_report, Error, ReportOptions, TraceFile};

/// A minimal version 6 walker, independent of the crate's reader, that
/// turns a file back into the writer's inputs.
struct Walk<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Walk<'a> {
    fn take(&mut self, n: usize) -> &'a [u8] {
        let out = &self.bytes[self.at..self.at + n];
        self.at += n;
        out
    }
    fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.take(2).try_into().unwrap())
    }
    fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take(4).try_into().unwrap())
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take(8).try_into().unwrap())
    }
    fn text(&mut self, n: usize) -> String {
        String::from_utf8(self.take(n).to_vec()).unwrap()
    }
    fn cstr(&mut self) -> String {
        let len = self.bytes[self.at..].iter().position(|&b| b == 0).unwrap();
        let text = self.text(len);
        self.at += 1;
        text
    }
}

fn inputs_of_v6(bytes: &[u8]) -> TraceDat {
    let mut w = Walk { bytes, at: 10 };
    assert_eq!(w.cstr(), "6");
    assert_eq!(w.take(2), [0, 8]);
    let page_size = w.u32();
    assert_eq!(w.cstr(), "header_page");
    let n = w.u64() as usize;
    let header_page = w.text(n);
    assert_eq!(w.cstr(), "header_event");
    let n = w.u64() as usize;
    let header_event = w.text(n);
    let ftrace_formats = (0..w.u32())
        .map(|_| {
            let n = w.u64() as usize;
            w.text(n)
        })
        .collect();
    let systems = (0..w.u32())
        .map(|_| {
            let name = w.cstr();
            let formats = (0..w.u32())
                .map(|_| {
                    let n = w.u64() as usize;
                    w.text(n)
                })
                .collect();
            (name, formats)
        })
        .collect();
    let n = w.u32() as usize;
    let kallsyms = w.text(n);
    let n = w.u32() as usize;
    let printk_formats = w.text(n);
    let n = w.u64() as usize;
    let cmdlines = w.text(n);
    let cpus = w.u32();
    let mut file = TraceDat {
        page_size,
        header_page,
        header_event,
        ftrace_formats,
        systems,
        kallsyms,
        printk_formats,
        cmdlines,
        ..TraceDat::default()
    };
    assert_eq!(w.take(10), b"options  \0");
    loop {
        let kind = w.u16();
        if kind == 0 {
            break;
        }
        let n = w.u32() as usize;
        let data = w.take(n).to_vec();
        let text = || {
            String::from_utf8_lossy(&data)
                .trim_end_matches('\0')
                .to_string()
        };
        match kind {
            4 => file.trace_clock = Some(text()),
            5 => file.uname = Some(text()),
            9 => file.tracer_version = Some(text()),
            _ => file.options.push((kind, data)),
        }
    }
    assert_eq!(w.take(10), b"flyrecord\0");
    for _ in 0..cpus {
        let (offset, size) = (w.u64() as usize, w.u64() as usize);
        file.cpu_data.push(bytes[offset..offset + size].to_vec());
    }
    file
}

fn corpus(name: &str) -> Vec<u8> {
    std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/corpus")
            .join(name),
    )
    .unwrap()
}

fn our_report(bytes: Vec<u8>) -> String {
    let mut file = TraceFile::from_bytes(bytes).unwrap();
    let mut out = Vec::new();
    write_report(&mut file, &ReportOptions::default(), &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

/// `trace-cmd report -N` of `bytes` (the corpus texts are without `-t`),
/// `None` where trace-cmd is not installed (outside CI, which must have it).
fn trace_cmd_report(bytes: &[u8], label: &str) -> Option<String> {
    common::trace_cmd_report_with(bytes, label, &["-N"])
}

const V7: [(Compression, &str); 3] = [
    (Compression::None, "v7"),
    (Compression::Zlib, "v7zlib"),
    (Compression::Zstd, "v7zstd"),
];

fn written(file: &TraceDat, version: FileVersion, compression: Compression) -> Vec<u8> {
    write_trace_dat(
        file,
        &WriteOptions {
            version,
            compression,
        },
    )
    .unwrap()
}

#[test]
fn rewritten_corpus_files_print_as_the_originals() {
    for name in ["sched", "marker", "hotkern", "all"] {
        let original = corpus(&format!("{name}.v6.dat"));
        let expected = String::from_utf8(corpus(&format!("{name}.txt"))).unwrap();
        let file = inputs_of_v6(&original);
        let v6 = written(&file, FileVersion::V6, Compression::None);
        assert_eq!(our_report(v6.clone()), expected, "{name} v6");
        if let Some(text) = trace_cmd_report(&v6, &format!("{name}-v6")) {
            assert_eq!(text, expected, "trace-cmd, {name} v6");
        }
        for (compression, label) in V7 {
            let v7 = written(&file, FileVersion::V7, compression);
            assert_eq!(&v7[10..12], b"7\0");
            assert_eq!(our_report(v7.clone()), expected, "{name} {label}");
            // Debian's trace-cmd is built without zlib ("cannot uncompress
            // the file" for trace-cmd's own zlib files): our reader and
            // the zlib crate's decoder vouch for that codec.
            if compression != Compression::Zlib {
                if let Some(text) = trace_cmd_report(&v7, &format!("{name}-{label}")) {
                    assert_eq!(text, expected, "trace-cmd, {name} {label}");
                }
            }
        }
    }
}

#[test]
fn version_7_carries_the_options() {
    let file = inputs_of_v6(&corpus("sched.v6.dat"));
    assert!(file.trace_clock.as_deref().unwrap().starts_with("[local]"));
    for (compression, label) in V7 {
        let bytes = written(&file, FileVersion::V7, compression);
        let trace = TraceFile::from_bytes(bytes).unwrap();
        let meta = trace.metadata();
        assert_eq!(meta.version, 7, "{label}");
        assert_eq!(meta.cpu_count, 2, "{label}");
        assert_eq!(meta.uname, file.uname, "{label}");
        assert_eq!(meta.tracer_version, file.tracer_version, "{label}");
        assert_eq!(meta.trace_clock, file.trace_clock, "{label}");
        assert_eq!(meta.buffers.len(), 1, "{label}");
        assert_eq!(meta.buffers[0].clock.as_deref(), Some("local"), "{label}");
        assert_eq!(meta.cpustats.len(), 2, "{label}");
        for cpu in &meta.buffers[0].cpus {
            assert_eq!(cpu.offset % 4096, 0, "{label}: CPU data page-aligned");
        }
    }
}

#[test]
fn compression_shrinks_the_file() {
    let file = inputs_of_v6(&corpus("sched.v6.dat"));
    let plain = written(&file, FileVersion::V7, Compression::None).len();
    for compression in [Compression::Zlib, Compression::Zstd] {
        let packed = written(&file, FileVersion::V7, compression).len();
        assert!(packed * 2 < plain, "{compression:?}: {packed} of {plain}");
    }
}

#[test]
fn version_6_cannot_be_compressed() {
    let file = inputs_of_v6(&corpus("hotkern.v6.dat"));
    let error = write_trace_dat(
        &file,
        &WriteOptions {
            version: FileVersion::V6,
            compression: Compression::Zstd,
        },
    )
    .unwrap_err();
    assert_eq!(error.to_string(), "compression needs trace.dat version 7");
}

/// The first section follows the file header, the compression's name and
/// version and the first option list's offset.
fn first_section(bytes: &[u8]) -> usize {
    let mut at = 18;
    for _ in 0..2 {
        at += bytes[at..].iter().position(|&b| b == 0).unwrap() + 1;
    }
    at + 8
}

#[test]
fn a_corrupt_version_7_section_is_a_typed_error() {
    let file = inputs_of_v6(&corpus("sched.v6.dat"));
    // A compressed header section whose data is overwritten.
    let mut bytes = written(&file, FileVersion::V7, Compression::Zstd);
    let section = first_section(&bytes);
    assert_eq!(
        &bytes[section..section + 4],
        [16, 0, 1, 0],
        "headers, compressed"
    );
    for byte in &mut bytes[section + 24..section + 40] {
        *byte = 0xa5;
    }
    let error = TraceFile::from_bytes(bytes).err().unwrap();
    assert!(matches!(error, Error::Decompress(_)), "{error}");

    // An uncompressed file whose first option list is not one.
    let mut bytes = written(&file, FileVersion::V7, Compression::None);
    let list = u64::from_le_bytes(bytes[24..32].try_into().unwrap()) as usize;
    bytes[list] = 7;
    let error = TraceFile::from_bytes(bytes).err().unwrap();
    assert!(matches!(error, Error::Corrupt(_)), "{error}");

    // A section that claims more bytes than the file has.
    let mut bytes = written(&file, FileVersion::V7, Compression::None);
    let section = first_section(&bytes);
    bytes[section + 8..section + 16].copy_from_slice(&u64::MAX.to_le_bytes());
    let error = TraceFile::from_bytes(bytes).err().unwrap();
    assert!(matches!(error, Error::Truncated(_)), "{error}");
}

/// xorshift64: reproducible inputs without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Whatever the inputs (real pages cut and shuffled, random bytes, odd
/// lengths, empty CPUs, several chunks), every version and compression
/// carries the same thing: the reader reports each form identically.
#[test]
fn every_form_of_the_same_inputs_reads_the_same() {
    let real = inputs_of_v6(&corpus("sched.v6.dat"));
    let pages: Vec<&[u8]> = real.cpu_data.iter().flat_map(|d| d.chunks(4096)).collect();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for case in 0..24 {
        let mut file = real.clone();
        file.cpu_data = (0..rng.below(4))
            .map(|_| {
                let mut data = Vec::new();
                // Up to 23 pages: more than one compressed chunk of 10.
                for _ in 0..rng.below(24) {
                    if rng.below(4) == 0 {
                        data.extend((0..4096).map(|_| rng.next() as u8));
                    } else {
                        data.extend_from_slice(pages[rng.below(pages.len() as u64) as usize]);
                    }
                }
                // A CPU's data need not end on a page boundary.
                data.truncate(data.len().saturating_sub(rng.below(64) as usize));
                data
            })
            .collect();
        if case % 3 == 0 {
            file.trace_clock = Some("local [global] counter".into());
            file.options.push((7, b"1000\0".to_vec()));
        }
        let mut reports = Vec::new();
        let forms = [(FileVersion::V6, Compression::None)]
            .into_iter()
            .chain(V7.iter().map(|(c, _)| (FileVersion::V7, *c)));
        for (version, compression) in forms {
            let bytes = written(&file, version, compression);
            let mut trace = TraceFile::from_bytes(bytes).unwrap();
            let meta = trace.metadata();
            let clock = meta.buffers.first().and_then(|b| b.clock.clone());
            let facts = format!(
                "cpus {} uname {:?} clock {:?} offset {}",
                meta.cpu_count, meta.uname, meta.trace_clock, meta.time_offset
            );
            assert_eq!(meta.cpu_count as usize, file.cpu_data.len(), "case {case}");
            if version == FileVersion::V7 {
                let want = if case % 3 == 0 { "global" } else { "local" };
                assert_eq!(clock.as_deref(), Some(want), "case {case}");
            }
            let mut out = Vec::new();
            let summary = write_report(&mut trace, &ReportOptions::default(), &mut out);
            reports.push((facts, out, summary.map(|s| s.corrupt_pages).ok()));
        }
        for other in &reports[1..] {
            assert!(
                other == &reports[0],
                "case {case}: a form reads differently"
            );
        }
    }
}

/// `TraceFile::to_trace_dat` gives back what the independent walker above
/// finds in a version 6 file, and what was written into each version 7
/// form: the reader keeps every section the writer needs.
#[test]
fn the_reader_gives_back_the_writers_inputs() {
    // The writer decides the CPU count itself; the walker keeps its option.
    let without_cpu_count = |mut file: TraceDat| {
        file.options.retain(|(kind, _)| *kind != 8);
        file
    };
    for name in ["sched", "marker", "hotkern", "all", "io", "net"] {
        let original = corpus(&format!("{name}.v6.dat"));
        let walked = without_cpu_count(inputs_of_v6(&original));
        let read = TraceFile::from_bytes(original)
            .unwrap()
            .to_trace_dat()
            .unwrap();
        assert_eq!(read, walked, "{name}");
        for (compression, label) in V7 {
            let v7 = written(&walked, FileVersion::V7, compression);
            let read = TraceFile::from_bytes(v7).unwrap().to_trace_dat().unwrap();
            assert_eq!(read, walked, "{name} {label}");
        }
    }
}

/// The file split into metadata and per-CPU readers over its pages.
fn split(name: &str) -> (TraceDat, Vec<CpuReader<std::io::Cursor<Vec<u8>>>>) {
    let mut meta = TraceFile::from_bytes(corpus(name))
        .unwrap()
        .to_trace_dat()
        .unwrap();
    let readers = std::mem::take(&mut meta.cpu_data)
        .into_iter()
        .map(|data| CpuReader {
            size: data.len() as u64,
            data: std::io::Cursor::new(data),
        })
        .collect();
    (meta, readers)
}

#[test]
fn a_streamed_trace_is_the_in_memory_one_and_prints_the_same() {
    for name in ["sched", "all", "syscalls"] {
        let expected = String::from_utf8(corpus(&format!("{name}.txt"))).unwrap();
        let (meta, readers) = split(&format!("{name}.v6.dat"));
        let in_memory = TraceFile::from_bytes(corpus(&format!("{name}.v6.dat")))
            .unwrap()
            .to_trace_dat()
            .unwrap();
        let mut streamed = Vec::new();
        let n = write_trace_dat_v6_streaming(&meta, readers, &mut streamed).unwrap();
        assert_eq!(n, streamed.len() as u64, "{name}");
        assert_eq!(
            streamed,
            write_trace_dat(&in_memory, &Default::default()).unwrap(),
            "{name}"
        );
        let mut ours = Vec::new();
        let mut file = TraceFile::from_bytes(streamed.clone()).unwrap();
        write_report(&mut file, &ReportOptions::default(), &mut ours).unwrap();
        assert_eq!(String::from_utf8(ours).unwrap(), expected, "{name}");
        if let Some(theirs) =
            common::trace_cmd_report_with(&streamed, &format!("stream-{name}"), &["-N"])
        {
            assert_eq!(theirs, expected, "trace-cmd, {name}");
        }
    }
}

#[test]
fn a_reader_of_the_wrong_size_is_refused() {
    for (declared, given) in [(8192, 4096), (4096, 8192)] {
        let meta = TraceDat {
            page_size: 4096,
            ..TraceDat::default()
        };
        let cpus = vec![CpuReader {
            size: declared,
            data: std::io::repeat(0).take(given),
        }];
        let error = write_trace_dat_v6_streaming(&meta, cpus, std::io::sink()).unwrap_err();
        let read = given.min(declared + 1);
        assert!(
            matches!(error, StreamError::Size { cpu: 0, declared: d, read: r } if d == declared && r == read),
            "{error}"
        );
    }
    let in_memory = TraceDat {
        page_size: 4096,
        cpu_data: vec![vec![0; 4096]],
        ..TraceDat::default()
    };
    let none: Vec<CpuReader<std::io::Empty>> = Vec::new();
    let error = write_trace_dat_v6_streaming(&in_memory, none, std::io::sink()).unwrap_err();
    assert!(matches!(error, StreamError::CpuDataInMemory), "{error}");
}
