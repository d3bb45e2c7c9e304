//! `hotkern bench tracedat`: reading a large trace.dat as
//! `trace-cmd report -N` prints it, by hotkern-tracedat (in this process,
//! every line formatted and written to /dev/null) and by trace-cmd itself
//! (a child process, its standard output on /dev/null), on the same file
//! in the same run.
//!
//! The file (`--size` MB, 100 by default) is made before any timing from
//! real Linux ring-buffer pages (see [`gen`]); it stays in the page cache,
//! so both sides read memory, not the disk. Case `report/large`, figure
//! `events_per_s` (records printed per second of wall time), with the CPU
//! time each side used.

mod gen;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::measure::wall_and_cpu_time;
use super::{BenchOptions, Case, Report};
use crate::progress::Progress;

/// The case's name.
const CASE: &str = "report/large";
/// trace-cmd's implementation name, and the program run.
const TRACE_CMD: &str = "trace-cmd";
/// The input's default size, in MB: a "large" trace (≥ 100 MB).
pub const DEFAULT_SIZE_MB: u64 = 100;

/// The made file, removed when the benchmark ends however it ends.
struct TempTrace(PathBuf);

impl Drop for TempTrace {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Runs the benchmark.
pub fn run(options: &BenchOptions) -> Result<Report, String> {
    let size_mb = options.size_mb.unwrap_or(DEFAULT_SIZE_MB).max(1);
    let progress = Progress::steps("tracedat", 3);
    progress.start("making the trace");
    let path = TempTrace(
        std::env::temp_dir().join(format!("hotkern-bench-tracedat-{}.dat", std::process::id())),
    );
    let made = gen::generate(&path.0, size_mb << 20)?;
    progress.advance();
    let mb = made.bytes as f64 / f64::from(1 << 20);

    let mut report = Report::new("tracedat");
    report.table_figures = vec!["events_per_s", "wall_s", "cpu_s", "mb_per_s"];
    progress.start("hotkern");
    let (elapsed, summary) = wall_and_cpu_time(|| read_with_hotkern(&path.0))?;
    let summary = summary?;
    progress.advance();
    if summary.records != made.events {
        return Err(format!(
            "bench tracedat: hotkern printed {} records of the {} the file holds",
            summary.records, made.events
        ));
    }
    report
        .cases
        .push(case("hotkern", made.events, mb, elapsed.wall, elapsed.cpu));

    progress.start(TRACE_CMD);
    match read_with_trace_cmd(&path.0) {
        Ok((wall, cpu)) => report
            .cases
            .push(case(TRACE_CMD, made.events, mb, wall, cpu)),
        Err(why) => report
            .notes
            .push(format!("{TRACE_CMD} not measured: {why}")),
    }
    progress.advance();
    drop(progress);

    let ratio = report.ratio(
        "report-large/trace-cmd_over_hotkern",
        CASE,
        "ns_per_op",
        TRACE_CMD,
        "hotkern",
    );
    let mut notes = vec![match ratio {
        Some(r) => format!(
            "target hotkern ≥ 1× trace-cmd's events/s (aim 3×): {r:.2}×, {}",
            if r >= 1.0 { "met" } else { "MISSED" }
        ),
        None => "target hotkern ≥ 1× trace-cmd's events/s: not measured".into(),
    }];
    notes.push(format!(
        "input: {mb:.1} MB trace.dat, version 6, {} CPUs, {} events of {} formats, \
         Linux's ring-buffer pages from hotkern-tracedat's corpus replayed (made untimed)",
        gen::CPUS,
        made.events,
        made.formats
    ));
    notes.append(&mut report.notes);
    report.notes = notes;
    Ok(report)
}

fn case(implementation: &str, events: u64, mb: f64, wall: Duration, cpu: Duration) -> Case {
    let secs = wall.as_secs_f64().max(1e-9);
    Case::new(CASE, implementation, events)
        .ns_per_op(secs * 1e9 / events.max(1) as f64)
        .with("events_per_s", (events as f64 / secs).round())
        .with("wall_s", round3(secs))
        .with("cpu_s", round3(cpu.as_secs_f64()))
        .with("mb", round3(mb))
        .with("mb_per_s", round3(mb / secs))
}

fn round3(v: f64) -> f64 {
    (v * 1000.0).round() / 1000.0
}

/// Opens and prints the whole file, as `hotkern trace report` does, to
/// /dev/null.
fn read_with_hotkern(path: &Path) -> Result<hotkern_tracedat::ReportSummary, String> {
    let why =
        |e: &dyn std::fmt::Display| format!("bench tracedat, hotkern: {}: {e}", path.display());
    let mut file = hotkern_tracedat::TraceFile::open(path).map_err(|e| why(&e))?;
    let null = std::fs::File::create("/dev/null").map_err(|e| why(&e))?;
    let mut out = std::io::BufWriter::new(null);
    let summary = hotkern_tracedat::write_report(
        &mut file,
        &hotkern_tracedat::ReportOptions::default(),
        &mut out,
    )
    .map_err(|e| why(&e))?;
    out.flush().map_err(|e| why(&e))?;
    Ok(summary)
}

/// Runs `trace-cmd report -N -i FILE > /dev/null`: its wall time and the
/// CPU time it used (user and system, from the kernel's accounting of
/// waited-for children).
fn read_with_trace_cmd(path: &Path) -> Result<(Duration, Duration), String> {
    let before = children_cpu_time();
    let start = Instant::now();
    let output = Command::new(TRACE_CMD)
        .args(["report", "-N", "-i"])
        .arg(path)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output();
    let wall = start.elapsed();
    let output = match output {
        Ok(output) => output,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(format!(
                "`{TRACE_CMD}` not found; install Debian's trace-cmd \
                 (apt-get install trace-cmd, or scripts/setup)"
            ))
        }
        Err(e) => return Err(format!("cannot run {TRACE_CMD}: {e}")),
    };
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(format!(
            "{TRACE_CMD} report: {}: {}",
            output.status,
            stderr.lines().last().unwrap_or("")
        ));
    }
    Ok((wall, children_cpu_time().saturating_sub(before)))
}

/// User and system time of the children this process has waited for.
fn children_cpu_time() -> Duration {
    // SAFETY: rusage is plain integers, for which all zero bytes are a
    // valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage only fills in the struct it is given, which is
    // valid, writable and outlives the call.
    if unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut usage) } != 0 {
        return Duration::ZERO;
    }
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_run_measures_both_sides_or_says_why_not() {
        let options = BenchOptions {
            size_mb: Some(1),
            ..BenchOptions::default()
        };
        let report = run(&options).unwrap();
        let hotkern = report.case(CASE, "hotkern").unwrap();
        assert!(hotkern.ops > 1000);
        assert!(hotkern.figure("events_per_s").unwrap() > 0.0);
        match report.case(CASE, TRACE_CMD) {
            Some(peer) => {
                assert_eq!(peer.ops, hotkern.ops);
                assert!(report
                    .ratios
                    .contains_key("report-large/trace-cmd_over_hotkern"));
            }
            None => assert!(report
                .notes
                .iter()
                .any(|n| n.contains("apt-get install trace-cmd"))),
        }
    }
}
