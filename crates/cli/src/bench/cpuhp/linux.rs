//! `hotkern bench cpuhp --linux`: the anchor for hotkern's CPU hotplug
//! figures. Debian's own Linux kernel for the architecture asked for
//! (`linux-image-amd64`, or `linux-image-arm64` under `--arch aarch64`)
//! boots on the QEMU configuration the hotkern kernel uses (TCG, 4 vCPUs;
//! qboot where installed on x86-64, `virt` with a GICv3 and Cortex-A72s on
//! aarch64) with an initramfs of busybox and a script, and times its
//! sysfs CPU offline and online writes; the cases carry the names the
//! hotkern kernel gives its own, so that `linux` sits beside `classic` and
//! `bolt`.

mod console;

use std::path::Path;
use std::time::Duration;

use console::{Line, Marker};

use super::super::{Case, Report};
use crate::linux::Guest;
use crate::progress::Progress;
use crate::qemu::console::Console;
use crate::qemu::Architecture;
use crate::statistics::median;

/// vCPUs, as `bench cpuhp --platform qemu` gives the hotkern kernel.
const CPUS: u32 = 4;
/// Debian's kernel and a busybox initramfs fit in what the hotkern kernel
/// gets.
const MEMORY_MIB: u64 = 128;
/// Offline/online cycles of each CPU per case.
const REPS: u32 = 5;
/// Linux boots to userspace in 8–9 s under TCG on the development VMs
/// (x86-64; arm64 about as long); the whole run takes about twice that.
const TIMEOUT: Duration = Duration::from_secs(180);

/// Measures Linux built for `arch`; with `with_kernel`, first runs the
/// hotkern kernel's cases for `arch` on the same QEMU configuration, its
/// tick at `hz` (Debian's kernels are built with HZ=250), and reports
/// both, with ratios.
pub fn run(with_kernel: bool, hz: u32, arch: Architecture) -> Result<Report, String> {
    // Before the hotkern kernel's boot: a missing package is said at once.
    let guest = Guest::find(arch).map_err(|error| format!("bench cpuhp --linux: {error}"))?;
    let qemu = guest.qemu()?;
    let mut report = if with_kernel {
        super::qemu::run(hz, arch)?
    } else {
        let mut report = Report::new("cpuhp");
        report.table_figures = vec!["latency_us"];
        report
    };
    let measured = measure(&guest, &qemu)?;
    add_cases(&mut report, &measured);
    Ok(report)
}

/// Boots the guest with the script that takes CPUs offline and online,
/// and collects the timings.
fn measure(guest: &Guest, qemu: &Path) -> Result<Measured, String> {
    let cpus: Vec<u32> = (1..CPUS).collect();
    let initramfs = guest.initramfs(&console::init_script(REPS, &cpus), &[]);
    let config = guest.qemu_config(CPUS, MEMORY_MIB);
    guest.boot(qemu, config, &initramfs, |console| {
        follow(console, guest.arch)
    })
}

/// What a run measured.
struct Measured {
    /// The architecture it ran on.
    arch: Architecture,
    /// The kernel release, as `uname -r` says.
    release: String,
    /// From starting QEMU to the script's first line.
    boot: Duration,
    /// Nanoseconds per case, cases in the order they ran.
    samples: Vec<(String, Vec<u64>)>,
}

/// What the guest's console has said so far: where it got to, and what
/// it measured.
struct Transcript {
    progress: Progress,
    stage: String,
    last_line: Option<String>,
    up: Option<(u32, String, Duration)>,
    markers: Vec<Marker>,
    errors: Vec<String>,
    done: bool,
}

impl Transcript {
    fn take(&mut self, line: &str, at: Duration) {
        let progress = &self.progress;
        if !line.trim().is_empty() {
            self.last_line = Some(line.to_owned());
        }
        let advance = |stage: &mut String, now: String| {
            *stage = now;
            progress.start(stage);
            progress.advance();
        };
        match console::parse_line(line) {
            None if self.up.is_none() && self.stage.starts_with("QEMU") => {
                advance(&mut self.stage, "the kernel was booting".into());
            }
            None => {}
            Some(Line::Up { cpus, release }) => {
                advance(
                    &mut self.stage,
                    format!("/init was running on Linux {release}"),
                );
                self.up = Some((cpus, release, at));
            }
            Some(Line::Case(case)) => advance(&mut self.stage, format!("case {case}")),
            Some(Line::Error(error)) => self.errors.push(error),
            Some(Line::Trace) => advance(&mut self.stage, "printing the trace".into()),
            Some(Line::Done) => self.done = true,
            Some(Line::Marker(marker)) => self.markers.push(marker),
            Some(Line::Entries { kept, written }) if kept < written => self.errors.push(format!(
                "the trace buffer kept {kept} of {written} events: markers were lost"
            )),
            Some(Line::Entries { .. }) => {}
        }
    }

    fn where_it_got(&self) -> String {
        format!(
            "it got to: {}; last console line: {}",
            self.stage,
            self.last_line.as_deref().unwrap_or("(none)")
        )
    }
}

impl crate::linux::Script for Transcript {
    fn take(&mut self, line: &str, at: Duration) -> bool {
        Transcript::take(self, line, at);
        self.done
    }

    fn where_it_got(&self) -> String {
        Transcript::where_it_got(self)
    }
}

/// Follows the console of the QEMU just started until the script is done
/// (or [`TIMEOUT`]), and pairs the markers of Linux on `arch`.
fn follow(console: Console, arch: Architecture) -> Result<Measured, String> {
    // Boot, userspace, three cases, the trace.
    let progress = Progress::steps("linux", 6);
    progress.start("QEMU started (TCG)");
    let mut seen = Transcript {
        progress,
        stage: "QEMU started; no console output yet".into(),
        last_line: None,
        up: None,
        markers: Vec::new(),
        errors: Vec::new(),
        done: false,
    };
    let followed = crate::linux::follow_script(console, TIMEOUT, &mut seen);
    seen.progress.finish();
    followed?;
    if !seen.errors.is_empty() {
        return Err(format!(
            "Linux's run went wrong: {}",
            seen.errors.join("; ")
        ));
    }
    let Some((cpus, release, boot)) = seen.up else {
        return Err("the guest's script never said it was up".into());
    };
    if cpus != CPUS {
        return Err(format!("Linux brought up {cpus} of {CPUS} vCPUs"));
    }
    Ok(Measured {
        arch,
        release,
        boot,
        samples: console::pair(&seen.markers)?,
    })
}

/// Adds Linux's cases, its ratios to the hotkern kernel's engines where
/// both measured a case, and the notes saying what the figures are.
fn add_cases(report: &mut Report, measured: &Measured) {
    for (name, nanos) in &measured.samples {
        let min = nanos.iter().min().copied().unwrap_or(0);
        let max = nanos.iter().max().copied().unwrap_or(0);
        report.cases.push(
            Case::new(name, "linux", nanos.len() as u64)
                .with("latency_us", median(nanos) / 1e3)
                .with("min_us", min as f64 / 1e3)
                .with("max_us", max as f64 / 1e3),
        );
        for engine in ["classic", "bolt"] {
            let key = format!("{}/linux_over_{engine}", name.replace('/', "-"));
            report.ratio(&key, name, "latency_us", "linux", engine);
        }
    }
    // Rows of one case together, in the order the cases first appear.
    let mut order: Vec<String> = Vec::new();
    for case in &report.cases {
        if !order.contains(&case.name) {
            order.push(case.name.clone());
        }
    }
    report
        .cases
        .sort_by_key(|case| order.iter().position(|name| *name == case.name));
    report.notes.push(format!(
        "linux: Debian's Linux {} ({}) under TCG, {CPUS} vCPUs, {MEMORY_MIB} MiB, booted to \
         userspace in {:.1} s; latency_us = median of `echo 0|1 > \
         /sys/devices/system/cpu/cpuN/online` (CPUs 1-{}, {REPS} times each), timed by ftrace \
         markers around the write, so it includes the shell's write system call; -load: one \
         busy loop per vCPU; bulk: the CPUs one after another (sysfs takes one at a time)",
        measured.release,
        measured.arch,
        measured.boot.as_secs_f64(),
        CPUS - 1,
    ));
    if report.ratios.keys().any(|key| key.contains("/linux_over_")) {
        report.notes.push(
            "linux_over_classic, linux_over_bolt: Linux's time for the same case over the \
             hotkern kernel's, on the same QEMU; Linux runs its whole hotplug state machine \
             from a system call, the hotkern kernel its engine's steps from a kernel call"
                .to_owned(),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linux_cases_sit_beside_the_engines_with_ratios() {
        let mut report = Report::new("cpuhp");
        report
            .cases
            .push(Case::new("offline/1-load", "classic", 15).with("latency_us", 400.0));
        report
            .cases
            .push(Case::new("online/1-load", "classic", 15).with("latency_us", 300.0));
        report
            .cases
            .push(Case::new("offline/1-load", "bolt", 15).with("latency_us", 200.0));
        let measured = Measured {
            arch: Architecture::Aarch64,
            release: "6.1.0-56-amd64".into(),
            boot: Duration::from_millis(8_500),
            samples: vec![
                ("offline/1".into(), vec![30_000_000, 50_000_000, 90_000_000]),
                ("offline/1-load".into(), vec![40_000_000, 40_000_000]),
            ],
        };
        add_cases(&mut report, &measured);
        let rows: Vec<(&str, &str)> = report
            .cases
            .iter()
            .map(|c| (c.name.as_str(), c.implementation.as_str()))
            .collect();
        assert_eq!(
            rows,
            [
                ("offline/1-load", "classic"),
                ("offline/1-load", "bolt"),
                ("offline/1-load", "linux"),
                ("online/1-load", "classic"),
                ("offline/1", "linux"),
            ]
        );
        let idle = report.case("offline/1", "linux").unwrap();
        assert_eq!(idle.ops, 3);
        assert_eq!(idle.figure("latency_us"), Some(50_000.0));
        assert_eq!(idle.figure("max_us"), Some(90_000.0));
        assert_eq!(report.ratios["offline-1-load/linux_over_classic"], 100.0);
        assert_eq!(report.ratios["offline-1-load/linux_over_bolt"], 200.0);
        assert!(!report.ratios.contains_key("offline-1/linux_over_classic"));
        assert!(report.notes[0].contains("Linux 6.1.0-56-amd64 (aarch64)"));
        assert!(report.notes[1].contains("linux_over_classic"));
    }
}
