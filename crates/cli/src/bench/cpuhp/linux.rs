//! `hotkern bench cpuhp --linux`: the anchor for hotkern's CPU hotplug
//! figures. Debian's own Linux kernel boots on the QEMU configuration the
//! hotkern kernel uses (TCG, 4 vCPUs, qboot where installed) with an
//! initramfs of busybox and a script, and times its sysfs CPU offline and
//! online writes; the cases carry the names the hotkern kernel gives its
//! own, so that `linux` sits beside `classic` and `bolt`.

mod console;
pub(crate) mod cpio;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use console::{Line, Marker};

use super::super::measure::median;
use super::super::{Case, Progress, Report};
use crate::boot::console::Console;
use crate::boot::qemu::{self, QemuConfig, QEMU, QEMU_PACKAGE};

/// vCPUs, as `bench cpuhp --platform qemu` gives the hotkern kernel.
const CPUS: u32 = 4;
/// Debian's kernel and a busybox initramfs fit in what the hotkern kernel
/// gets.
const MEMORY_MIB: u64 = 128;
/// Offline/online cycles of each CPU per case.
const REPS: u32 = 5;
/// Linux boots to userspace in 8–9 s under TCG on the development VMs;
/// the whole run takes about twice that.
const TIMEOUT: Duration = Duration::from_secs(120);
/// How long the guest may take to power off after its last line; a guest
/// that prints everything but does not power off still counts.
const POWER_OFF_GRACE: Duration = Duration::from_secs(5);

/// The Debian package of the kernel booted.
const LINUX_PACKAGE: &str = "linux-image-amd64";
/// The Debian package of the busybox in the initramfs: a static one, as
/// the initramfs has no C library.
const BUSYBOX_PACKAGE: &str = "busybox-static";
/// Where both busybox packages install it.
const BUSYBOX: &str = "/bin/busybox";
/// Where Debian installs its kernels (`vmlinuz-<release>`).
const BOOT_DIR: &str = "/boot";

/// Measures Linux; with `with_kernel`, first runs the hotkern kernel's
/// cases on the same QEMU configuration, its tick at `hz` (Debian's kernel
/// is built with HZ=250), and reports both, with ratios.
pub fn run(with_kernel: bool, hz: u32) -> Result<Report, String> {
    let mut report = if with_kernel {
        super::qemu::run(hz)?
    } else {
        let mut report = Report::new("cpuhp");
        report.table_figures = vec!["latency_us"];
        report
    };
    let guest = Guest::find()?;
    let qemu = qemu::find_in_path(QEMU, std::env::var_os("PATH")).ok_or_else(|| {
        format!("{QEMU} not found on PATH: apt-get install {QEMU_PACKAGE} (scripts/setup does it)")
    })?;
    let measured = guest.measure(&qemu)?;
    add_cases(&mut report, &measured);
    Ok(report)
}

/// What the guest is made of, found on this machine.
pub(crate) struct Guest {
    pub(crate) kernel: PathBuf,
    pub(crate) busybox: Vec<u8>,
}

impl Guest {
    /// Finds the kernel and a static busybox, or names the packages that
    /// would provide them.
    pub(crate) fn find() -> Result<Guest, String> {
        let kernel = newest_kernel(Path::new(BOOT_DIR));
        let busybox = std::fs::read(BUSYBOX)
            .ok()
            .filter(|bytes| is_static_elf(bytes));
        let mut missing = Vec::new();
        if kernel.is_none() {
            missing.push(LINUX_PACKAGE);
        }
        if busybox.is_none() {
            missing.push(BUSYBOX_PACKAGE);
        }
        match (kernel, busybox) {
            (Some(kernel), Some(busybox)) => Ok(Guest { kernel, busybox }),
            _ => Err(missing_message(&missing)),
        }
    }

    /// Writes the initramfs, boots, and collects the timings.
    fn measure(&self, qemu: &Path) -> Result<Measured, String> {
        let dir = std::env::temp_dir().join(format!("hotkern-linux-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|error| format!("{}: {error}", dir.display()))?;
        let initrd = dir.join("initramfs.cpio");
        let written = std::fs::write(&initrd, initramfs(&self.busybox))
            .map_err(|error| format!("{}: {error}", initrd.display()));
        let measured = written.and_then(|()| {
            let config = QemuConfig {
                kernel: self.kernel.clone(),
                firmware: qemu::firmware(),
                cpus: CPUS,
                memory_mib: MEMORY_MIB,
                kvm: false,
                icount: false,
                append: "console=ttyS0".into(),
                trace_file: None,
                disk: None,
                disk_profile: None,
                disk_error_at: None,
                hotplug: None,
            };
            let mut args = config.args();
            args.extend([OsString::from("-initrd"), initrd.clone().into()]);
            watch(qemu, &args)
        });
        let _ = std::fs::remove_dir_all(&dir);
        measured
    }
}

/// The message for missing packages, naming them and the command that
/// installs them.
fn missing_message(packages: &[&str]) -> String {
    let list = packages.join(" ");
    format!(
        "bench cpuhp --linux boots Debian's Linux kernel with a static busybox as its \
         userspace, and this machine lacks {}: apt-get install -y {list} (scripts/setup \
         leaves them out; they are only for this comparison)",
        packages
            .iter()
            .map(|p| format!("package {p}"))
            .collect::<Vec<_>>()
            .join(" and ")
    )
}

/// The `vmlinuz-*` of the highest release in `dir`.
fn newest_kernel(dir: &Path) -> Option<PathBuf> {
    let names: Vec<String> = std::fs::read_dir(dir)
        .ok()?
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| name.starts_with("vmlinuz-"))
        .collect();
    let newest = names.into_iter().max_by_key(|name| release_key(name))?;
    Some(dir.join(newest))
}

/// The numbers of a release (`6.1.0-56-amd64` is 6, 1, 0, 56), so that
/// 6.10 sorts after 6.9.
fn release_key(name: &str) -> Vec<u64> {
    name.split(|c: char| !c.is_ascii_digit())
        .filter_map(|part| part.parse().ok())
        .collect()
}

/// Whether `bytes` is an x86-64 ELF executable with no program
/// interpreter: the dynamic busybox package installs the same path, and
/// would not start in an initramfs without its C library.
fn is_static_elf(bytes: &[u8]) -> bool {
    const PT_INTERP: u32 = 3;
    let u16_at = |at: usize| {
        bytes
            .get(at..at + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
    };
    let u32_at = |at: usize| {
        bytes
            .get(at..at + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let u64_at = |at: usize| {
        bytes
            .get(at..at + 8)
            .and_then(|b| <[u8; 8]>::try_from(b).ok())
            .map(u64::from_le_bytes)
    };
    // 64-bit, little-endian.
    if bytes.get(..6) != Some(b"\x7fELF\x02\x01") {
        return false;
    }
    let (Some(phoff), Some(entry_size), Some(count)) = (u64_at(0x20), u16_at(0x36), u16_at(0x38))
    else {
        return false;
    };
    let entry_size = usize::from(entry_size);
    if entry_size < 4 {
        return false;
    }
    (0..usize::from(count)).all(|index| {
        let at = (phoff as usize).saturating_add(index * entry_size);
        // The whole entry must be there: a cut-off file is no executable.
        bytes.get(at..at.saturating_add(entry_size)).is_some()
            && u32_at(at).is_some_and(|kind| kind != PT_INTERP)
    })
}

/// The initramfs: busybox, the applet `sh` for the script's `#!`, the
/// mount points, the console, and the script as /init.
fn initramfs(busybox: &[u8]) -> Vec<u8> {
    let mut archive = cpio::Archive::new();
    for dir in ["bin", "dev", "proc", "sys"] {
        archive.directory(dir);
    }
    archive.file("bin/busybox", 0o755, busybox);
    archive.symlink("bin/sh", "busybox");
    archive.char_device("dev/console", 5, 1);
    let cpus: Vec<u32> = (1..CPUS).collect();
    archive.file("init", 0o755, console::init_script(REPS, &cpus).as_bytes());
    archive.finish()
}

/// What a run measured.
struct Measured {
    /// The kernel release, as `uname -r` says.
    release: String,
    /// From starting QEMU to the script's first line.
    boot: Duration,
    /// Nanoseconds per case, cases in the order they ran.
    samples: Vec<(String, Vec<u64>)>,
}

/// Where the guest got to, from its console.
struct Progressed {
    stage: String,
    last_line: Option<String>,
    up: Option<(u32, String, Duration)>,
    markers: Vec<Marker>,
    errors: Vec<String>,
    done: bool,
}

impl Progressed {
    fn take(&mut self, line: &str, at: Duration, progress: &Progress) {
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

/// Runs QEMU with `args`, follows the console until the script is done
/// (or [`TIMEOUT`]), and pairs the markers.
fn watch(qemu: &Path, args: &[OsString]) -> Result<Measured, String> {
    // Boot, userspace, three cases, the trace.
    let progress = Progress::new("linux", 6);
    progress.start("starting QEMU (TCG)");
    let started = Instant::now();
    let mut console = Console::start(qemu, args)?;
    let mut seen = Progressed {
        stage: "QEMU started; no console output yet".into(),
        last_line: None,
        up: None,
        markers: Vec::new(),
        errors: Vec::new(),
        done: false,
    };
    let deadline = started + TIMEOUT;
    let mut done_at: Option<Instant> = None;
    let timed_out = loop {
        let limit = done_at.map_or(deadline, |at| (at + POWER_OFF_GRACE).min(deadline));
        match console
            .lines
            .recv_timeout(limit.saturating_duration_since(Instant::now()))
        {
            Ok((_, line)) => {
                seen.take(&line, started.elapsed(), &progress);
                if seen.done {
                    done_at.get_or_insert_with(Instant::now);
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break false,
            Err(mpsc::RecvTimeoutError::Timeout) if Instant::now() >= limit => {
                let _ = console.child.kill();
                break done_at.is_none();
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
    };
    let (status, qemu_said) = console.finish();
    drop(progress);
    if timed_out {
        return Err(format!(
            "Linux did not finish within {} s and QEMU was killed; {}",
            TIMEOUT.as_secs(),
            seen.where_it_got()
        ));
    }
    if !seen.done {
        let status = status.map_or_else(|error| error.to_string(), |s| s.to_string());
        return Err(format!(
            "QEMU stopped ({status}) before the guest's script finished; {}; QEMU said: {}",
            seen.where_it_got(),
            qemu_said.trim()
        ));
    }
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
        "linux: Debian's Linux {} under TCG, {CPUS} vCPUs, {MEMORY_MIB} MiB, booted to \
         userspace in {:.1} s; latency_us = median of `echo 0|1 > \
         /sys/devices/system/cpu/cpuN/online` (CPUs 1-{}, {REPS} times each), timed by ftrace \
         markers around the write, so it includes the shell's write system call; -load: one \
         busy loop per vCPU; bulk: the CPUs one after another (sysfs takes one at a time)",
        measured.release,
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
    fn missing_packages_are_named_with_the_command_that_installs_them() {
        let both = missing_message(&[LINUX_PACKAGE, BUSYBOX_PACKAGE]);
        assert!(
            both.contains("package linux-image-amd64 and package busybox-static"),
            "{both}"
        );
        assert!(both.contains("apt-get install -y linux-image-amd64 busybox-static"));
        let one = missing_message(&[BUSYBOX_PACKAGE]);
        assert!(one.contains("apt-get install -y busybox-static"), "{one}");
        assert!(!one.contains(LINUX_PACKAGE));
    }

    #[test]
    fn releases_sort_by_their_numbers() {
        let mut names = ["vmlinuz-6.9.0-1-amd64", "vmlinuz-6.10.0-1-amd64"];
        names.sort_by_key(|name| release_key(name));
        assert_eq!(names[1], "vmlinuz-6.10.0-1-amd64");
        assert_eq!(release_key("vmlinuz-6.1.0-56-amd64"), [6, 1, 0, 56, 64]);
    }

    /// An ELF64 header with one program header of type `kind`.
    fn elf(kind: u32) -> Vec<u8> {
        let mut bytes = vec![0u8; 0x40 + 0x38];
        bytes[..6].copy_from_slice(b"\x7fELF\x02\x01");
        bytes[0x20..0x28].copy_from_slice(&0x40u64.to_le_bytes());
        bytes[0x36..0x38].copy_from_slice(&0x38u16.to_le_bytes());
        bytes[0x38..0x3a].copy_from_slice(&1u16.to_le_bytes());
        bytes[0x40..0x44].copy_from_slice(&kind.to_le_bytes());
        bytes
    }

    #[test]
    fn only_a_static_elf_will_do_for_busybox() {
        assert!(is_static_elf(&elf(1)));
        assert!(!is_static_elf(&elf(3)), "PT_INTERP: dynamically linked");
        assert!(!is_static_elf(b"#!/bin/sh\n"));
        assert!(!is_static_elf(&elf(1)[..0x50]), "truncated");
    }

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
        assert!(report.notes[0].contains("Linux 6.1.0-56-amd64"));
        assert!(report.notes[1].contains("linux_over_classic"));
    }
}
