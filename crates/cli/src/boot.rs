//! `hotkern boot`: builds the bare-metal kernel (crates/kernel-x86_64),
//! boots it under QEMU, watches its console and says how the run ended.
//!
//! The kernel reports through three channels: its console on the first
//! serial port (`-serial stdio`), one `hotkern: summary {json}` line at the
//! end, and QEMU's exit status, which it sets through the `isa-debug-exit`
//! device. A run that goes past `--timeout` is killed, and the last console
//! line says where the kernel got to.

pub(crate) mod console;
mod disk;
mod hotplug;
mod linux;
pub mod qemu;
mod qmp;
mod report;
mod trace;
mod watch;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};

use qemu::{QemuConfig, MAX_CPUS, QEMU, QEMU_PACKAGE};
pub use report::RunReport;

/// The kernel crate's directory, where this binary was built from.
const KERNEL_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../kernel-x86_64");
/// The kernel's target: no operating system, soft float.
const KERNEL_TARGET: &str = "x86_64-unknown-none";
/// The kernel binary's name.
const KERNEL_BIN: &str = "hotkern-kernel";

/// The default scenario's virtio-mem device, in MiB, and its resizes.
const DEFAULT_HOTPLUG_MIB: u64 = 64;
const DEFAULT_RESIZES: [u64; 3] = [32, 64, 16];

/// `hotkern boot`'s options.
#[derive(Debug, Clone, clap::Args)]
#[command(group(clap::ArgGroup::new("read").multiple(true)))]
pub struct BootArgs {
    /// vCPUs to give QEMU; with more than one, the kernel takes them
    /// offline and online with each hotplug engine while tasks run.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_CPUS)))]
    cpus: u32,
    /// Guest memory, as QEMU's -m takes it: 128M, 1G, ...
    #[arg(long, default_value = "128M", value_parser = qemu::parse_memory)]
    memory: u64,
    /// Run under KVM (needs /dev/kvm) instead of TCG.
    #[arg(long)]
    kvm: bool,
    /// Run under TCG's instruction-counting mode (QEMU's `-icount
    /// shift=0,sleep=off`): every vCPU round-robin in one host thread, the
    /// guest's clock counted in instructions. A different interleaving,
    /// for robustness; slower, and its times are no figures.
    #[arg(long, conflicts_with = "kvm")]
    icount: bool,
    /// Stream the kernel's console to standard error.
    #[arg(short, long)]
    verbose: bool,
    /// Print one JSON document on stdout instead of a table.
    #[arg(long)]
    json: bool,
    /// Kill QEMU after this many seconds.
    #[arg(long, default_value_t = 60.0, value_parser = parse_timeout)]
    timeout: f64,
    /// The kernel command line; `crash=page-fault|panic|hang|check` makes
    /// the kernel fail on purpose, to see how each ending is reported.
    #[arg(long, default_value = "")]
    append: String,
    /// The hotplug engines the kernel runs its cases with.
    #[arg(long, value_enum, default_value_t = EngineChoice::Both)]
    engine: EngineChoice,
    /// The kernel's tick rate (its `hz=`; default 1000), as Linux's
    /// CONFIG_HZ: it times normal grace periods.
    #[arg(long, value_parser = ["100", "250", "300", "1000"])]
    hz: Option<String>,
    /// A FAT disk image for the kernel, as a read-only virtio-blk device.
    #[arg(long, requires = "read")]
    disk: Option<PathBuf>,
    /// The file the kernel loads from the disk, e.g. boot/kernel/kernel,
    /// in 512-byte requests as a boot loader does.
    #[arg(long, requires = "disk", group = "read", value_parser = parse_load_path)]
    load: Option<String>,
    /// A directory whose every file the kernel reads from the disk, depth
    /// first in on-disk order, as a loader reads its modules (after
    /// `--load`'s file, through a cache of its own).
    #[arg(long, requires = "disk", group = "read", value_parser = parse_load_path)]
    walk: Option<String>,
    /// Boot without the scratch disk: by default, without `--disk`, the
    /// kernel loads a 1 MiB file from a small FAT image written into the
    /// output directory.
    #[arg(long, conflicts_with = "disk")]
    no_disk: bool,
    /// The device the disk imitates (QEMU block throttling at its
    /// operation rate and bandwidth, its block size and largest transfer).
    #[arg(long, requires = "disk", value_parser = crate::load::DEVICES)]
    profile: Option<String>,
    /// Make the disk fail every read that covers this 512-byte sector with
    /// an I/O error (QEMU's blkdebug), to see how the kernel reports a
    /// failing device.
    #[arg(long, requires = "disk")]
    disk_error_at: Option<u64>,
    /// The cache design the kernel loads through.
    #[arg(long, default_value = "hotkern", value_parser = crate::load::CACHES)]
    cache: String,
    /// Memory the host can plug while the kernel runs: a virtio-mem device
    /// of this size (2 MiB blocks, nothing plugged at boot) and a QMP socket.
    #[arg(long, value_parser = qemu::parse_memory, conflicts_with = "no_hotplug")]
    hotplug: Option<u64>,
    /// Sizes to resize the virtio-mem device to, in turn, over QMP while
    /// the kernel follows (e.g. 128M,256M,64M); each is timed until the
    /// guest has plugged it.
    #[arg(long, requires = "hotplug", value_parser = parse_resizes)]
    resize: Option<Resizes>,
    /// Boot without the virtio-mem device: by default, without
    /// `--hotplug`, the host plugs 32, 64, then 16 MiB of a 64 MiB device.
    #[arg(long)]
    no_hotplug: bool,
    /// After the hotkern kernel, boot Debian's Linux kernel (packages
    /// linux-image-amd64 and busybox-static) on the same QEMU
    /// configuration and make the same resizes with its virtio_mem
    /// driver, timed the same way; each latency is printed beside
    /// hotkern's.
    #[arg(long, requires = "resize")]
    linux: bool,
    /// Boot this kernel ELF instead of building crates/kernel-x86_64.
    #[arg(long)]
    kernel: Option<PathBuf>,
    /// Where to write the kernel's trace.dat (read it with `trace-cmd
    /// report DIR/trace.dat`); a directory under the temporary one if not
    /// given.
    #[arg(short = 'o', long = "output")]
    output: Option<PathBuf>,
}

/// `--engine`: which hotplug engines the kernel runs (its `engine=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum EngineChoice {
    /// Linux's kernel/cpu.c as the Bolt paper describes it.
    Classic,
    /// Bolt (ATC 2015).
    Bolt,
    /// Both, one after the other, with the same steps and tasks.
    Both,
}

impl EngineChoice {
    fn name(self) -> &'static str {
        match self {
            EngineChoice::Classic => "classic",
            EngineChoice::Bolt => "bolt",
            EngineChoice::Both => "both",
        }
    }
}

impl BootArgs {
    /// The same run with the kernel's tick at `hz` (its `hz=`).
    pub fn with_hz(mut self, hz: u32) -> BootArgs {
        self.hz = Some(hz.to_string());
        self
    }

    /// The default scenario on `cpus` vCPUs under TCG, quiet, for callers
    /// that want the report rather than the printout (`bench --platform
    /// qemu`, the tour).
    pub fn scenario(cpus: u32) -> BootArgs {
        BootArgs {
            cpus,
            memory: 128,
            kvm: false,
            icount: false,
            verbose: false,
            json: false,
            timeout: 120.0,
            append: String::new(),
            engine: EngineChoice::Both,
            hz: None,
            disk: None,
            load: None,
            walk: None,
            no_disk: false,
            profile: None,
            disk_error_at: None,
            cache: "hotkern".into(),
            hotplug: None,
            resize: None,
            no_hotplug: true,
            linux: false,
            kernel: None,
            output: None,
        }
    }
}

/// A path for the kernel's command line, where words are split at spaces.
fn parse_load_path(text: &str) -> Result<String, String> {
    if text.is_empty() || text.chars().any(char::is_whitespace) {
        Err(format!(
            "{text:?}: a path without spaces (the kernel splits its command line at them)"
        ))
    } else {
        Ok(text.to_owned())
    }
}

impl BootArgs {
    /// The same with `mib` MiB of guest memory and a `seconds` timeout.
    pub fn with_memory(mut self, mib: u64, seconds: f64) -> BootArgs {
        self.memory = mib;
        self.timeout = seconds;
        self
    }

    /// Attaches `image` with `profile`'s throttling and has the kernel
    /// load `path` through the `cache` design, without its hotplug run.
    pub fn set_disk(&mut self, image: &Path, path: &str, profile: &str, cache: &str) {
        self.disk = Some(image.to_owned());
        self.load = Some(path.to_owned());
        self.profile = Some(profile.to_owned());
        self.cache = cache.to_owned();
        self.append = "engine=none".to_owned();
    }

    /// Has the kernel also read every file under the directory `path` of
    /// the disk [`set_disk`](Self::set_disk) attached.
    pub fn set_walk(&mut self, path: &str) {
        self.walk = Some(path.to_owned());
    }
}

/// Why a `"load"` object is not a good load (see [`disk::failed`]).
pub fn load_failure(load: &serde_json::Value) -> Option<String> {
    if load.is_null() {
        return Some("no load reported".to_owned());
    }
    disk::failed(load)
}

/// `--resize`'s sizes in MiB, as one value (clap would take a `Vec` for
/// a repeated option).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resizes(pub Vec<u64>);

fn parse_resizes(text: &str) -> Result<Resizes, String> {
    qmp::parse_sizes(text).map(Resizes)
}

fn parse_timeout(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(seconds) if seconds > 0.0 && seconds <= 86_400.0 => Ok(seconds),
        _ => Err(format!(
            "timeout {text:?}: expected seconds, more than 0, at most a day"
        )),
    }
}

/// Progress on standard error: a spinner on a terminal, plain lines
/// elsewhere (CI logs).
struct Progress {
    spinner: ProgressBar,
}

impl Progress {
    fn new() -> Self {
        let spinner = ProgressBar::new_spinner();
        spinner.set_style(
            ProgressStyle::with_template("{spinner} {elapsed:>3} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        spinner.enable_steady_tick(Duration::from_millis(100));
        Progress { spinner }
    }

    /// A step worth a line of its own.
    fn step(&self, text: &str) {
        self.spinner.suspend(|| eprintln!("hotkern boot: {text}"));
        self.spinner.set_message(text.to_owned());
    }

    /// A console line, printed (with `-v`) and shown beside the spinner.
    fn console(&self, line: &str, verbose: bool) {
        if verbose {
            self.spinner.suspend(|| eprintln!("  | {line}"));
        }
        let short: String = line.chars().take(70).collect();
        self.spinner.set_message(short);
    }

    fn finish(&self) {
        self.spinner.finish_and_clear();
    }
}

/// Runs `hotkern boot`.
pub fn run(args: &BootArgs) -> Result<(), String> {
    // Missing packages are said before anything boots.
    let anchor = if args.linux {
        Some(linux::find()?)
    } else {
        None
    };
    let report = run_quietly(args)?;
    let linux = anchor.map(|(guest, modules)| {
        let sizes = args.resize.as_ref().map_or(&[][..], |r| &r.0[..]);
        let qemu = qemu::find_in_path(QEMU, std::env::var_os("PATH")).unwrap_or_default();
        eprintln!(
            "hotkern boot: booting {} for the same resizes",
            guest.kernel.display()
        );
        linux::run(
            &guest,
            &modules,
            &qemu,
            report.config.clone(),
            sizes,
            args.verbose,
        )
    });
    let linux = linux.transpose()?;
    if args.json {
        let mut json = report.to_json();
        if let Some(linux) = &linux {
            json["linux"] = linux.to_json();
        }
        println!("{json}");
    } else {
        print!("{}", report.to_table());
        if let Some(linux) = &linux {
            print!("{}", linux.rows(&report.to_json()["resizes"]));
        }
    }
    if !report.outcome.is_success() {
        return Err(report.failure_message());
    }
    if let Some(problem) = report.resize_failure() {
        return Err(problem);
    }
    let json = report.to_json();
    match disk::failed(&json["load"]).or_else(|| disk::failed(&json["walk"])) {
        Some(problem) => Err(problem),
        None => Ok(()),
    }
}

/// Boots the kernel as `args` say, with progress on standard error, and
/// returns the report without printing it. Refuses, naming the package,
/// when QEMU is missing.
pub fn run_quietly(args: &BootArgs) -> Result<RunReport, String> {
    if let (Some(size), Some(sizes)) = (args.hotplug, &args.resize) {
        if let Some(big) = sizes.0.iter().find(|&&mib| mib > size) {
            return Err(format!(
                "--resize {big}M: more than the {size} MiB --hotplug device holds"
            ));
        }
    }
    let qemu = qemu::find_in_path(QEMU, std::env::var_os("PATH")).ok_or_else(|| {
        format!(
            "{QEMU} not found on PATH: install the Debian package {QEMU_PACKAGE} \
             (apt-get install {QEMU_PACKAGE}; scripts/setup does it)"
        )
    })?;
    if args.kvm {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/kvm")
            .map_err(|error| {
                format!("--kvm: cannot open /dev/kvm ({error}); run without --kvm for TCG")
            })?;
    }
    let progress = Progress::new();
    let result = boot(args, &qemu, &progress);
    progress.finish();
    result
}

/// Builds (if asked), boots and watches the kernel.
fn boot(args: &BootArgs, qemu: &Path, progress: &Progress) -> Result<RunReport, String> {
    let (kernel, build) = match &args.kernel {
        Some(kernel) => (kernel.clone(), None),
        None => {
            progress.step("building the kernel (cargo build --release, x86_64-unknown-none)");
            let started = Instant::now();
            // Canonical, so cargo sees the same package path whoever calls it.
            let dir = Path::new(KERNEL_DIR);
            let kernel = build_kernel(&dir.canonicalize().unwrap_or_else(|_| dir.to_owned()))?;
            (kernel, Some(started.elapsed()))
        }
    };
    if !kernel.is_file() {
        return Err(format!("kernel {} not found", kernel.display()));
    }
    let output = match &args.output {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir().join(format!("hotkern-boot-{}", std::process::id())),
    };
    std::fs::create_dir_all(&output).map_err(|error| format!("{}: {error}", output.display()))?;
    // The default scenario loads a file too: from a scratch image.
    let scratch;
    let args = if args.disk.is_none() && !args.no_disk {
        let image = output.join(disk::SCRATCH_IMAGE);
        disk::write_scratch_image(&image)?;
        scratch = BootArgs {
            disk: Some(image),
            load: Some(disk::SCRATCH_FILE.to_owned()),
            ..args.clone()
        };
        &scratch
    } else {
        args
    };
    // And a small memory resize: grow, grow, shrink.
    let resized;
    let args = if args.hotplug.is_none() && !args.no_hotplug {
        resized = BootArgs {
            hotplug: Some(DEFAULT_HOTPLUG_MIB),
            resize: Some(Resizes(DEFAULT_RESIZES.to_vec())),
            ..args.clone()
        };
        &resized
    } else {
        args
    };
    let trace_file = output.join(trace::TRACE_DAT);
    // A file left by an earlier run must not pass for this run's trace.
    let _ = std::fs::remove_file(&trace_file);
    // What the kernel must load, read by the host from the same image
    // before the guest runs (a missing image is refused here).
    if let Some(image) = args.disk.as_ref().filter(|image| !image.is_file()) {
        return Err(format!("--disk {}: no such file", image.display()));
    }
    let expected = args
        .disk
        .as_ref()
        .zip(args.load.as_ref())
        .map(|(image, path)| disk::expected_sha256(image, path));
    let walk_expected = args
        .disk
        .as_ref()
        .zip(args.walk.as_ref())
        .map(|(image, path)| disk::expected_walk_sha256(image, path));
    let mut config = qemu_config(args, kernel, qemu::firmware());
    config.trace_file = Some(trace_file);
    progress.step(&format!(
        "starting QEMU ({}, {} vCPU, {} MiB)",
        match (args.kvm, args.icount) {
            (true, _) => "KVM",
            (false, true) => "TCG, icount",
            (false, false) => "TCG",
        },
        args.cpus,
        args.memory
    ));
    let mut report = watch::watch(qemu, config, build, args, progress)?;
    report.load_expected = expected;
    report.walk_expected = walk_expected;
    Ok(report)
}

/// How QEMU runs the kernel, from the options.
fn qemu_config(args: &BootArgs, kernel: PathBuf, firmware: Option<PathBuf>) -> QemuConfig {
    QemuConfig {
        kernel,
        firmware,
        cpus: args.cpus,
        memory_mib: args.memory,
        kvm: args.kvm,
        icount: args.icount,
        append: command_line(args),
        trace_file: None,
        disk: args.disk.clone(),
        disk_profile: profile(args),
        disk_error_at: args.disk_error_at,
        hotplug: args.hotplug.map(|size_mib| qemu::HotplugMemory {
            size_mib,
            qmp_socket: qmp_socket(),
        }),
    }
}

/// A QMP socket path of this process's own, short enough for a Unix
/// socket (108 bytes), unique across the boots of one process.
fn qmp_socket() -> PathBuf {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    std::env::temp_dir().join(format!("hotkern-qmp-{}-{n}.sock", std::process::id()))
}

/// The `--profile` device model.
fn profile(args: &BootArgs) -> Option<hotkern_bcache::DeviceModel> {
    args.profile
        .as_deref()
        .and_then(hotkern_bcache::DeviceModel::preset)
}

/// The kernel command line: `--append`'s words, then `engine=` unless it
/// is the kernel's default (both).
fn command_line(args: &BootArgs) -> String {
    let mut words: Vec<String> = args
        .append
        .split_ascii_whitespace()
        .map(str::to_owned)
        .collect();
    if args.engine != EngineChoice::Both {
        words.push(format!("engine={}", args.engine.name()));
    }
    if let Some(hz) = &args.hz {
        words.push(format!("hz={hz}"));
    }
    if let Some(sizes) = args.resize.as_ref().filter(|_| args.hotplug.is_some()) {
        let sizes: Vec<String> = sizes.0.iter().map(u64::to_string).collect();
        words.push(format!("vmem={}", sizes.join(",")));
    }
    if let Some(path) = &args.load {
        words.push(format!("load={path}"));
    }
    if let Some(path) = &args.walk {
        words.push(format!("walk={path}"));
    }
    if args.load.is_some() || args.walk.is_some() {
        words.push(format!("cache={}", args.cache));
        if let Some(model) = profile(args) {
            words.push(format!("max_transfer={}", model.max_transfer_bytes));
        }
    }
    words.join(" ")
}

/// Builds the kernel with its own workspace and configuration: cargo runs
/// inside the crate so that its `.cargo/config.toml` (static relocation
/// model) applies, with the caller's RUSTFLAGS removed for the same reason.
fn build_kernel(dir: &Path) -> Result<PathBuf, String> {
    let manifest = dir.join("Cargo.toml");
    if !manifest.is_file() {
        return Err(format!(
            "the kernel's sources are not at {} (pass --kernel FILE to boot a built kernel)",
            dir.display()
        ));
    }
    let target_dir = dir.join("target");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let output = Command::new(&cargo)
        .current_dir(dir)
        .args([
            "build",
            "--release",
            "--target",
            KERNEL_TARGET,
            "--manifest-path",
        ])
        .arg(&manifest)
        .arg("--target-dir")
        .arg(&target_dir)
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_BUILD_RUSTFLAGS")
        .stdin(Stdio::null())
        .output()
        .map_err(|error| format!("cannot run {}: {error}", Path::new(&cargo).display()))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(30).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        return Err(format!("building the kernel failed:\n{}", tail.join("\n")));
    }
    Ok(target_dir
        .join(KERNEL_TARGET)
        .join("release")
        .join(KERNEL_BIN))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Line {
        #[command(flatten)]
        args: BootArgs,
    }

    fn qemu_line(words: &[&str]) -> Result<String, clap::Error> {
        let line = Line::try_parse_from(std::iter::once("boot").chain(words.iter().copied()))?;
        let config = qemu_config(&line.args, PathBuf::from("/k"), None);
        let args: Vec<String> = config
            .args()
            .iter()
            .map(|arg| arg.to_string_lossy().into_owned())
            .collect();
        Ok(args.join(" "))
    }

    #[test]
    fn options_become_the_qemu_command_line() {
        let line = qemu_line(&[]).unwrap();
        assert!(line.starts_with("-accel tcg "));
        assert!(line.contains(" -m 128M -smp 4 -kernel /k"));
        assert!(!line.contains("-append"), "{line}");
        let line = qemu_line(&[
            "--cpus",
            "4",
            "--memory",
            "1G",
            "--kvm",
            "--append",
            "crash=hang",
        ])
        .unwrap();
        assert!(line.starts_with("-accel kvm -cpu host,-arch-capabilities "));
        assert!(line.contains(" -m 1024M -smp 4 -kernel /k -append crash=hang"));
        let line = qemu_line(&["--cpus", "2", "--engine", "bolt", "--append", "crash=check"]);
        assert!(line
            .unwrap()
            .ends_with("-smp 2 -kernel /k -append crash=check engine=bolt"));
        let line = qemu_line(&[
            "--disk",
            "/img/a,b.img",
            "--load",
            "boot/kernel",
            "--cache",
            "legacy",
        ])
        .unwrap();
        assert!(line.contains(
            "-drive file=/img/a,,b.img,format=raw,if=none,id=disk0,readonly=on \
             -device virtio-blk-pci,drive=disk0"
        ));
        assert!(
            line.ends_with("-append load=boot/kernel cache=legacy"),
            "{line}"
        );
        let line = qemu_line(&[
            "--disk",
            "/img/a.img",
            "--load",
            "k",
            "--disk-error-at",
            "164",
        ])
        .unwrap();
        assert!(
            line.contains(
                "-drive driver=raw,file.driver=blkdebug,file.image.filename=/img/a.img,\
                 file.inject-error.0.event=read_aio,file.inject-error.0.errno=5,\
                 file.inject-error.0.sector=164,if=none,id=disk0,readonly=on "
            ),
            "{line}"
        );
        assert!(
            qemu_line(&["--disk-error-at", "1"]).is_err(),
            "needs --disk"
        );
        let line = qemu_line(&["--engine", "classic", "--hz", "250"]).unwrap();
        assert!(
            line.ends_with("-kernel /k -append engine=classic hz=250"),
            "{line}"
        );
        assert!(qemu_line(&["--hz", "500"]).is_err());
    }

    #[test]
    fn icount_reaches_qemu_and_is_refused_with_kvm() {
        let line = qemu_line(&["--icount"]).unwrap();
        assert!(
            line.starts_with("-accel tcg -icount shift=0,sleep=off "),
            "{line}"
        );
        assert!(!qemu_line(&[]).unwrap().contains("-icount"));
        let refused = qemu_line(&["--icount", "--kvm"]).unwrap_err().to_string();
        assert!(
            refused.contains("'--icount' cannot be used with '--kvm'"),
            "{refused}"
        );
    }

    #[test]
    fn hotplug_and_resizes_reach_qemu_and_the_kernel() {
        let line = qemu_line(&["--hotplug", "256M", "--resize", "128M,256M,0"]).unwrap();
        assert!(line.contains(" -m 128M,maxmem=384M -smp 4 -object memory-backend-ram,id=vmem0,size=256M -device virtio-mem-pci,id=vm0,"), "{line}");
        assert!(line.contains(" -qmp unix:"), "{line}");
        assert!(line.ends_with("-append vmem=128,256,0"), "{line}");
        assert!(
            qemu_line(&["--resize", "128M"]).is_err(),
            "--resize needs --hotplug"
        );
        assert!(qemu_line(&["--hotplug", "1G", "--no-hotplug"]).is_err());
        assert!(qemu_line(&["--hotplug", "1G", "--resize", "3M"]).is_err());
    }

    #[test]
    fn bad_options_are_refused() {
        assert!(qemu_line(&["--cpus", "0"]).is_err());
        assert!(qemu_line(&["--cpus", "17"]).is_err());
        assert!(qemu_line(&["--memory", "8M"]).is_err());
        assert!(qemu_line(&["--timeout", "0"]).is_err());
        assert!(qemu_line(&["--timeout", "soon"]).is_err());
        assert!(qemu_line(&["--engine", "linux"]).is_err());
        assert!(
            qemu_line(&["--disk", "d.img"]).is_err(),
            "--disk needs --load"
        );
        assert!(
            qemu_line(&["--load", "boot/k"]).is_err(),
            "--load needs --disk"
        );
        assert!(qemu_line(&["--disk", "d.img", "--load", "my kernel"]).is_err());
        assert!(qemu_line(&["--disk", "d.img", "--load", "k", "--cache", "lru"]).is_err());
        let line = Line::try_parse_from(["boot", "-v", "--json", "--timeout", "2.5"]).unwrap();
        assert!(line.args.verbose && line.args.json && line.args.timeout == 2.5);
    }
}
