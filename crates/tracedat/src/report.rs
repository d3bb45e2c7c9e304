//! `trace-cmd report -N`'s text: one line per record, preceded by
//! `cpus=N`, with dropped-event notices where the ring buffer lost events.

use std::fmt::Write as _;
use std::io::Write;

use crate::error::Result;
use crate::stream::Lost;
use crate::{EventFormat, TraceFile};

/// What to print.
#[derive(Clone, Debug, Default)]
pub struct ReportOptions {
    /// Only this CPU's records.
    pub cpu: Option<u32>,
    /// Only events whose `name` or `system:name` matches this glob
    /// (`*` and `?`).
    pub events: Option<String>,
    /// Nanosecond time stamps, as `trace-cmd report -t`.
    pub nanoseconds: bool,
}

impl ReportOptions {
    /// Whether a record of `cpu` whose format is `event` passes the
    /// `cpu` and `events` filters.
    pub(crate) fn selects(&self, cpu: u32, event: Option<&EventFormat>) -> bool {
        if self.cpu.is_some_and(|only| only != cpu) {
            return false;
        }
        let Some(glob) = &self.events else {
            return true;
        };
        event.is_some_and(|e| {
            glob_match(glob, &e.name) || glob_match(glob, &format!("{}:{}", e.system, e.name))
        })
    }
}

/// Counts from a report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReportSummary {
    /// Records printed.
    pub records: u64,
    /// Pages with an event running past their end, skipped.
    pub corrupt_pages: u64,
}

/// Prints `file` as `trace-cmd report -N` does.
///
/// ```no_run
/// let mut file = hotkern_tracedat::TraceFile::open("trace.dat")?;
/// let opts = hotkern_tracedat::ReportOptions { cpu: Some(0), ..Default::default() };
/// hotkern_tracedat::write_report(&mut file, &opts, &mut std::io::stdout().lock())?;
/// # Ok::<(), hotkern_tracedat::Error>(())
/// ```
pub fn write_report(
    file: &mut TraceFile,
    opts: &ReportOptions,
    out: &mut dyn Write,
) -> Result<ReportSummary> {
    writeln!(out, "cpus={}", file.metadata().cpu_count)?;
    let mut summary = ReportSummary::default();
    let mut line = String::new();
    // With instances, trace-cmd starts each line with the instance's name
    // (right-aligned to the longest), or blanks for the top buffer.
    let width = file
        .metadata()
        .buffers
        .iter()
        .map(|b| b.name.len())
        .max()
        .unwrap_or(0);
    let instances = file.metadata().buffers.len() > 1;
    // Per buffer: are its time stamps nanoseconds, printed as seconds?
    let top_clock = file
        .metadata()
        .buffers
        .first()
        .and_then(|b| b.clock.clone());
    let in_ns: Vec<bool> = file
        .metadata()
        .buffers
        .iter()
        // A TSC trace with trace-cmd's TSC-to-ns conversion is in ns.
        .map(|b| {
            clock_in_ns(b.clock.as_deref().or(top_clock.as_deref()))
                || file.metadata().tsc2nsec.is_some()
        })
        .collect();
    let (mut records, printer) = file.reader()?;
    for record in records.by_ref() {
        let record = record?;
        let event = printer.event_of(&record);
        if !opts.selects(record.cpu, event) {
            continue;
        }
        line.clear();
        if instances {
            let name = printer.buffer_name(record.buffer);
            let sep = if name.is_empty() { ' ' } else { ':' };
            let _ = write!(line, "{name:>width$}{sep} ");
        }
        // Writing to a String cannot fail.
        let _ = match record.lost_before {
            Some(Lost::Events(Some(n))) => {
                writeln!(line, "CPU:{} [{n} EVENTS DROPPED]", record.cpu)
            }
            Some(Lost::Events(None)) => writeln!(line, "CPU:{} [EVENTS DROPPED]", record.cpu),
            None => Ok(()),
        };
        match event {
            Some(e) => {
                write_prefix(&mut line, &printer, &record, in_ns[record.buffer], opts);
                line.push_str(&e.name);
                line.push(':');
                for _ in e.name.len()..20 {
                    line.push(' ');
                }
                line.push(' ');
                let start = line.len();
                printer.write_event(e, &record, &mut line);
                let trimmed = line[start..].trim_end_matches('\n').len();
                line.truncate(start + trimmed);
            }
            // An event whose format the file lacks: libtraceevent replaces
            // each part of the line it cannot fill.
            None => line
                .push_str("[UNKNOWN EVENT][UNKNOWN EVENT] (NULL):               [UNKNOWN EVENT]"),
        }
        line.push('\n');
        out.write_all(line.as_bytes())?;
        summary.records += 1;
    }
    summary.corrupt_pages = records.corrupt_pages();
    Ok(summary)
}

/// `comm-pid [cpu] time: `.
fn write_prefix(
    line: &mut String,
    printer: &crate::Printer<'_>,
    record: &crate::Record,
    in_ns: bool,
    opts: &ReportOptions,
) {
    let pid = printer.pid_of(record);
    let _ = write!(
        line,
        "{:>16}-{:<5} [{:03}]",
        printer.comm(pid),
        pid,
        record.cpu
    );
    let ts = record.timestamp;
    if !in_ns {
        // Counters and the TSC print as raw numbers.
        let _ = write!(line, "{ts:>12}: ");
    } else if opts.nanoseconds {
        let _ = write!(
            line,
            " {:5}.{:09}: ",
            ts / 1_000_000_000,
            ts % 1_000_000_000
        );
    } else {
        // libtraceevent rounds to the microsecond.
        let us = ts.wrapping_add(500) / 1000;
        let _ = write!(line, " {:5}.{:06}: ", us / 1_000_000, us % 1_000_000);
    }
}

/// Whether trace-cmd takes a trace clock's values as nanoseconds (and
/// prints them as seconds): its list, to which a file without a clock
/// belongs ("local").
fn clock_in_ns(clock: Option<&str>) -> bool {
    match clock {
        None => true,
        Some(c) => {
            matches!(c, "local" | "global" | "uptime" | "perf" | "tai") || c.starts_with("mono")
        }
    }
}

/// `*` and `?` globbing.
fn glob_match(pattern: &str, text: &str) -> bool {
    let (p, t) = (pattern.as_bytes(), text.as_bytes());
    let (mut pi, mut ti) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ti < t.len() {
        if pi < p.len() && (p[pi] == b'?' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, ti));
            pi += 1;
        } else if let Some((sp, st)) = star {
            pi = sp + 1;
            ti = st + 1;
            star = Some((sp, st + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn globs() {
        assert!(glob_match("sched_*", "sched_switch"));
        assert!(glob_match("sched:*", "sched:sched_switch"));
        assert!(!glob_match("irq*", "sched_switch"));
        assert!(glob_match("s?hed*", "sched"));
    }
}
