//! The guided tour: what `cargo run --release` shows a newcomer.

use std::time::Instant;

use crate::bench::{BenchOptions, Subsystem};
use crate::report;

const INTRODUCTION: &str = "\
hotkern — kernel subsystems for machines whose memory, CPUs and disks change
while they run. Each subsystem is a no_std crate a kernel can link, measured
here side by side with the design it replaces:

  physmem  hotpluggable physical memory        vs NetBSD uvm_hotplug(9)
  bcache   boot-loader block cache, FAT files  vs FreeBSD loader bcache
  trace    ftrace-class tracer                 vs LTTng-UST, uftrace, `tracing`
  cpuhp    CPU hotplug engine                  vs Linux's serial state machine

First the user-mode machine that hosts them all, and the same CPU hotplug on
the bare-metal kernel booted under QEMU; then the quick benchmark of each
(`hotkern bench <subsystem> --full` runs the long version).
";

/// Prints the introduction, then each subsystem's quick benchmark, and
/// writes them as the report page.
pub fn run() -> Result<(), String> {
    println!("{INTRODUCTION}");
    let started = Instant::now();
    crate::demo::run()?;
    let options = BenchOptions::default();
    let mut documents = Vec::new();
    for subsystem in Subsystem::EACH {
        match subsystem.measure(&options) {
            Ok(report) => {
                println!("{}", report.to_table());
                documents.push(report.to_json());
            }
            Err(message) => {
                println!("({message})\n");
                documents.push(report::not_run(subsystem.name(), &message));
            }
        }
    }
    documents.push(report::not_run(
        "tracedat",
        "the tour leaves the trace.dat reader out (its 100 MB input); `hotkern report` runs it",
    ));
    // In the temporary directory: the tour writes nothing into a checkout.
    let page = std::env::temp_dir().join("hotkern-report.html");
    let inputs = report::Inputs::from_documents([(
        report::Source::BenchAll,
        serde_json::Value::Array(documents),
    )]);
    report::write(&inputs, "the tour's quick benchmarks", &page)?;
    println!(
        "report: {} — these benchmarks as figures (`hotkern report` writes every one)",
        page.display()
    );
    println!(
        "tour finished in {:.1} s — `hotkern --help` lists everything else.",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
