//! `hotkern bench`: each subsystem against the design it replaces, in one
//! run: the uvm_hotplug paper (Raju and Mathew, 2017), FreeBSD's loader
//! cache as of 2016, Linux's `kernel/cpu.c` beside Bolt (ATC 2015), and for
//! the ftrace-class tracer the tracers people record with (LTTng-UST,
//! uftrace, `tracing` subscribers), and the trace.dat reader beside
//! `trace-cmd report`. `--platform qemu` runs cpuhp and bcache
//! on the x86-64 kernel instead of the user-mode machine.
//!
//! A subsystem's benchmark builds a [`Report`]: one [`Case`] per measured
//! (name, implementation) pair, plus ratios computed from cases of the same
//! run, since only ratios carry over from one machine to another.

mod bcache;
pub(crate) mod cpuhp;
mod measure;
mod physmem;
mod report;
mod trace;
mod tracedat;

pub use report::{Case, Report};

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
    /// Measure Debian's Linux kernel under QEMU as the anchor (cpuhp only).
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
    /// The x86-64 kernel under QEMU (TCG): real (virtual) CPUs.
    Qemu,
}

/// The subsystems that have a benchmark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Subsystem {
    Physmem,
    Bcache,
    Trace,
    Cpuhp,
    Tracedat,
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

    /// What `bench all` runs: [`Subsystem::EACH`] and the trace.dat reader
    /// (whose 100 MB input the tour does without).
    pub const ALL: [Subsystem; 5] = [
        Subsystem::Physmem,
        Subsystem::Bcache,
        Subsystem::Trace,
        Subsystem::Cpuhp,
        Subsystem::Tracedat,
    ];

    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Subsystem::Physmem => "physmem",
            Subsystem::Bcache => "bcache",
            Subsystem::Trace => "trace",
            Subsystem::Cpuhp => "cpuhp",
            Subsystem::Tracedat => "tracedat",
            Subsystem::All => "all",
        }
    }

    /// Runs this subsystem's benchmark (not `All`).
    pub fn measure(self, options: &BenchOptions) -> Result<Report, String> {
        if options.platform == Platform::Qemu
            && !matches!(self, Subsystem::Cpuhp | Subsystem::Bcache)
        {
            return Err(format!(
                "bench {} --platform qemu: only cpuhp and bcache run on the kernel so far \
                 (physmem follows with virtio-mem)",
                self.name()
            ));
        }
        if options.linux && self != Subsystem::Cpuhp {
            return Err(format!(
                "bench {} --linux: only cpuhp has a Linux anchor",
                self.name()
            ));
        }
        match self {
            Subsystem::Physmem => physmem::run(options),
            Subsystem::Bcache => bcache::run(options),
            Subsystem::Trace => trace::run(options),
            Subsystem::Cpuhp => cpuhp::run(options),
            Subsystem::Tracedat => tracedat::run(options),
            Subsystem::All => Err("`all` is not a single subsystem".into()),
        }
    }
}

/// Runs one benchmark (or all) and prints tables or JSON.
pub fn run(subsystem: Subsystem, options: &BenchOptions) -> Result<(), String> {
    let one = [subsystem];
    let chosen: &[Subsystem] = match subsystem {
        Subsystem::All => &Subsystem::ALL,
        _ => &one,
    };
    let mut reports = Vec::new();
    for each in chosen {
        reports.push(each.measure(options)?);
    }
    if options.json {
        let documents: Vec<_> = reports.iter().map(Report::to_json).collect();
        let out = if documents.len() == 1 {
            documents.into_iter().next().unwrap_or_default()
        } else {
            serde_json::Value::Array(documents)
        };
        println!("{out}");
    } else {
        for report in &reports {
            println!("{}", report.to_table());
        }
    }
    Ok(())
}
