//! The hotkern kernel under QEMU: builds the bare-metal kernel
//! (crates/baremetal), boots it, watches its console and reports how
//! the run ended, for `hotkern boot` to print and for `bench --platform
//! qemu` and the tour to measure.
//!
//! The kernel reports through three channels: its console on the first
//! serial port (`-serial stdio`), one `hotkern: summary {json}` line at the
//! end, and QEMU's exit status, which it sets through the `isa-debug-exit`
//! device. A run that goes past `--timeout` is killed, and the last console
//! line says where the kernel got to.

mod args;
mod crash_dump;
mod differential;
mod disk;
mod hotplug;
mod report;
mod trace;
mod vmem;
mod watch;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use hotkern_kernel::command_line::encode_value;

use crate::progress::Progress;
use crate::qemu::{self, Architecture, QemuConfig};
pub use args::{BootArgs, EngineChoice, Resizes};
pub use report::RunReport;

/// The kernel crate's directory, where this binary was built from.
const KERNEL_DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../baremetal");
/// The kernel binary's name.
const KERNEL_BIN: &str = "hotkern-kernel";
/// The longest command line the kernel reads on either architecture
/// (`MAX_COMMAND_LINE` in crates/baremetal/src/arch/boot_info.rs); it
/// would cut a longer one.
const KERNEL_MAX_COMMAND_LINE: usize = 256;

/// The default scenario's virtio-mem device, in MiB, and its resizes.
const DEFAULT_HOTPLUG_MIB: u64 = 64;
const DEFAULT_RESIZES: [u64; 3] = [32, 64, 16];
/// The default scenario's fill: half of each shrink's size in use, so
/// that every boot migrates frames out of the blocks it takes back.
const DEFAULT_FILL: u64 = 50;

/// Why a `"load"` object is not a good load (see [`disk::failed`]).
pub fn load_failure(load: &serde_json::Value) -> Option<String> {
    if load.is_null() {
        return Some("no load reported".to_owned());
    }
    disk::failed(load)
}

/// Why the kernel's load or walk went wrong, or its differential log
/// differs from the machine's, if any did.
pub fn read_failure(report: &RunReport) -> Option<String> {
    let json = report.to_json();
    disk::failed(&json["load"])
        .or_else(|| disk::failed(&json["walk"]))
        .or_else(|| {
            let mut verdict = None;
            report
                .differential
                .as_ref()
                .filter(|comparison| !comparison.identical())
                .inspect(|comparison| {
                    comparison.rows(&mut |_, text| verdict = Some(format!("--differential {text}")))
                });
            verdict
        })
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
    if args.kvm && args.arch != Architecture::X86_64 {
        return Err(format!(
            "--kvm: this host runs x86-64 guests only; boot --arch {} under TCG",
            args.arch
        ));
    }
    let (program, package) = (args.arch.qemu(), args.arch.package());
    let qemu = qemu::find_in_path(program, std::env::var_os("PATH")).ok_or_else(|| {
        format!(
            "{program} not found on PATH: install the Debian package {package} \
             (apt-get install {package}; scripts/setup does it)"
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
    let progress = Progress::spinner("hotkern boot");
    let result = boot(args, &qemu, &progress);
    progress.finish();
    result
}

/// Builds (if asked), boots and watches the kernel.
fn boot(args: &BootArgs, qemu: &Path, progress: &Progress) -> Result<RunReport, String> {
    let (kernel, build) = match &args.kernel {
        Some(kernel) => (kernel.clone(), None),
        None => {
            let target = args.arch.kernel_target();
            progress.step(&format!(
                "building the kernel (cargo build --release, {target})"
            ));
            let started = Instant::now();
            // Canonical, so cargo sees the same package path whoever calls it.
            let dir = Path::new(KERNEL_DIR);
            let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_owned());
            let kernel = build_kernel(&dir, target)?;
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
            load: Some(
                args.load
                    .clone()
                    .unwrap_or_else(|| disk::SCRATCH_FILE.to_owned()),
            ),
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
            fill: Some(DEFAULT_FILL),
            ..args.clone()
        };
        &resized
    } else {
        args
    };
    let trace_file = output.join(trace::TRACE_DAT);
    // A file left by an earlier run must not pass for this run's trace
    // (nor an earlier crash dump for this run's).
    for stale in [
        trace::TRACE_DAT,
        crash_dump::CRASH_TRACE_DAT,
        crash_dump::CRASH_TRACE_PARTIAL,
    ] {
        let _ = std::fs::remove_file(output.join(stale));
    }
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
    let firmware = qemu::firmware().filter(|_| args.arch.has_firmware());
    let mut config = qemu_config(args, kernel, firmware);
    config.trace_file = Some(trace_file);
    let command_line = config.command_line();
    if command_line.len() > KERNEL_MAX_COMMAND_LINE {
        return Err(format!(
            "the kernel command line would be {} bytes, more than the {KERNEL_MAX_COMMAND_LINE} \
             the kernel reads (paths are percent-encoded: 3 bytes for each space or \
             non-ASCII byte): {command_line}",
            command_line.len(),
        ));
    }
    // The aarch64 kernel reads `trace_file=` raw, also from a crash, where
    // it cannot allocate to decode: a path with a space would be cut.
    if args.arch == Architecture::Aarch64 && output.to_string_lossy().contains(char::is_whitespace)
    {
        return Err(format!(
            "--output {}: on aarch64 the trace's path goes on the kernel command line \
             and must not hold white space",
            output.display()
        ));
    }
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
    if let Some(seed) = args.differential {
        progress.step("running the same scenario on the user-mode machine");
        report.differential = Some(differential::compare(
            report.summary.as_ref(),
            seed,
            args.cpus,
        ));
    }
    Ok(report)
}

/// How QEMU runs the kernel, from the options.
fn qemu_config(args: &BootArgs, kernel: PathBuf, firmware: Option<PathBuf>) -> QemuConfig {
    QemuConfig {
        arch: args.arch,
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
            qmp_socket: qemu::qmp_socket(),
        }),
    }
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
    if let Some(seed) = args.differential {
        words.push(format!("differential={seed}"));
    }
    // A filter holds spaces and `!`; the kernel decodes it as a path.
    if let Some(filter) = &args.trace_functions {
        words.push(format!("trace_functions={}", encode_value(filter)));
    }
    if let Some(sizes) = args.resize.as_ref().filter(|_| args.hotplug.is_some()) {
        let sizes: Vec<String> = sizes.0.iter().map(u64::to_string).collect();
        words.push(format!("vmem={}", sizes.join(",")));
        if let Some(percent) = args.fill {
            words.push(format!("vmem_fill={percent}"));
        }
    }
    // Paths may hold spaces and any UTF-8; the kernel decodes them.
    if let Some(path) = &args.load {
        words.push(format!("load={}", encode_value(path)));
    }
    if let Some(path) = &args.walk {
        words.push(format!("walk={}", encode_value(path)));
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
fn build_kernel(dir: &Path, target: &str) -> Result<PathBuf, String> {
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
        .args(["build", "--release", "--target", target, "--manifest-path"])
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
    Ok(target_dir.join(target).join("release").join(KERNEL_BIN))
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
    fn any_fat_path_reaches_the_kernel_as_one_word() {
        let line = qemu_line(&[
            "--disk",
            "d.img",
            "--load",
            "Boot Files/Kernel Image.elf",
            "--walk",
            "Données",
        ])
        .unwrap();
        assert!(
            line.ends_with(
                "-append load=Boot%20Files/Kernel%20Image.elf walk=Donn%C3%A9es cache=hotkern"
            ),
            "{line}"
        );
        // Without --disk: from the scratch image (the command line is the
        // same; boot() attaches the image).
        let line = qemu_line(&["--load", "my kernel"]).unwrap();
        assert!(
            line.ends_with("-append load=my%20kernel cache=hotkern"),
            "{line}"
        );
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
    fn a_function_filter_reaches_the_kernel_encoded() {
        let line = qemu_line(&["--trace-functions", "offline* !offline_many"]).unwrap();
        assert!(
            line.ends_with(&format!(
                "-append trace_functions={}",
                encode_value("offline* !offline_many")
            )),
            "{line}"
        );
        assert!(!line.contains("offline* "), "{line}");
    }

    #[test]
    fn hotplug_and_resizes_reach_qemu_and_the_kernel() {
        let line = qemu_line(&["--hotplug", "256M", "--resize", "128M,256M,0"]).unwrap();
        assert!(line.contains(" -m 128M,maxmem=384M -smp 4 -object memory-backend-ram,id=vmem0,size=256M,reserve=off,prealloc=off -device virtio-mem-pci,id=vm0,"), "{line}");
        assert!(line.contains(" -qmp unix:"), "{line}");
        assert!(line.ends_with("-append vmem=128,256,0"), "{line}");
        let line = qemu_line(&["--hotplug", "256M", "--resize", "256M,0", "--fill", "75"]).unwrap();
        assert!(line.ends_with("-append vmem=256,0 vmem_fill=75"), "{line}");
        assert!(
            qemu_line(&["--hotplug", "256M", "--resize", "256M,0", "--fill", "101"]).is_err(),
            "a fill is a percentage"
        );
        assert!(
            qemu_line(&["--resize", "128M"]).is_err(),
            "--resize needs --hotplug"
        );
        assert!(qemu_line(&["--hotplug", "1G", "--no-hotplug"]).is_err());
        assert!(qemu_line(&["--hotplug", "1G", "--resize", "3M"]).is_err());
    }

    #[test]
    fn arch_picks_the_board_and_kvm_is_x86_only() {
        let line = qemu_line(&["--arch", "aarch64", "--cpus", "2"]).unwrap();
        assert!(
            line.starts_with("-M virt,gic-version=3 -cpu cortex-a72 -accel tcg "),
            "{line}"
        );
        assert!(line.contains("-semihosting-config enable=on,target=native"));
        assert!(!line.contains("isa-debug-exit"), "{line}");
        assert_eq!(
            qemu_line(&["--arch", "arm64"]).unwrap(),
            qemu_line(&["--arch", "aarch64"]).unwrap()
        );
        assert!(qemu_line(&["--arch", "riscv64"]).is_err());
        let line = Line::try_parse_from(["boot", "--arch", "aarch64", "--kvm"]).unwrap();
        let refused = run_quietly(&line.args).unwrap_err();
        assert!(
            refused.contains("--kvm") && refused.contains("aarch64"),
            "{refused}"
        );
        // virt takes the same virtio devices as the PC.
        let line = qemu_line(&["--arch", "aarch64", "--hotplug", "64M"]).unwrap();
        assert!(
            line.contains("-m 128M,maxmem=192M") && line.contains("-device virtio-mem-pci,"),
            "{line}"
        );
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
        assert!(qemu_line(&["--load", "boot/k", "--no-disk"]).is_err());
        assert!(qemu_line(&["--disk", "d.img", "--load", ""]).is_err());
        assert!(qemu_line(&["--disk", "d.img", "--load", "k", "--cache", "lru"]).is_err());
        let line = Line::try_parse_from(["boot", "-v", "--json", "--timeout", "2.5"]).unwrap();
        assert!(line.args.verbose && line.args.json && line.args.timeout == 2.5);
    }
}
