//! How the kernel is to run: the options of `hotkern boot`, which the
//! benchmarks and the tour fill in for their own runs.

use std::path::{Path, PathBuf};

use super::vmem;
use crate::qemu::{self, Architecture, MAX_CPUS};

/// How the kernel is to run: `hotkern boot`'s options, and what
/// `bench --platform qemu` and the tour set.
#[derive(Debug, Clone, clap::Args)]
#[command(group(clap::ArgGroup::new("read").multiple(true)))]
pub struct BootArgs {
    /// The architecture to build the kernel for and boot: x86_64 (QEMU's
    /// PC through PVH) or aarch64 (QEMU's `virt` board, GICv3, PSCI).
    #[arg(long, value_enum, default_value_t = Architecture::X86_64)]
    pub arch: Architecture,
    /// vCPUs to give QEMU; with more than one, the kernel takes them
    /// offline and online with each hotplug engine while tasks run.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=i64::from(MAX_CPUS)))]
    pub cpus: u32,
    /// Guest memory, as QEMU's -m takes it: 128M, 1G, ...
    #[arg(long, default_value = "128M", value_parser = qemu::parse_memory)]
    pub memory: u64,
    /// Run under KVM (needs /dev/kvm; x86_64 only) instead of TCG.
    #[arg(long)]
    pub kvm: bool,
    /// Run under TCG's instruction-counting mode (QEMU's `-icount
    /// shift=0,sleep=off`): every vCPU round-robin in one host thread, the
    /// guest's clock counted in instructions. A different interleaving,
    /// for robustness; slower, and its times are no figures.
    #[arg(long, conflicts_with = "kvm")]
    pub icount: bool,
    /// Stream the kernel's console to standard error.
    #[arg(short, long)]
    pub verbose: bool,
    /// Print one JSON document on stdout instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Kill QEMU after this many seconds.
    #[arg(long, default_value_t = 60.0, value_parser = parse_timeout)]
    pub timeout: f64,
    /// The kernel command line; `crash=page-fault|panic|panic-all|dump-panic|hang|check`
    /// makes the kernel fail on purpose, to see how each ending is
    /// reported. A panic or an exception (`panic-all`: every CPU panics at
    /// once) first writes the trace as a crash dump, saved as
    /// crash-trace.dat in the output directory (`trace-cmd report` reads
    /// it); a dump cut short (`dump-panic` panics inside it) is reported
    /// and kept as crash-trace.dat.partial.
    #[arg(long, default_value = "")]
    pub append: String,
    /// The hotplug engines the kernel runs its cases with.
    #[arg(long, value_enum, default_value_t = EngineChoice::Both)]
    pub engine: EngineChoice,
    /// Instead of the timed hotplug cases, the shared differential
    /// scenario drawn from SEED (single and bulk operations under both
    /// engines, step and platform failures, tasks running); the user-mode
    /// machine then runs it too, on as many vCPUs, and the two step logs
    /// must be equal line for line.
    #[arg(long, value_name = "SEED")]
    pub differential: Option<u64>,
    /// The kernel's own functions its function tracer records, as
    /// ftrace's `set_ftrace_filter` takes them: globs separated by
    /// spaces, `!glob` to leave out, `glob:mod:module` (e.g. `'offline*'`,
    /// `'*:mod:*rcu'`). Without it every instrumented function is traced;
    /// a filter that matches nothing is reported and no function traced.
    #[arg(long, value_name = "GLOB")]
    pub trace_functions: Option<String>,
    /// The kernel's tick rate (its `hz=`; default 1000), as Linux's
    /// CONFIG_HZ: it times normal grace periods.
    #[arg(long, value_parser = ["100", "250", "300", "1000"])]
    pub hz: Option<String>,
    /// A FAT disk image for the kernel, as a read-only virtio-blk device.
    #[arg(long, requires = "read")]
    pub disk: Option<PathBuf>,
    /// The file the kernel loads from the disk, in 512-byte requests as a
    /// boot loader does: any path the FAT volume holds, e.g.
    /// boot/kernel/kernel or 'Boot Files/Kernel Image.elf' (spaces and
    /// any UTF-8; percent-encoded on the kernel's command line). Without
    /// `--disk`, from the scratch image.
    #[arg(long, group = "read", conflicts_with = "no_disk", value_parser = parse_load_path)]
    pub load: Option<String>,
    /// A directory whose every file the kernel reads from the disk, depth
    /// first in on-disk order, as a loader reads its modules (after
    /// `--load`'s file, through a cache of its own). Any path, as for
    /// `--load`; without `--disk`, from the scratch image.
    #[arg(long, group = "read", conflicts_with = "no_disk", value_parser = parse_load_path)]
    pub walk: Option<String>,
    /// Boot without the scratch disk: by default, without `--disk`, the
    /// kernel loads a file from a small FAT image written into the output
    /// directory (disk.img), which holds boot/kernel/kernel (1 MiB, loaded
    /// unless `--load` names another), 'Boot Files/Kernel Image.elf'
    /// (300 KiB) and 'Données/été.txt'.
    #[arg(long, conflicts_with = "disk")]
    pub no_disk: bool,
    /// The device the disk imitates (QEMU block throttling at its
    /// operation rate and bandwidth, its block size and largest transfer).
    #[arg(long, requires = "disk", value_parser = crate::load::DEVICES)]
    pub profile: Option<String>,
    /// Make the disk fail every read that covers this 512-byte sector with
    /// an I/O error (QEMU's blkdebug), to see how the kernel reports a
    /// failing device.
    #[arg(long, requires = "disk")]
    pub disk_error_at: Option<u64>,
    /// The cache design the kernel loads through.
    #[arg(long, default_value = "hotkern", value_parser = crate::load::CACHES)]
    pub cache: String,
    /// Memory the host can plug while the kernel runs: a virtio-mem device
    /// of this size (2 MiB blocks, nothing plugged at boot) and a QMP socket.
    #[arg(long, value_parser = qemu::parse_memory, conflicts_with = "no_hotplug")]
    pub hotplug: Option<u64>,
    /// Sizes to resize the virtio-mem device to, in turn, over QMP while
    /// the kernel follows (e.g. 128M,256M,64M); each is timed until the
    /// guest has plugged it.
    #[arg(long, requires = "hotplug", value_parser = parse_resizes)]
    pub resize: Option<Resizes>,
    /// Before each shrink, owners in the kernel hold movable frames —
    /// this percentage of the size the shrink goes to, spread over every
    /// plugged block, each frame a pattern of its owner and the resize —
    /// so that the shrink must migrate them; after every resize each
    /// owner re-reads its frames (0 to 100).
    #[arg(long, requires = "resize", value_parser = clap::value_parser!(u64).range(0..=100))]
    pub fill: Option<u64>,
    /// Boot without the virtio-mem device: by default, without
    /// `--hotplug`, the host plugs 32, 64, then 16 MiB of a 64 MiB device.
    #[arg(long)]
    pub no_hotplug: bool,
    /// After the hotkern kernel, boot Debian's Linux kernel (packages
    /// linux-image-amd64 and busybox-static) on the same QEMU
    /// configuration and make the same resizes with its virtio_mem
    /// driver, timed the same way; each latency is printed beside
    /// hotkern's.
    #[arg(long, requires = "resize")]
    pub linux: bool,
    /// Boot this kernel ELF instead of building crates/baremetal.
    #[arg(long)]
    pub kernel: Option<PathBuf>,
    /// Where to write the kernel's trace.dat (read it with `trace-cmd
    /// report DIR/trace.dat`); a directory under the temporary one if not
    /// given.
    #[arg(short = 'o', long = "output")]
    pub output: Option<PathBuf>,
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
    /// The kernel's `engine=` word.
    pub fn name(self) -> &'static str {
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
            arch: Architecture::X86_64,
            cpus,
            memory: 128,
            kvm: false,
            icount: false,
            verbose: false,
            json: false,
            timeout: 120.0,
            append: String::new(),
            engine: EngineChoice::Both,
            differential: None,
            trace_functions: None,
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
            fill: None,
            no_hotplug: true,
            linux: false,
            kernel: None,
            output: None,
        }
    }
}

/// A path in the FAT volume: any non-empty text (the command line carries
/// it percent-encoded, see `hotkern_kernel::command_line`).
fn parse_load_path(text: &str) -> Result<String, String> {
    if text.is_empty() {
        Err("an empty path names no file".to_owned())
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

/// `--resize`'s sizes in MiB, as one value (clap would take a `Vec` for
/// a repeated option).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resizes(pub Vec<u64>);

fn parse_resizes(text: &str) -> Result<Resizes, String> {
    vmem::parse_sizes(text).map(Resizes)
}

fn parse_timeout(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(seconds) if seconds > 0.0 && seconds <= 86_400.0 => Ok(seconds),
        _ => Err(format!(
            "timeout {text:?}: expected seconds, more than 0, at most a day"
        )),
    }
}
