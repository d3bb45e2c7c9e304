//! `hotkern bench`: each subsystem against the design it replaces, in one
//! run: the uvm_hotplug paper (Raju and Mathew, 2017), FreeBSD's loader
//! cache as of 2016, Linux's `kernel/cpu.c` beside Bolt (ATC 2015), and for
//! the ftrace-class tracer the tracers people record with (LTTng-UST,
//! uftrace, `tracing` subscribers), and the trace.dat reader beside
//! `trace-cmd report`. `--platform qemu` runs cpuhp, bcache and trace
//! on the x86-64 kernel instead of the user-mode machine (trace beside
//! Linux's ftrace in a Debian guest on the same QEMU).
//!
//! A subsystem's benchmark builds a [`Report`]: one [`Case`] per measured
//! (name, implementation) pair, plus ratios computed from cases of the same
//! run, since only ratios carry over from one machine to another.

mod bcache;
pub(crate) mod cpuhp;
mod measure;
mod memory;
mod options;
mod physmem;
mod report;
mod trace;
mod tracedat;

pub use options::{BenchOptions, Platform};

use crate::qemu::Architecture;
pub use report::{Case, Report};

/// The subsystems that have a benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Subsystem {
    Physmem,
    Bcache,
    Trace,
    Cpuhp,
    Tracedat,
    /// Shrinks of used memory on the machine's memory device.
    Memory,
    All,
}

impl Subsystem {
    /// Every subsystem with a benchmark, in the order the tour shows them.
    pub const EACH: [Subsystem; 4] = [
        Subsystem::Physmem,
        Subsystem::Bcache,
        Subsystem::Trace,
        Subsystem::Cpuhp,
    ];

    /// What `bench all` runs: [`Subsystem::EACH`], the trace.dat reader
    /// (whose 100 MB input the tour does without) and the memory device's
    /// shrinks.
    pub const ALL: [Subsystem; 6] = [
        Subsystem::Physmem,
        Subsystem::Bcache,
        Subsystem::Trace,
        Subsystem::Cpuhp,
        Subsystem::Tracedat,
        Subsystem::Memory,
    ];

    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Subsystem::Physmem => "physmem",
            Subsystem::Bcache => "bcache",
            Subsystem::Trace => "trace",
            Subsystem::Cpuhp => "cpuhp",
            Subsystem::Tracedat => "tracedat",
            Subsystem::Memory => "memory",
            Subsystem::All => "all",
        }
    }

    /// Runs this subsystem's benchmark (not `All`).
    pub fn measure(self, options: &BenchOptions) -> Result<Report, String> {
        if options.platform == Platform::Qemu
            && !matches!(
                self,
                Subsystem::Cpuhp | Subsystem::Bcache | Subsystem::Trace | Subsystem::Memory
            )
        {
            return Err(format!(
                "bench {} --platform qemu: only cpuhp, bcache, trace and memory run on the kernel \
                 so far",
                self.name()
            ));
        }
        if options.arch != Architecture::X86_64
            && (options.platform != Platform::Qemu || self != Subsystem::Cpuhp)
        {
            return Err(format!(
                "bench {} --arch {}: only cpuhp runs on that kernel so far, with --platform qemu \
                 (and --linux for Debian's kernel beside it)",
                self.name(),
                options.arch
            ));
        }
        if options.linux && !matches!(self, Subsystem::Cpuhp | Subsystem::Memory) {
            return Err(format!(
                "bench {} --linux: only cpuhp and memory have a Linux anchor",
                self.name()
            ));
        }
        if options.linux && self == Subsystem::Memory && options.platform != Platform::Qemu {
            return Err(
                "bench memory --linux: Linux runs under QEMU, beside the booted kernel: add \
                 --platform qemu"
                    .into(),
            );
        }
        match self {
            Subsystem::Physmem => physmem::run(options),
            Subsystem::Bcache => bcache::run(options),
            Subsystem::Trace => trace::run(options),
            Subsystem::Cpuhp => cpuhp::run(options),
            Subsystem::Tracedat => tracedat::run(options),
            Subsystem::Memory => memory::run(options),
            Subsystem::All => Err("`all` is not a single subsystem".into()),
        }
    }
}

/// Runs one benchmark (or all), prints tables or JSON, and returns each
/// benchmark's JSON document (for `--html`).
pub fn run(subsystem: Subsystem, options: &BenchOptions) -> Result<Vec<serde_json::Value>, String> {
    let one = [subsystem];
    let chosen: &[Subsystem] = match subsystem {
        Subsystem::All => &Subsystem::ALL,
        _ => &one,
    };
    let mut reports = Vec::new();
    for each in chosen {
        reports.push(each.measure(options)?);
    }
    let documents: Vec<_> = reports.iter().map(Report::to_json).collect();
    if options.json {
        let out = match &documents[..] {
            [one] => one.clone(),
            all => serde_json::Value::Array(all.to_vec()),
        };
        println!("{out}");
    } else {
        for report in &reports {
            println!("{}", report.to_table());
        }
    }
    Ok(documents)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linux_anchors_only_cpuhp_and_memory_under_qemu() {
        let linux = BenchOptions {
            linux: true,
            ..BenchOptions::default()
        };
        let error = Subsystem::Bcache.measure(&linux).unwrap_err();
        assert!(error.contains("only cpuhp and memory"), "{error}");
        let error = Subsystem::Memory.measure(&linux).unwrap_err();
        assert!(error.contains("add --platform qemu"), "{error}");
    }

    #[test]
    fn another_arch_runs_only_cpuhp_on_qemu() {
        let arm = BenchOptions {
            arch: Architecture::Aarch64,
            ..BenchOptions::default()
        };
        for (subsystem, options) in [
            (Subsystem::Cpuhp, arm),
            (
                Subsystem::Bcache,
                BenchOptions {
                    platform: Platform::Qemu,
                    ..arm
                },
            ),
            (
                Subsystem::Memory,
                BenchOptions {
                    platform: Platform::Qemu,
                    linux: true,
                    ..arm
                },
            ),
            (Subsystem::Cpuhp, BenchOptions { linux: true, ..arm }),
        ] {
            let error = subsystem.measure(&options).unwrap_err();
            assert!(error.contains("--arch aarch64"), "{error}");
        }
    }

    #[test]
    fn linux_on_arm64_without_its_packages_names_them_before_any_boot() {
        // An empty cache: nothing is booted, the packages are named.
        let cache = std::env::temp_dir().join(format!("hotkern-no-arm64-{}", std::process::id()));
        std::env::set_var("XDG_CACHE_HOME", &cache);
        let options = BenchOptions {
            arch: Architecture::Aarch64,
            platform: Platform::Qemu,
            linux: true,
            ..BenchOptions::default()
        };
        let error = Subsystem::Cpuhp.measure(&options).unwrap_err();
        assert!(
            error.starts_with("bench cpuhp --linux: the comparison with Linux on aarch64"),
            "{error}"
        );
        assert!(
            error.contains("package linux-image-arm64 and package busybox-static:arm64"),
            "{error}"
        );
        assert!(error.contains("scripts/setup-linux-arm64"), "{error}");
        assert!(!cache.exists(), "looking created nothing");
    }
}
