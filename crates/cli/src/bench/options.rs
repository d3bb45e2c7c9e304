//! What every benchmark is told: the options of `hotkern bench`, apart
//! from the subsystem, which picks the benchmark.

use crate::qemu::Architecture;

/// Options every benchmark takes.
#[derive(Debug, Clone, Copy)]
pub struct BenchOptions {
    /// Larger inputs, as published: the uvm_hotplug paper's 10M and 100M
    /// lookups, the 270 MB load of FreeBSD's loader cache report (minutes
    /// rather than seconds).
    pub full: bool,
    /// One JSON document on stdout instead of tables.
    pub json: bool,
    /// Where the mechanisms run.
    pub platform: Platform,
    /// The kernel's architecture, with [`Platform::Qemu`].
    pub arch: Architecture,
    /// Measure Debian's Linux kernel under QEMU as the anchor (cpuhp, and
    /// memory with `--platform qemu`).
    pub linux: bool,
    /// The user-mode machine's tick rate (cpuhp only).
    pub hz: u32,
    /// The size of the trace read, in MB (tracedat only; 100 when unset).
    pub size_mb: Option<u64>,
}

impl Default for BenchOptions {
    /// The quick run on the user-mode machine, at Linux's HZ=1000.
    fn default() -> Self {
        BenchOptions {
            full: false,
            json: false,
            platform: Platform::User,
            arch: Architecture::X86_64,
            linux: false,
            hz: 1000,
            size_mb: None,
        }
    }
}

/// Where a benchmark runs its mechanisms.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum Platform {
    /// The user-mode machine: vCPUs are threads of this process.
    #[default]
    User,
    /// The bare-metal kernel under QEMU (TCG): real (virtual) CPUs.
    Qemu,
}
