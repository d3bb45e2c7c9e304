//! QEMU as every command runs it: finding it, its command line, its
//! console ([`console`]), its QMP socket ([`qmp`]), and what its exit
//! status says about the hotkern kernel's run.

mod arch;
pub mod console;
pub mod qmp;

pub use arch::Architecture;

use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

/// The x86-64 QEMU binary, which the Linux guests run on too.
pub const QEMU: &str = Architecture::X86_64.qemu();
/// The Debian package that has it (and the qboot firmware).
pub const QEMU_PACKAGE: &str = Architecture::X86_64.package();
/// qboot: a minimal firmware that starts a PVH kernel in ~50 ms under TCG,
/// where SeaBIOS takes seconds under KVM.
pub const QBOOT: &str = "/usr/share/qemu/qboot.rom";

/// The smallest guest memory that holds the kernel, its heap and room to
/// exercise physmem.
pub const MIN_MEMORY_MIB: u64 = 32;
/// The most guest memory `--memory` accepts.
pub const MAX_MEMORY_MIB: u64 = 1 << 20;
/// The most vCPUs `--cpus` accepts (the kernel has room for 16 CPUs).
pub const MAX_CPUS: u32 = 16;

/// How QEMU is to run the kernel.
#[derive(Debug, Clone)]
pub struct QemuConfig {
    /// The architecture QEMU emulates.
    pub arch: Architecture,
    /// The kernel ELF (a PVH image on x86-64; on aarch64 one `virt`
    /// starts at its entry).
    pub kernel: PathBuf,
    /// The firmware (`-bios`), or QEMU's default.
    pub firmware: Option<PathBuf>,
    /// vCPUs.
    pub cpus: u32,
    /// Guest memory in MiB.
    pub memory_mib: u64,
    /// KVM instead of TCG.
    pub kvm: bool,
    /// TCG's instruction-counting mode (`-icount shift=0,sleep=off`): every
    /// vCPU round-robin in one host thread, guest time counted in
    /// instructions. Another interleaving than multi-threaded TCG's, to
    /// shake out timing assumptions; not a clock to take figures with.
    pub icount: bool,
    /// The kernel command line.
    pub append: String,
    /// Where the kernel's trace.dat goes: the second serial port (COM2)
    /// on x86-64, a host file written through semihosting on aarch64.
    pub trace_file: Option<PathBuf>,
    /// A raw disk image given to the guest as a read-only virtio-blk
    /// device (legacy-capable, as QEMU's `virtio-blk-pci` is by default).
    pub disk: Option<PathBuf>,
    /// The device the disk imitates: QEMU's block throttling at the
    /// profile's operation rate and bandwidth, and its block size.
    pub disk_profile: Option<hotkern_bcache::DeviceModel>,
    /// A 512-byte sector of the disk every read of which fails with EIO:
    /// the image goes through QEMU's blkdebug driver.
    pub disk_error_at: Option<u64>,
    /// Memory the host can plug into the running guest: a virtio-mem
    /// device and the QMP socket that resizes it.
    pub hotplug: Option<HotplugMemory>,
}

/// A virtio-mem device (QEMU's `virtio-mem-pci`, 2 MiB blocks, nothing
/// plugged at start) and the QMP socket its size is changed through.
#[derive(Debug, Clone)]
pub struct HotplugMemory {
    /// The device's region, in MiB.
    pub size_mib: u64,
    /// Where QEMU listens for QMP.
    pub qmp_socket: PathBuf,
}

impl QemuConfig {
    /// `kernel` on `cpus` vCPUs with `memory_mib` MiB under TCG, with
    /// QEMU's default firmware, an empty command line and no devices; the
    /// caller sets what its run needs.
    pub fn new(kernel: PathBuf, cpus: u32, memory_mib: u64) -> QemuConfig {
        QemuConfig {
            arch: Architecture::X86_64,
            kernel,
            firmware: None,
            cpus,
            memory_mib,
            kvm: false,
            icount: false,
            append: String::new(),
            trace_file: None,
            disk: None,
            disk_profile: None,
            disk_error_at: None,
            hotplug: None,
        }
    }

    /// QEMU's arguments (without the program name).
    pub fn args(&self) -> Vec<OsString> {
        let mut args: Vec<OsString> = Vec::new();
        let mut push = |items: &[&str]| args.extend(items.iter().map(OsString::from));
        push(self.arch.machine_args());
        if self.kvm {
            // Plain `-cpu host` makes QEMU 7.2 abort on the nested KVM of
            // the machines hotkern is developed on (it cannot set
            // IA32_ARCH_CAPABILITIES).
            push(&["-accel", "kvm", "-cpu", "host,-arch-capabilities"]);
        } else {
            push(&["-accel", "tcg"]);
        }
        if self.icount {
            // shift=0: one instruction per guest nanosecond (a 1 GHz TSC);
            // sleep=off: a halted guest's clock jumps to its next timer
            // instead of waiting for the host's, so halts cost no wall time.
            push(&["-icount", "shift=0,sleep=off"]);
        }
        // No default devices (floppy, CD-ROM, parallel port, NIC): QEMU
        // starts 20-30 ms sooner, and the kernel uses none of them.
        push(&[
            "-nodefaults",
            "-nic",
            "none",
            "-display",
            "none",
            "-vga",
            "none",
            "-no-reboot",
            "-serial",
            "stdio",
        ]);
        // The second -serial is COM2: raw bytes, no console translation.
        // `virt` has one UART for the normal world, so no second line.
        if let Some(trace) = self
            .trace_file
            .as_ref()
            .filter(|_| self.arch == Architecture::X86_64)
        {
            let mut file = OsString::from("file:");
            file.push(trace);
            args.push("-serial".into());
            args.push(file);
        }
        let mut push = |items: &[&str]| args.extend(items.iter().map(OsString::from));
        push(&["-monitor", "none"]);
        push(self.arch.exit_args());
        push(&[
            "-m",
            &match &self.hotplug {
                // maxmem bounds boot RAM plus every memory device.
                Some(hotplug) => format!(
                    "{}M,maxmem={}M",
                    self.memory_mib,
                    self.memory_mib + hotplug.size_mib
                ),
                None => format!("{}M", self.memory_mib),
            },
            "-smp",
            &self.cpus.to_string(),
        ]);
        if let Some(hotplug) = &self.hotplug {
            push(&[
                "-object",
                // No reservation and no preallocation: memory the guest
                // never touches costs the host nothing, so a region far
                // larger than the host's RAM (a 64 GiB grow on a 23 GiB
                // host, which writes only each block's descriptor frame)
                // can be mapped under heuristic overcommit.
                &format!(
                    "memory-backend-ram,id=vmem0,size={}M,reserve=off,prealloc=off",
                    hotplug.size_mib
                ),
                "-device",
                &format!(
                    "virtio-mem-pci,id={},memdev=vmem0,requested-size=0,block-size=2M",
                    qmp::DEVICE_ID
                ),
            ]);
            let mut qmp = OsString::from("unix:");
            qmp.push(&hotplug.qmp_socket);
            qmp.push(",server=on,wait=off");
            args.push("-qmp".into());
            args.push(qmp);
        }
        if let Some(disk) = &self.disk {
            // QEMU's option syntax doubles a comma inside a value.
            let path = disk.as_os_str().to_string_lossy().replace(',', ",,");
            let mut drive = OsString::new();
            match self.disk_error_at {
                None => drive.push(format!("file={path},format=raw")),
                Some(sector) => drive.push(format!(
                    "driver=raw,file.driver=blkdebug,file.image.filename={path},\
                     file.inject-error.0.event=read_aio,file.inject-error.0.errno=5,\
                     file.inject-error.0.sector={sector}"
                )),
            }
            drive.push(",if=none,id=disk0,readonly=on");
            let mut device = String::from("virtio-blk-pci,drive=disk0");
            if let Some(model) = &self.disk_profile {
                // Throttling is a rate, not a latency: operations at the
                // profile's rate (one per latency) and bytes at its
                // bandwidth, after a burst QEMU allows.
                let iops = (1_000_000_000 / model.latency_ns.max(1)).max(1);
                drive.push(format!(
                    ",throttling.iops-total={iops},throttling.bps-total={}",
                    model.bytes_per_second
                ));
                if model.block_size != 512 {
                    device.push_str(&format!(
                        ",logical_block_size={0},physical_block_size={0}",
                        model.block_size
                    ));
                }
            }
            args.push("-drive".into());
            args.push(drive);
            args.push("-device".into());
            args.push(device.into());
        }
        if let Some(firmware) = &self.firmware {
            args.push("-bios".into());
            args.push(firmware.into());
        }
        args.push("-kernel".into());
        args.push(self.kernel.as_os_str().to_owned());
        let command_line = self.command_line();
        if !command_line.is_empty() {
            args.push("-append".into());
            args.push(command_line.into());
        }
        args
    }

    /// The kernel's command line as QEMU passes it: [`Self::append`],
    /// and on aarch64, where `virt` has no second UART for the trace, the
    /// `trace_file=` word naming the host file the kernel writes its
    /// trace.dat to through semihosting.
    pub fn command_line(&self) -> String {
        match (&self.trace_file, self.arch) {
            (Some(trace), Architecture::Aarch64) => {
                let word = format!("trace_file={}", trace.display());
                if self.append.is_empty() {
                    word
                } else {
                    format!("{} {word}", self.append)
                }
            }
            _ => self.append.clone(),
        }
    }
}

/// Parses a memory size as QEMU's `-m` takes it: a number of MiB, or a
/// number with a unit (`M`, `MB`, `MiB`, `G`, `GB`, `GiB`, any case).
pub fn parse_memory(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let digits = text
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(digits);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("memory size {text:?}: expected a number like 128M or 1G"))?;
    let scale = match unit.to_ascii_lowercase().as_str() {
        "" | "m" | "mb" | "mib" => 1,
        "g" | "gb" | "gib" => 1024,
        _ => {
            return Err(format!(
                "memory size {text:?}: unknown unit {unit:?} (use M or G)"
            ))
        }
    };
    let mib = number.saturating_mul(scale);
    if !(MIN_MEMORY_MIB..=MAX_MEMORY_MIB).contains(&mib) {
        return Err(format!(
            "memory size {text:?}: must be between {MIN_MEMORY_MIB} MiB and {} GiB",
            MAX_MEMORY_MIB >> 10
        ));
    }
    Ok(mib)
}

/// The first `program` on `PATH` that is a file.
pub fn find_in_path(program: &str, path: Option<OsString>) -> Option<PathBuf> {
    std::env::split_paths(&path?)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

/// A QMP socket path of this process's own, short enough for a Unix
/// socket (108 bytes), unique across the boots of one process.
pub fn qmp_socket() -> PathBuf {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    std::env::temp_dir().join(format!("hotkern-qmp-{}-{n}.sock", std::process::id()))
}

/// The firmware to boot with: qboot where it is installed.
pub fn firmware() -> Option<PathBuf> {
    Some(PathBuf::from(QBOOT)).filter(|path| Path::new(path).is_file())
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The kernel ran every check and all passed.
    Success,
    /// The kernel ran, but a check failed.
    ChecksFailed,
    /// A CPU exception the kernel does not handle.
    Exception,
    /// A Rust panic in the kernel.
    Panic,
    /// QEMU stopped without the kernel saying why: a triple fault (which
    /// `-no-reboot` turns into an exit), or a guest shutdown.
    Reset,
    /// QEMU itself failed (bad arguments, an unloadable kernel, no KVM).
    QemuError(i32),
    /// The run went past `--timeout` and QEMU was killed.
    Timeout,
    /// QEMU was killed by a signal hotkern did not send.
    Signal(i32),
}

impl Outcome {
    /// What QEMU's exit status (or the signal that ended it) means.
    /// `isa-debug-exit` turns the kernel's write of `v` into status
    /// `(v << 1) | 1`; the kernel writes 0x10 to 0x13.
    pub fn from_status(code: Option<i32>, signal: Option<i32>, timed_out: bool) -> Outcome {
        if timed_out {
            return Outcome::Timeout;
        }
        match (code, signal) {
            (Some(33), _) => Outcome::Success,
            (Some(35), _) => Outcome::ChecksFailed,
            (Some(37), _) => Outcome::Exception,
            (Some(39), _) => Outcome::Panic,
            (Some(0), _) => Outcome::Reset,
            (Some(code), _) => Outcome::QemuError(code),
            (None, Some(signal)) => Outcome::Signal(signal),
            (None, None) => Outcome::QemuError(-1),
        }
    }

    /// A short name, for JSON.
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Success => "success",
            Outcome::ChecksFailed => "checks-failed",
            Outcome::Exception => "exception",
            Outcome::Panic => "panic",
            Outcome::Reset => "reset",
            Outcome::QemuError(_) => "qemu-error",
            Outcome::Timeout => "timeout",
            Outcome::Signal(_) => "signal",
        }
    }

    /// Whether the run counts as passed.
    pub fn is_success(self) -> bool {
        self == Outcome::Success
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Outcome::Success => write!(f, "the kernel booted and passed all its checks"),
            Outcome::ChecksFailed => write!(f, "the kernel booted, but some of its checks failed"),
            Outcome::Exception => write!(f, "the kernel stopped on a CPU exception"),
            Outcome::Panic => write!(f, "the kernel panicked"),
            Outcome::Reset => write!(
                f,
                "QEMU stopped without a status from the kernel (a triple fault or a shutdown)"
            ),
            Outcome::QemuError(code) => write!(f, "QEMU failed (exit status {code})"),
            Outcome::Timeout => write!(f, "the kernel did not finish in time; QEMU was killed"),
            Outcome::Signal(signal) => write!(f, "QEMU was killed by signal {signal}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> QemuConfig {
        QemuConfig {
            firmware: Some(PathBuf::from(QBOOT)),
            ..QemuConfig::new(PathBuf::from("/k/hotkern-kernel"), 2, 256)
        }
    }

    fn joined(config: &QemuConfig) -> String {
        config
            .args()
            .iter()
            .map(|arg| arg.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn tcg_command_line_has_every_flag() {
        assert_eq!(
            joined(&config()),
            "-accel tcg -nodefaults -nic none -display none -vga none -no-reboot -serial stdio \
             -monitor none -device isa-debug-exit,iobase=0xf4,iosize=0x04 -m 256M -smp 2 \
             -bios /usr/share/qemu/qboot.rom -kernel /k/hotkern-kernel"
        );
    }

    #[test]
    fn icount_runs_tcg_counting_instructions() {
        let mut config = config();
        config.icount = true;
        assert_eq!(
            joined(&config),
            "-accel tcg -icount shift=0,sleep=off -nodefaults -nic none -display none -vga none \
             -no-reboot -serial stdio -monitor none -device isa-debug-exit,iobase=0xf4,iosize=0x04 \
             -m 256M -smp 2 -bios /usr/share/qemu/qboot.rom -kernel /k/hotkern-kernel"
        );
    }

    #[test]
    fn kvm_masks_arch_capabilities_and_append_is_passed() {
        let mut config = config();
        config.kvm = true;
        config.firmware = None;
        config.append = "crash=panic".into();
        let line = joined(&config);
        assert!(line.starts_with("-accel kvm -cpu host,-arch-capabilities -nodefaults -nic none"));
        assert!(!line.contains("-bios"));
        assert!(line.ends_with("-kernel /k/hotkern-kernel -append crash=panic"));
    }

    #[test]
    fn the_trace_file_is_the_second_serial_port() {
        let mut config = config();
        config.trace_file = Some(PathBuf::from("/out/trace.dat"));
        assert!(joined(&config)
            .contains("-serial stdio -serial file:/out/trace.dat -monitor none -device"));
    }

    #[test]
    fn aarch64_boots_virt_with_semihosting_exit_and_no_firmware_or_com2() {
        let mut config = QemuConfig {
            arch: Architecture::Aarch64,
            ..QemuConfig::new(PathBuf::from("/k/hotkern-kernel"), 4, 512)
        };
        config.trace_file = Some(PathBuf::from("/out/trace.dat"));
        assert_eq!(
            joined(&config),
            "-M virt,gic-version=3 -cpu cortex-a72 -accel tcg -nodefaults -nic none -display none \
             -vga none -no-reboot -serial stdio -monitor none \
             -semihosting-config enable=on,target=native -m 512M -smp 4 -kernel /k/hotkern-kernel \
             -append trace_file=/out/trace.dat"
        );
        config.append = "engine=bolt".into();
        assert!(joined(&config).ends_with("-append engine=bolt trace_file=/out/trace.dat"));
    }

    #[test]
    fn hotplug_memory_is_a_virtio_mem_device_and_a_qmp_socket() {
        let mut config = config();
        config.hotplug = Some(HotplugMemory {
            size_mib: 256,
            qmp_socket: PathBuf::from("/tmp/q.sock"),
        });
        assert!(joined(&config).contains(
            "-m 256M,maxmem=512M -smp 2 -object memory-backend-ram,id=vmem0,size=256M,reserve=off,prealloc=off \
             -device virtio-mem-pci,id=vm0,memdev=vmem0,requested-size=0,block-size=2M \
             -qmp unix:/tmp/q.sock,server=on,wait=off -bios"
        ));
    }

    #[test]
    fn memory_sizes_parse_like_qemu() {
        assert_eq!(parse_memory("128"), Ok(128));
        assert_eq!(parse_memory("128M"), Ok(128));
        assert_eq!(parse_memory("512mib"), Ok(512));
        assert_eq!(parse_memory("1G"), Ok(1024));
        assert_eq!(parse_memory(" 4GiB "), Ok(4096));
        assert!(parse_memory("16M").unwrap_err().contains("between"));
        assert!(parse_memory("2T").unwrap_err().contains("unknown unit"));
        assert!(parse_memory("lots")
            .unwrap_err()
            .contains("expected a number"));
        assert!(parse_memory("").is_err());
        assert!(parse_memory("99999999999999999999G").is_err());
    }

    #[test]
    fn exit_statuses_map_to_outcomes() {
        let of = |code| Outcome::from_status(Some(code), None, false);
        assert_eq!(of(33), Outcome::Success);
        assert_eq!(of(35), Outcome::ChecksFailed);
        assert_eq!(of(37), Outcome::Exception);
        assert_eq!(of(39), Outcome::Panic);
        assert_eq!(of(0), Outcome::Reset);
        assert_eq!(of(1), Outcome::QemuError(1));
        assert_eq!(
            Outcome::from_status(None, Some(9), false),
            Outcome::Signal(9)
        );
        // A timeout wins over whatever status the kill left.
        assert_eq!(Outcome::from_status(None, Some(9), true), Outcome::Timeout);
        assert_eq!(Outcome::from_status(Some(33), None, true), Outcome::Timeout);
        assert!(of(33).is_success() && !of(35).is_success());
        assert_eq!(of(37).name(), "exception");
        assert!(of(39).to_string().contains("panicked"));
    }

    #[test]
    fn path_lookup_finds_files_only() {
        let dir = std::env::temp_dir().join(format!("hotkern-boot-path-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("qemu-system-x86_64.d")).unwrap();
        std::fs::write(dir.join("present"), b"").unwrap();
        let path = std::env::join_paths([dir.clone()]).ok();
        assert_eq!(
            find_in_path("present", path.clone()),
            Some(dir.join("present"))
        );
        assert_eq!(find_in_path("qemu-system-x86_64.d", path.clone()), None);
        assert_eq!(find_in_path("absent", path), None);
        assert_eq!(find_in_path("present", None), None);
        let _ = std::fs::remove_dir_all(dir);
    }
}
