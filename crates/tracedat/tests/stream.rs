//! The streaming version 6 writer: a corpus trace taken apart by the
//! reader and streamed again from readers is the in-memory writer's file
//! byte for byte, prints as trace-cmd printed the original (through this
//! crate and through trace-cmd where installed), and a reader that gives
//! the wrong number of bytes is a typed error.

#[path = "../../trace/tests/common/mod.rs"]
mod common;

use std::io::Read;
use std::path::Path;

use hotkern_tracedat::write::{
    write_trace_dat, write_trace_dat_v6_streaming, CpuReader, StreamError, TraceDat,
};
use hotkern_tracedat::{write_report, ReportOptions, TraceFile};

fn corpus(name: &str) -> Vec<u8> {
    std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/corpus")
            .join(name),
    )
    .unwrap()
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
