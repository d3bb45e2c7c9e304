//! What `hotkern boot` says about a run: the kernel's summary line parsed,
//! and the table or JSON document built from it and the host's timings.

use std::time::Duration;

use serde_json::{json, Value};

use crate::qemu::{Outcome, QemuConfig};

/// The prefix of the kernel's summary line (crates/baremetal/src/runs/summary.rs).
pub const SUMMARY_PREFIX: &str = "hotkern: summary ";
/// Prefixes of the lines the kernel prints when it stops on a fault.
const FAULT_PREFIXES: [&str; 2] = ["hotkern: exception ", "hotkern: panic"];

/// The kernel's summary document, if `line` is the summary line. A line
/// with the prefix whose JSON does not parse, or lacks the check counts,
/// is an error: the kernel and this parser disagree.
pub fn parse_summary(line: &str) -> Option<Result<Value, String>> {
    let document = line.trim_end().strip_prefix(SUMMARY_PREFIX)?;
    let parsed = serde_json::from_str::<Value>(document)
        .map_err(|error| format!("the kernel's summary line is not JSON ({error})"))
        .and_then(|value| {
            let counted = ["passed", "failed"]
                .iter()
                .all(|key| value["checks"][key].is_u64());
            if counted {
                Ok(value)
            } else {
                Err("the kernel's summary line has no check counts".to_owned())
            }
        });
    Some(parsed)
}

/// Whether `line` is the kernel reporting an exception or a panic.
pub fn is_fault_line(line: &str) -> bool {
    FAULT_PREFIXES.iter().any(|prefix| line.starts_with(prefix))
}

/// Everything known about one run.
#[derive(Debug)]
pub struct RunReport {
    /// How it ended.
    pub outcome: Outcome,
    /// QEMU's exit status, if it exited.
    pub status: Option<i32>,
    /// How QEMU was run.
    pub config: QemuConfig,
    /// Building the kernel, when `hotkern boot` built it.
    pub build: Option<Duration>,
    /// From starting QEMU to the kernel's first console line.
    pub first_line: Option<Duration>,
    /// From starting QEMU to its exit.
    pub total: Duration,
    /// Console lines seen.
    pub lines: usize,
    /// The last console line (where the kernel got to).
    pub last_line: Option<String>,
    /// The exception or panic line, if the kernel printed one.
    pub fault: Option<String>,
    /// The kernel's summary document.
    pub summary: Option<Value>,
    /// A summary line that did not parse.
    pub summary_error: Option<String>,
    /// What QEMU wrote on its standard error.
    pub qemu_stderr: String,
    /// The kernel's trace.dat, checked against its summary.
    pub trace: Option<super::trace::Trace>,
    /// Why the trace could not be taken, if it could not.
    pub trace_error: Option<String>,
    /// What the console said of a crash dump.
    pub crash_lines: super::crash_dump::DumpLines,
    /// The crash dump, once settled after QEMU exited.
    pub crash_dump: Result<Option<super::crash_dump::CrashDump>, super::crash_dump::Incomplete>,
    /// The SHA-256 the host read from `--disk` for `--load`'s file.
    pub load_expected: Option<Result<String, String>>,
    /// The SHA-256 the host found for the tree `--walk` names, if any.
    pub walk_expected: Option<Result<String, String>>,
    /// The host's resizes of the virtio-mem device (`--resize`), or why
    /// they could not be made.
    pub resizes: Option<Result<Vec<crate::qemu::qmp::Resized>, String>>,
    /// With `--differential`: the kernel's step log against the machine's.
    pub differential: Option<super::differential::Comparison>,
}

fn seconds(duration: Duration) -> f64 {
    (duration.as_secs_f64() * 1e6).round() / 1e6
}

impl RunReport {
    /// The report of a run QEMU has just started with `config`: a timeout
    /// until the run says otherwise, nothing seen yet.
    pub fn started(config: QemuConfig, build: Option<Duration>) -> RunReport {
        RunReport {
            outcome: Outcome::Timeout,
            status: None,
            config,
            build,
            first_line: None,
            total: Duration::ZERO,
            lines: 0,
            last_line: None,
            fault: None,
            summary: None,
            summary_error: None,
            qemu_stderr: String::new(),
            trace: None,
            trace_error: None,
            crash_lines: Default::default(),
            crash_dump: Ok(None),
            load_expected: None,
            walk_expected: None,
            resizes: None,
            differential: None,
        }
    }

    /// One JSON document.
    pub fn to_json(&self) -> Value {
        let (invariants_hold, tasks_lost, cases) = super::hotplug::top_level(self.summary.as_ref());
        json!({
            "outcome": self.outcome.name(),
            "message": self.outcome.to_string(),
            "qemu_status": self.status,
            "arch": self.config.arch.name(),
            "accel": if self.config.kvm { "kvm" } else { "tcg" },
            "icount": self.config.icount,
            "cpus": self.config.cpus,
            "memory_mib": self.config.memory_mib,
            "firmware": self.config.firmware.as_ref().map(|path| path.display().to_string()),
            "append": self.config.append,
            "host": {
                "build_s": self.build.map(seconds),
                "first_line_s": self.first_line.map(seconds),
                "total_s": seconds(self.total),
            },
            "console_lines": self.lines,
            "last_line": self.last_line,
            "fault": self.fault,
            "summary_error": self.summary_error,
            "trace_events": self.trace.as_ref().map(|t| t.events),
            "trace_lost": self.trace.as_ref().map(|t| t.lost),
            "trace_dat": self.trace.as_ref().map(|t| t.path.display().to_string()),
            "trace_error": self.trace_error,
            "crash": super::crash_dump::to_json(&self.crash_dump),
            "invariants_hold": invariants_hold,
            "tasks_lost": tasks_lost,
            "cases": cases,
            "load": super::disk::top_level(self.summary.as_ref(), "load", self.load_expected.as_ref()),
            "walk": super::disk::top_level(self.summary.as_ref(), "walk", self.walk_expected.as_ref()),
            "resizes": match &self.resizes {
                Some(Ok(resizes)) => Value::from(resizes.iter().map(|r| r.to_json()).collect::<Vec<_>>()),
                _ => Value::Null,
            },
            "resize_error": self.resizes.as_ref().and_then(|r| r.as_ref().err()),
            "pages_lost": self.summary.as_ref().map_or(Value::Null, |s| s["vmem"]["pages_lost"].clone()),
            "differential": self.differential.as_ref().map(|c| c.to_json()),
            "guest": self.summary,
        })
    }

    /// One line on why the run failed: the kernel's fault line, else the
    /// checks that failed, else where the console stopped.
    pub fn failure_message(&self) -> String {
        let outcome = &self.outcome;
        let failures: Vec<&str> = self
            .summary
            .as_ref()
            .and_then(|summary| summary["checks"]["failures"].as_array())
            .map(|names| names.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        match (&self.fault, &self.last_line) {
            (Some(fault), _) => match &self.crash_dump {
                Err(incomplete) => format!(
                    "{outcome}: {}; {incomplete}",
                    fault.trim_start_matches("hotkern: ")
                ),
                Ok(_) => format!("{outcome}: {}", fault.trim_start_matches("hotkern: ")),
            },
            _ if !failures.is_empty() => format!("{outcome}: {}", failures.join("; ")),
            (None, Some(last)) => format!("{outcome} (last console line: {last})"),
            (None, None) => format!("{outcome} (no console output)"),
        }
    }

    /// Why `--resize` did not work, if it did not: QMP failed, or a size
    /// was not reached in time.
    pub fn resize_failure(&self) -> Option<String> {
        match self.resizes.as_ref()? {
            Err(error) => Some(format!("--resize: {error}")),
            Ok(resizes) => resizes.iter().find(|r| r.latency_ms.is_none()).map(|r| {
                format!(
                    "--resize: the guest plugged {} MiB of the {} MiB asked for, in time",
                    r.plugged_mib, r.requested_mib
                )
            }),
        }
    }

    /// A readable table.
    pub fn to_table(&self) -> String {
        let mut out = String::new();
        let mut row = |name: &str, value: String| out.push_str(&format!("  {name:<14} {value}\n"));
        let config = &self.config;
        let firmware = match &config.firmware {
            Some(path) => path.file_name().map_or_else(
                || path.display().to_string(),
                |name| name.to_string_lossy().into_owned(),
            ),
            None => "QEMU's default firmware".to_owned(),
        };
        row(
            "machine",
            format!(
                "QEMU {}{}, {} vCPU{}, {} MiB, {firmware}",
                if config.kvm { "KVM" } else { "TCG" },
                if config.icount { " (icount)" } else { "" },
                config.cpus,
                if config.cpus == 1 { "" } else { "s" },
                config.memory_mib
            ),
        );
        if let Some(build) = self.build {
            row(
                "build",
                format!("{:.3} s (cargo, release)", build.as_secs_f64()),
            );
        }
        row(
            "console",
            match self.first_line {
                Some(first) => format!(
                    "first line {:.3} s after QEMU started, {} lines",
                    first.as_secs_f64(),
                    self.lines
                ),
                None => "no output".to_owned(),
            },
        );
        row(
            "run",
            format!(
                "{:.3} s from QEMU start to exit{}",
                self.total.as_secs_f64(),
                self.status
                    .map_or_else(String::new, |status| format!(" (status {status})"))
            ),
        );
        if let Some(summary) = &self.summary {
            guest_rows(summary, &mut row);
            for (key, expected) in [("load", &self.load_expected), ("walk", &self.walk_expected)] {
                super::disk::rows(
                    key,
                    &super::disk::top_level(Some(summary), key, expected.as_ref()),
                    &mut row,
                );
            }
        }
        if let Some(comparison) = &self.differential {
            comparison.rows(&mut row);
        }
        match &self.resizes {
            Some(Ok(resizes)) => {
                for resize in resizes {
                    row(
                        "resize",
                        format!(
                            "{} MiB: plugged {} MiB{}",
                            resize.requested_mib,
                            resize.plugged_mib,
                            resize
                                .latency_ms
                                .map_or(" (not reached)".to_owned(), |ms| format!(
                                    " in {ms:.1} ms"
                                ))
                        ),
                    );
                }
            }
            Some(Err(error)) => row("resize", error.clone()),
            None => {}
        }
        if let Some(error) = &self.summary_error {
            row("summary", error.clone());
        }
        if let Some(trace) = &self.trace {
            row(
                "trace",
                format!(
                    "{} events ({} lost), {} in {}",
                    trace.events,
                    trace.lost,
                    size(trace.bytes),
                    trace.path.display()
                ),
            );
        }
        if let Some(error) = &self.trace_error {
            row("trace", error.clone());
        }
        if let Some(fault) = &self.fault {
            row("fault", fault.clone());
        }
        if !self.outcome.is_success() {
            if let Some(last) = self.last_line.as_ref().filter(|_| self.summary.is_none()) {
                row("last line", last.clone());
            }
            let stderr = self.qemu_stderr.trim();
            if !stderr.is_empty() {
                row(
                    "QEMU said",
                    stderr.lines().take(5).collect::<Vec<_>>().join(" / "),
                );
            }
        }
        if let Some(line) = super::crash_dump::describe(&self.crash_dump) {
            out.push_str(&format!("{line}\n"));
        }
        format!("hotkern boot: {}\n{out}", self.outcome)
    }
}

/// Bytes as MiB or KiB, whichever reads better.
fn size(bytes: u64) -> String {
    if bytes >= 4 << 20 {
        format!("{} MiB", bytes >> 20)
    } else {
        format!("{} KiB", bytes >> 10)
    }
}

/// The kernel's own figures, as table rows.
fn guest_rows(summary: &Value, row: &mut impl FnMut(&str, String)) {
    let number = |path: &[&str]| {
        path.iter()
            .try_fold(summary, |value, key| value.get(key))
            .and_then(Value::as_u64)
    };
    let millis = |micros: u64| format!("{:.1} ms", micros as f64 / 1000.0);
    if let Some(boot_us) = number(&["boot_us"]) {
        let tsc = number(&["tsc_mhz"]).map_or_else(String::new, |mhz| format!(" (TSC {mhz} MHz)"));
        row(
            "kernel",
            format!(
                "{} from its first instruction to the summary{tsc}",
                millis(boot_us)
            ),
        );
        let phases: Vec<String> = ["physload", "heap", "init_pages", "checks"]
            .iter()
            .filter_map(|phase| {
                number(&["phases_us", phase]).map(|us| format!("{phase} {}", millis(us)))
            })
            .collect();
        if !phases.is_empty() {
            row("", phases.join(", "));
        }
    }
    if let (Some(frames), Some(segments)) = (
        number(&["memory", "frames"]),
        number(&["memory", "segments"]),
    ) {
        row(
            "physmem",
            format!(
                "{} in {segments} segment{} ({frames} frames) of {} RAM; kernel {}",
                size(frames * 4096),
                if segments == 1 { "" } else { "s" },
                size(number(&["memory", "ram_bytes"]).unwrap_or(0)),
                size(number(&["memory", "kernel_bytes"]).unwrap_or(0)),
            ),
        );
    }
    if let Some(heap) = number(&["memory", "heap_bytes"]) {
        row(
            "heap",
            format!(
                "{} on frames from physmem; {} in use, peak {}; {}-byte page descriptors",
                size(heap),
                size(number(&["memory", "heap_used_bytes"]).unwrap_or(0)),
                size(number(&["memory", "heap_peak_bytes"]).unwrap_or(0)),
                number(&["memory", "page_descriptor_bytes"]).unwrap_or(0),
            ),
        );
    }
    let cpus = number(&["cpus"]).unwrap_or(0);
    let hypervisor = summary["hypervisor"].as_str().unwrap_or("none");
    row(
        "cpus",
        format!("{cpus} running the kernel; hypervisor {hypervisor}"),
    );
    smp_rows(&summary["smp"], row);
    super::hotplug::rows(&summary["hotplug"], row);
    super::vmem::guest_rows(&summary["vmem"], row);
    row(
        "checks",
        format!(
            "{} passed, {} failed, {} skipped",
            number(&["checks", "passed"]).unwrap_or(0),
            number(&["checks", "failed"]).unwrap_or(0),
            number(&["checks", "skipped"]).unwrap_or(0),
        ),
    );
    if let Some(failures) = summary["checks"]["failures"].as_array() {
        for failure in failures.iter().filter_map(Value::as_str) {
            row("  failed", failure.to_owned());
        }
    }
}

/// A JSON array of numbers as "a, b, c" (empty when absent).
fn numbers(value: &Value) -> String {
    value
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(Value::as_u64)
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        })
        .unwrap_or_default()
}

/// The kernel's SMP figures (`"smp"`): CPUs found and online, ticks, the
/// cross-CPU call's round trip, AP start and offline/online times.
fn smp_rows(smp: &Value, row: &mut impl FnMut(&str, String)) {
    let Some(online) = smp["cpus_online"].as_u64() else {
        return;
    };
    row(
        "",
        format!(
            "{online} of {} found online (APIC ids {}); ticks per CPU {} at {} Hz",
            smp["cpus_found"].as_u64().unwrap_or(0),
            numbers(&smp["apic_ids"]),
            numbers(&smp["ticks"]),
            smp["tick_hz"].as_u64().unwrap_or(0),
        ),
    );
    if let (Some(mean), Some(min)) = (
        smp["call_round_trip_ns"].as_u64(),
        smp["call_round_trip_min_ns"].as_u64(),
    ) {
        row(
            "IPI call",
            format!(
                "round trip {:.1} µs median, {:.1} µs fastest",
                mean as f64 / 1000.0,
                min as f64 / 1000.0
            ),
        );
    }
    if smp["start_us"]
        .as_array()
        .is_some_and(|aps| !aps.is_empty())
    {
        row("AP start", format!("{} µs", numbers(&smp["start_us"])));
        row(
            "offline/online",
            format!(
                "offline {} µs; online {} µs",
                numbers(&smp["offline_us"]),
                numbers(&smp["online_us"])
            ),
        );
    }
    if let Some(error) = smp["acpi_error"].as_str() {
        row("  ACPI", error.to_owned());
    }
}

#[cfg(test)]
#[path = "report_tests.rs"]
mod tests;
