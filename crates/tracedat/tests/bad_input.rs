//! Damaged files give errors or partial reports, never panics: every
//! corpus file cut short at many points, and with bytes overwritten.

use std::path::Path;

use hotkern_tracedat::{write_report, ReportOptions, TraceFile};

fn read_all(bytes: Vec<u8>) {
    if let Ok(mut file) = TraceFile::from_bytes(bytes) {
        let _ = write_report(&mut file, &ReportOptions::default(), &mut std::io::sink());
    }
}

fn corpus_files() -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "dat"))
        .collect();
    names.sort();
    names.iter().map(|p| std::fs::read(p).unwrap()).collect()
}

#[test]
fn truncated_files_do_not_panic() {
    for bytes in corpus_files() {
        for cut in (0..bytes.len()).step_by(1021) {
            read_all(bytes[..cut].to_vec());
        }
    }
}

#[test]
fn overwritten_bytes_do_not_panic() {
    for bytes in corpus_files() {
        // Metadata and the first pages, where the sizes and offsets are.
        for at in (0..bytes.len().min(32 << 10)).step_by(1999) {
            for value in [0x00, 0xff] {
                let mut damaged = bytes.clone();
                damaged[at] = value;
                read_all(damaged);
            }
        }
    }
}

#[test]
fn not_a_trace_is_an_error() {
    assert!(TraceFile::from_bytes(Vec::new()).is_err());
    assert!(TraceFile::from_bytes(b"\x17\x08\x44tracing9\0".to_vec()).is_err());
}

/// Inputs the fuzzer once crashed the reader with (kept as its seeds).
#[test]
fn fuzzer_finds_stay_fixed() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/tracedat_read");
    for name in [
        "regress-timestamp-overflow.dat",
        "regress-padding-length.dat",
    ] {
        read_all(std::fs::read(dir.join(name)).unwrap());
    }
}

/// An event whose length runs past its page: trace-cmd prints it as an
/// unknown event and drops the rest of the page; damaged.txt is what it
/// printed for marker.v6.dat with its CPU 0 page's second event so damaged.
#[test]
fn an_overlong_event_prints_as_trace_cmd_prints_it() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    let mut bytes = std::fs::read(dir.join("marker.v6.dat")).unwrap();
    // CPU 0's page starts at 28672; after its 16-byte header and a 68-byte
    // event, the second event's header becomes "type 0, 65535 bytes".
    let at = 28672 + 16 + 68;
    let header = u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) & !31;
    bytes[at..at + 4].copy_from_slice(&header.to_le_bytes());
    bytes[at + 4..at + 8].copy_from_slice(&0xffffu32.to_le_bytes());
    let mut file = TraceFile::from_bytes(bytes).unwrap();
    let mut out = Vec::new();
    let summary = write_report(&mut file, &ReportOptions::default(), &mut out).unwrap();
    let expected = std::fs::read_to_string(dir.join("damaged.txt")).unwrap();
    assert_eq!(String::from_utf8(out).unwrap(), expected);
    assert_eq!(summary.corrupt_pages, 1);
}
