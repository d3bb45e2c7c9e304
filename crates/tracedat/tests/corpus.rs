//! Every trace in tests/corpus, recorded from a running Linux kernel and
//! saved by trace-cmd (see record.sh there), or damaged on purpose (see
//! badfield.py there), must print exactly as `trace-cmd report -N` printed
//! it (NAME.txt beside it, so the tests run where trace-cmd is not
//! installed). Where trace-cmd is installed, NAME.txt must still be what
//! it prints.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

use hotkern_tracedat::{write_report, ReportOptions, TraceFile};

fn corpus() -> Vec<(PathBuf, PathBuf)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "dat"))
        .map(|p| {
            let name = p.file_name().unwrap().to_str().unwrap();
            let stem = name.split('.').next().unwrap();
            let expected = dir.join(format!("{stem}.txt"));
            (p, expected)
        })
        .collect();
    files.sort();
    assert!(files.len() >= 10, "corpus missing: {}", dir.display());
    files
}

fn report(path: &Path) -> String {
    let mut file = TraceFile::open(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = Vec::new();
    write_report(&mut file, &ReportOptions::default(), &mut out).unwrap();
    String::from_utf8(out).unwrap()
}

/// What the installed `trace-cmd report -N` prints for `dat`; `None` where
/// trace-cmd is not installed or cannot read the file (a build without
/// zlib refuses sched.v7zlib.dat).
fn trace_cmd_report(dat: &Path) -> Option<String> {
    let out = Command::new("trace-cmd")
        .args(["report", "-N"])
        .arg(dat)
        .output()
        .ok()?;
    out.status.success().then_some(())?;
    String::from_utf8(out.stdout).ok()
}

/// The event name of a report line (`comm-pid [cpu] ts: name: ...`).
fn event_name(line: &str) -> Option<&str> {
    let after = line.split_once("] ")?.1;
    let after = after.split_once(": ")?.1;
    Some(after.split(':').next()?.trim())
}

#[test]
fn every_corpus_file_prints_as_trace_cmd_does() {
    let mut same: BTreeSet<String> = BTreeSet::new();
    let mut differ: BTreeMap<String, (String, String)> = BTreeMap::new();
    let mut first_failure = None;
    for (dat, txt) in corpus() {
        let expected = std::fs::read_to_string(&txt).unwrap();
        if let Some(trace_cmd) = trace_cmd_report(&dat) {
            assert!(
                trace_cmd == expected,
                "{} is not what trace-cmd prints for {}",
                txt.display(),
                dat.display()
            );
        }
        let got = report(&dat);
        let mut got_lines = got.lines();
        for (n, want) in expected.lines().enumerate() {
            let have = got_lines.next().unwrap_or("<missing>");
            let name = event_name(want).unwrap_or("").to_string();
            if have == want {
                same.insert(name);
            } else {
                if first_failure.is_none() {
                    first_failure = Some(format!(
                        "{} line {}:\n  trace-cmd: {want}\n  hotkern:   {have}",
                        dat.display(),
                        n + 1
                    ));
                }
                differ
                    .entry(name)
                    .or_insert((want.to_string(), have.to_string()));
            }
        }
        if let Some(extra) = got_lines.next() {
            first_failure.get_or_insert(format!("{}: extra line {extra}", dat.display()));
        }
    }
    let identical: Vec<_> = same.iter().filter(|n| !differ.contains_key(*n)).collect();
    eprintln!("event formats rendered identically: {}", identical.len());
    for (name, (want, have)) in &differ {
        eprintln!("differs: {name}\n  trace-cmd: {want}\n  hotkern:   {have}");
    }
    if let Some(failure) = first_failure {
        panic!("{failure}");
    }
}

/// `--cpu` and `--events` keep exactly the lines trace-cmd printed for
/// that CPU or those events.
#[test]
fn filters_keep_the_matching_lines() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    let expected = std::fs::read_to_string(dir.join("sched.txt")).unwrap();
    let run = |opts: ReportOptions| {
        let mut file = TraceFile::open(dir.join("sched.v7zstd.dat")).unwrap();
        let mut out = Vec::new();
        write_report(&mut file, &opts, &mut out).unwrap();
        String::from_utf8(out).unwrap()
    };
    let keep = |pred: &dyn Fn(&str) -> bool| -> String {
        expected
            .lines()
            .filter(|l| l.starts_with("cpus=") || pred(l))
            .map(|l| format!("{l}\n"))
            .collect()
    };
    let cpu1 = run(ReportOptions {
        cpu: Some(1),
        ..ReportOptions::default()
    });
    assert_eq!(
        cpu1,
        keep(&|l| l.contains("] [001] ") || l.contains(" [001] "))
    );
    let sched = run(ReportOptions {
        events: Some("sched:sched_s*".into()),
        ..ReportOptions::default()
    });
    assert_eq!(
        sched,
        keep(&|l| event_name(l).is_some_and(|n| n.starts_with("sched_s")))
    );
    assert!(sched.lines().count() > 100);
}

/// A format with a field line libtraceevent cannot read (badfield.v6.dat:
/// request_done's `checksum` line has no `offset:`) keeps its event:
/// trace-cmd prints each record as `[FAILED TO PARSE]` and the fields read
/// before that line, where the intact file (hotkern.v6.dat) has the print
/// format's text.
#[test]
fn a_bad_field_line_prints_the_fields_before_it() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/corpus");
    let intact = std::fs::read_to_string(dir.join("hotkern.txt")).unwrap();
    let got = report(&dir.join("badfield.v6.dat"));
    assert_eq!(got.lines().count(), intact.lines().count());
    let mut failed = 0;
    for (have, was) in got.lines().zip(intact.lines()) {
        if event_name(was) == Some("request_done") {
            let (head, fields) = was.split_once("request_done:").unwrap();
            let fields = fields.trim_start();
            let kept = &fields[..fields.find(" checksum=").unwrap()];
            assert!(have.starts_with(head), "{have}");
            assert!(
                have.ends_with(&format!("request_done:         [FAILED TO PARSE] {kept}")),
                "{have}"
            );
            failed += 1;
        } else {
            assert_eq!(have, was);
        }
    }
    assert_eq!(failed, 8);
}
