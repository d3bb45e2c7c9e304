//! `hotkern boot --append crash=...` end to end: the kernel crashes on
//! purpose once tracing is on, writes its rings as a crash dump on COM2,
//! and `hotkern boot` saves it as crash-trace.dat. The dump must parse
//! with hotkern-tracedat, end with the markers the crash wrote just before
//! it, and be read by `trace-cmd report`. Skipped, saying so, where
//! qemu-system-x86_64 is not installed.

mod common;

use common::{on_path, qemu_missing};

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

/// Boots with `crash=KIND` and returns the JSON document.
fn crash(kind: &str) -> Value {
    let output_dir: PathBuf =
        std::env::temp_dir().join(format!("hotkern-crash-{kind}-{}", std::process::id()));
    let output = Command::new(env!("CARGO_BIN_EXE_hotkern"))
        .args([
            "boot",
            "--json",
            "--no-disk",
            "--no-hotplug",
            "--timeout",
            "120",
        ])
        .args(["--append", &format!("crash={kind}")])
        .arg("--output")
        .arg(&output_dir)
        .output()
        .expect("hotkern runs");
    assert!(!output.status.success(), "a crash is a failed run");
    let stderr = String::from_utf8_lossy(&output.stderr);
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|error| panic!("no JSON document ({error}): {stderr}"))
}

/// Every `trace_marker` text in the file, per CPU, in time order.
fn markers_per_cpu(path: &Path) -> Vec<Vec<String>> {
    let bytes = std::fs::read(path).expect("the crash dump is there");
    let mut file = hotkern_tracedat::TraceFile::from_bytes(bytes).expect("a readable trace.dat");
    let cpus = file.metadata().cpu_count as usize;
    let mut per_cpu = vec![Vec::new(); cpus];
    let (records, printer) = file.reader().expect("its records");
    for record in records {
        let record = record.expect("a whole record");
        let Some(event) = printer.event_of(&record) else {
            continue;
        };
        let mut text = String::new();
        printer.write_event(event, &record, &mut text);
        per_cpu[record.cpu as usize].push(text.trim_end().to_owned());
    }
    per_cpu
}

/// Checks the dump the run reported: saved, whole, readable, and ending
/// (on each CPU in `last`) with the given marker.
fn check_dump(run: &Value, last: &[(usize, &str)]) {
    let crash = &run["crash"];
    assert!(crash["error"].is_null(), "{crash}");
    let path = PathBuf::from(crash["trace_dat"].as_str().expect("a crash dump path"));
    assert_eq!(path.file_name().unwrap(), "crash-trace.dat");
    assert!(!path.with_file_name("crash-trace.dat.partial").exists());
    let markers = markers_per_cpu(&path);
    let events: usize = markers.iter().map(Vec::len).sum();
    assert_eq!(crash["events"].as_u64(), Some(events as u64), "{markers:?}");
    // The boot's own markers, written before the crash, are in the dump.
    assert!(
        markers[0].iter().any(|m| m.contains("init_pages took")),
        "{markers:?}"
    );
    for &(cpu, marker) in last {
        assert!(
            markers[cpu].last().is_some_and(|m| m.ends_with(marker)),
            "cpu {cpu} should end with {marker:?}: {:?}",
            markers[cpu]
        );
    }
    if on_path("trace-cmd") {
        let report = Command::new("trace-cmd")
            .arg("report")
            .arg(&path)
            .output()
            .expect("trace-cmd runs");
        let text = String::from_utf8_lossy(&report.stdout);
        assert!(
            report.status.success(),
            "{}",
            String::from_utf8_lossy(&report.stderr)
        );
        for &(_, marker) in last {
            assert!(
                text.contains(marker),
                "trace-cmd report lacks {marker:?}:\n{text}"
            );
        }
    } else {
        eprintln!("trace-cmd is not on PATH (apt-get install trace-cmd): not read with it");
    }
}

#[test]
fn a_panic_writes_a_crash_dump_ending_with_the_crash() {
    if qemu_missing() {
        return;
    }
    let run = crash("panic");
    assert_eq!(run["outcome"], "panic", "{run}");
    check_dump(&run, &[(0, "crash requested: panic")]);
}

#[test]
fn a_page_fault_writes_a_crash_dump_ending_with_the_crash() {
    if qemu_missing() {
        return;
    }
    let run = crash("page-fault");
    assert_eq!(run["outcome"], "exception", "{run}");
    check_dump(&run, &[(0, "crash requested: page-fault")]);
}

#[test]
fn every_cpu_panicking_at_once_writes_one_readable_dump() {
    if qemu_missing() {
        return;
    }
    let run = crash("panic-all");
    assert_eq!(run["outcome"], "panic", "{run}");
    let last: Vec<(usize, String)> = (1..4)
        .map(|cpu| (cpu, format!("crash requested: panic-all on cpu {cpu}")))
        .chain([(0, "crash requested: panic-all".to_owned())])
        .collect();
    let last: Vec<(usize, &str)> = last.iter().map(|(c, m)| (*c, m.as_str())).collect();
    check_dump(&run, &last);
}

#[test]
fn a_panic_inside_the_dump_ends_the_run_with_an_incomplete_dump() {
    if qemu_missing() {
        return;
    }
    let run = crash("dump-panic");
    assert_eq!(run["outcome"], "panic", "{run}");
    let crash = &run["crash"];
    assert!(crash["trace_dat"].is_null(), "{crash}");
    let error = crash["error"].as_str().expect("a typed error");
    assert!(error.starts_with("crash dump incomplete: "), "{error}");
    assert!(error.contains("a second crash while writing it"), "{error}");
}
