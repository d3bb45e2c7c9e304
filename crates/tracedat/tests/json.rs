//! The Chrome trace JSON export: valid JSON for every corpus file, one
//! event per record the text report prints (under the same filters), time
//! stamps in order on each CPU, and task names that JSON must escape.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use hotkern_tracedat::json::write_chrome_json;
use hotkern_tracedat::{write_report, ReportOptions, TraceFile};
use serde_json::Value;

fn corpus_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus")
}

fn corpus() -> Vec<PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(corpus_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "dat"))
        .collect();
    files.sort();
    assert!(files.len() >= 10);
    files
}

fn export(mut file: TraceFile, opts: &ReportOptions) -> Value {
    let mut out = Vec::new();
    write_chrome_json(&mut file, opts, &mut out).unwrap();
    serde_json::from_slice(&out).unwrap_or_else(|e| {
        panic!(
            "invalid JSON ({e}):\n{}",
            String::from_utf8_lossy(&out)
                .lines()
                .nth(e.line().saturating_sub(1))
                .unwrap_or("")
        )
    })
}

/// The events that stand for records (the others are CPU slices, lost
/// events and names).
fn records(doc: &Value) -> Vec<&Value> {
    doc["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["args"].get("common_cpu").is_some())
        .collect()
}

/// Lines of the text report that are records.
fn text_records(path: &Path, opts: &ReportOptions) -> usize {
    let mut out = Vec::new();
    write_report(&mut TraceFile::open(path).unwrap(), opts, &mut out).unwrap();
    String::from_utf8(out)
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with("cpus=") && !l.ends_with("EVENTS DROPPED]"))
        .count()
}

#[test]
fn every_corpus_file_exports_one_event_per_record() {
    let filters = [
        ReportOptions::default(),
        ReportOptions {
            cpu: Some(1),
            ..Default::default()
        },
        ReportOptions {
            events: Some("sched:*".into()),
            ..Default::default()
        },
        ReportOptions {
            events: Some("sys_e*".into()),
            cpu: Some(0),
            ..Default::default()
        },
    ];
    let mut total = 0;
    for path in corpus() {
        for opts in &filters {
            let doc = export(TraceFile::open(&path).unwrap(), opts);
            assert_eq!(doc["displayTimeUnit"], "ns");
            let got = records(&doc);
            let want = text_records(&path, opts);
            assert_eq!(got.len(), want, "{} {opts:?}", path.display());
            total += got.len();
            for event in &got {
                assert!(
                    matches!(event["ph"].as_str(), Some("i" | "B" | "E")),
                    "{event}"
                );
                assert!(event["ts"].is_f64() || event["ts"].is_u64(), "{event}");
                assert!(event["pid"].is_i64() && event["tid"].is_i64(), "{event}");
                if let Some(cpu) = opts.cpu {
                    assert_eq!(event["args"]["common_cpu"], cpu);
                }
            }
        }
    }
    assert!(total > 10_000, "{total}");
}

#[test]
fn time_stamps_never_go_back_on_a_cpu() {
    for path in corpus() {
        let doc = export(TraceFile::open(&path).unwrap(), &ReportOptions::default());
        let mut last: HashMap<(u64, String), f64> = HashMap::new();
        for event in records(&doc) {
            let cpu = event["args"]["common_cpu"].as_u64().unwrap();
            let buffer = event["args"]["common_buffer"]
                .as_str()
                .unwrap_or("")
                .to_string();
            let ts = event["ts"].as_f64().unwrap();
            let prev = last.insert((cpu, buffer), ts).unwrap_or(f64::MIN);
            assert!(ts >= prev, "{}: {prev} then {event}", path.display());
        }
    }
}

#[test]
fn sched_switch_fields_and_cpu_slices() {
    let doc = export(
        TraceFile::open(corpus_dir().join("sched.v7zstd.dat")).unwrap(),
        &ReportOptions::default(),
    );
    let switch = records(&doc)
        .into_iter()
        .find(|e| e["name"] == "sched_switch")
        .unwrap();
    assert_eq!(switch["cat"], "sched");
    assert!(switch["args"]["prev_comm"].is_string());
    assert!(switch["args"]["next_pid"].is_i64());
    let slices = doc["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["ph"] == "X")
        .count();
    assert!(slices > 10, "{slices}");
}

#[test]
fn function_graph_opens_and_closes_slices() {
    let doc = export(
        TraceFile::open(corpus_dir().join("hotkern.v6.dat")).unwrap(),
        &ReportOptions::default(),
    );
    let count = |ph: &str, name: &str| {
        records(&doc)
            .iter()
            .filter(|e| e["ph"] == ph && e["name"] == name)
            .count()
    };
    let text = std::fs::read_to_string(corpus_dir().join("hotkern.txt")).unwrap();
    let entries = text
        .matches("funcgraph_entry:      --> handle_request")
        .count();
    assert!(entries > 0);
    assert_eq!(count("B", "handle_request"), entries);
    assert_eq!(count("E", "handle_request"), entries);
}

/// A task named with a quote, a backslash, a newline and a control
/// character (Linux lets `prctl(PR_SET_NAME)` set any bytes but NUL).
#[test]
fn odd_task_names_are_escaped() {
    let path = corpus_dir().join("sched.v6.dat");
    let mut bytes = std::fs::read(&path).unwrap();
    let data_start = TraceFile::open(&path).unwrap().metadata().buffers[0]
        .cpus
        .iter()
        .map(|c| c.offset)
        .min()
        .unwrap() as usize;
    // Every `sched_switch` naming "kworker/..." in the CPU data.
    let odd = b"q\"b\\n\nc\x01\x1f\t";
    let mut replaced = 0;
    let mut at = data_start;
    while let Some(found) = find(&bytes[at..], b"kworker/") {
        let start = at + found;
        bytes[start..start + odd.len()].copy_from_slice(odd);
        replaced += 1;
        at = start + odd.len();
    }
    assert!(replaced > 0);
    let doc = export(
        TraceFile::from_bytes(bytes).unwrap(),
        &ReportOptions::default(),
    );
    let name = "q\"b\\n\nc\u{1}\u{1f}\t";
    let named = records(&doc)
        .into_iter()
        .filter(|e| {
            e["args"]["prev_comm"]
                .as_str()
                .is_some_and(|c| c.starts_with(name))
                || e["args"]["next_comm"]
                    .as_str()
                    .is_some_and(|c| c.starts_with(name))
        })
        .count();
    assert!(named > 0);
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Damaged files: no panic, and whatever the export returns, what it
/// wrote is a whole JSON document.
#[test]
fn damaged_files_still_give_whole_documents() {
    for path in corpus() {
        let bytes = std::fs::read(&path).unwrap();
        let mut damaged = Vec::new();
        for cut in (bytes.len() / 2..bytes.len()).step_by(8191) {
            damaged.push(bytes[..cut].to_vec());
        }
        for at in (bytes.len() / 2..bytes.len()).step_by(2999) {
            let mut b = bytes.clone();
            b[at..(at + 8).min(bytes.len())].fill(0xff);
            damaged.push(b);
        }
        for b in damaged {
            let Ok(mut file) = TraceFile::from_bytes(b) else {
                continue;
            };
            let mut out = Vec::new();
            if write_chrome_json(&mut file, &ReportOptions::default(), &mut out).is_err()
                && out.is_empty()
            {
                continue;
            }
            if let Err(e) = serde_json::from_slice::<Value>(&out) {
                panic!("{}: invalid JSON after damage: {e}", path.display());
            }
        }
    }
}
