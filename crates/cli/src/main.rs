//! `hotkern`: the demo, the benchmarks and the tools of the hotkern toolkit.

mod bench;
mod boot;
mod demo;
mod kernel;
mod linux;
mod load;
mod prerequisites;
mod progress;
mod qemu;
mod report;
mod statistics;
mod tour;
mod trace_cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use bench::{BenchOptions, Subsystem};

/// hotkern: kernel subsystems for machines whose memory, CPUs and disks change
/// while they run.
#[derive(Debug, Parser)]
#[command(name = "hotkern", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// The guided tour (what `hotkern` with no arguments runs).
    Demo {
        /// Only make the kernel step possible, as the tour would (install
        /// QEMU and the kernel's target through scripts/setup, or say how),
        /// then stop. For the tests.
        #[arg(long, hide = true)]
        prerequisites_only: bool,
    },
    /// Benchmark a subsystem against the designs it replaces (NetBSD's
    /// uvm_hotplug, FreeBSD's loader cache as of 2016, Linux's CPU hotplug,
    /// LTTng-UST, uftrace and the `tracing` crate, `trace-cmd report`), side
    /// by side.
    Bench {
        /// Which subsystem to measure (`all` runs every one in turn).
        subsystem: Subsystem,
        /// The long run: larger inputs, as published (the uvm_hotplug
        /// paper's 100M lookups, FreeBSD's 270 MB load).
        #[arg(long)]
        full: bool,
        /// Print one JSON document on stdout instead of tables.
        #[arg(long)]
        json: bool,
        /// Where the mechanisms run: the user-mode machine, or the x86-64
        /// kernel booted under QEMU (cpuhp, bcache, and trace beside Linux's ftrace).
        #[arg(long, value_enum, default_value_t = bench::Platform::User)]
        platform: bench::Platform,
        /// With `--platform qemu`: the architecture the kernel is built for
        /// and booted as (aarch64: QEMU's `virt` board; cpuhp only).
        #[arg(long, value_enum, default_value_t = qemu::Architecture::X86_64)]
        arch: qemu::Architecture,
        /// Boot Debian's Linux kernel under QEMU as the anchor: cpuhp times
        /// its CPU offline and online (with `--platform qemu` beside the
        /// hotkern kernel's engines); memory, with `--platform qemu`, its
        /// virtio-mem shrinks of used memory. Needs the packages
        /// linux-image-amd64 and busybox-static (memory: gcc and libc6-dev too);
        /// cpuhp with `--arch aarch64`: Debian's arm64 kernel and busybox,
        /// which scripts/setup-linux-arm64 downloads and unpacks.
        #[arg(long)]
        linux: bool,
        /// The scheduler tick's rate on the user-mode machine (cpuhp):
        /// 100, 250, 300 or 1000, as Linux's CONFIG_HZ.
        #[arg(long, default_value_t = 1000)]
        hz: u32,
        /// The size of the trace.dat read (tracedat), in MB; 100 by default.
        #[arg(long, value_name = "MB")]
        size: Option<u64>,
        /// Also write this run's figures as a self-contained HTML page
        /// (the `hotkern report` page, for these benchmarks only).
        #[arg(long, value_name = "FILE")]
        html: Option<std::path::PathBuf>,
    },
    /// Record a demo trace (`trace demo -o DIR`) or print a saved trace.dat
    /// (`trace report FILE`).
    Trace {
        #[command(subcommand)]
        command: trace_cmd::TraceCommand,
    },
    /// Boot the bare-metal kernel (x86-64, or aarch64 with --arch) under
    /// QEMU and report how it ran.
    Boot(Box<kernel::BootArgs>),
    /// Write the benchmarks' results as one self-contained HTML page of
    /// figures (runs the quick benchmarks first, unless --from DIR).
    Report(report::ReportArgs),
    /// Load one file from a FAT image through a block cache on a modeled
    /// device; print its size, device and host time, SHA-256 and bcachestat.
    Load {
        /// The FAT12/16/32 image file.
        image: std::path::PathBuf,
        /// The file inside the image, e.g. `boot/kernel/kernel`.
        path: String,
        /// The device the image sits on.
        #[arg(long, default_value = "usb-stick", value_parser = load::DEVICES)]
        device: String,
        /// The cache design.
        #[arg(long, default_value = "hotkern", value_parser = load::CACHES)]
        cache: String,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        None => tour::run(),
        Some(Command::Demo { prerequisites_only }) => {
            if prerequisites_only {
                demo::prepare_kernel();
                Ok(())
            } else {
                tour::run()
            }
        }
        Some(Command::Bench {
            subsystem,
            full,
            json,
            platform,
            arch,
            linux,
            hz,
            size,
            html,
        }) => {
            let options = BenchOptions {
                full,
                json,
                platform,
                arch,
                linux,
                hz,
                size_mb: size,
            };
            bench::run(subsystem, &options).and_then(|documents| match html {
                Some(page) => report::write_bench(documents, &options, &page),
                None => Ok(()),
            })
        }
        Some(Command::Load {
            image,
            path,
            device,
            cache,
        }) => load::run(&image, &path, &device, &cache),
        Some(Command::Trace { command }) => trace_cmd::run(command),
        Some(Command::Boot(args)) => boot::run(&args),
        Some(Command::Report(args)) => report::run(&args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("hotkern: {message}");
            ExitCode::FAILURE
        }
    }
}
