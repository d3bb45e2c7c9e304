//! The guided tour: what `cargo run --release` shows a newcomer.

use std::time::Instant;

use crate::bench::{BenchOptions, Subsystem};

const INTRODUCTION: &str = "\
hotkern — kernel subsystems for machines whose memory, CPUs and disks change
while they run. Each subsystem is a no_std crate a kernel can link, measured
here side by side with the design it replaces:

  physmem  hotpluggable physical memory        vs NetBSD uvm_hotplug(9)
  bcache   boot-loader block cache, FAT files  vs FreeBSD loader bcache
  trace    ftrace-class tracer                 vs the Rust `tracing` crate
  cpuhp    CPU hotplug engine                  vs Linux's serial state machine

First the user-mode machine that hosts them all, and the same CPU hotplug on
the bare-metal kernel booted under QEMU; then the quick benchmark of each
(`hotkern bench <subsystem> --full` runs the long version).
";

/// Prints the introduction, then each subsystem's quick benchmark.
pub fn run() -> Result<(), String> {
    println!("{INTRODUCTION}");
    let started = Instant::now();
    crate::demo::run()?;
    let options = BenchOptions::default();
    for subsystem in Subsystem::EACH {
        match subsystem.measure(&options) {
            Ok(report) => println!("{}", report.to_table()),
            Err(message) => println!("({message})\n"),
        }
    }
    println!(
        "tour finished in {:.1} s — `hotkern --help` lists everything else.",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
