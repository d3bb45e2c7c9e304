//! The machine in a few lines: a loaded 8-vCPU machine per engine takes
//! CPUs offline and back, one and four at a time, and proves nothing was
//! lost. Run with `cargo run --release -p hotkern-machine --example hotplug`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hotkern_machine::{CpuId, CpuSet, Engine, Item, Machine, TaskStatus};

fn main() -> Result<(), hotkern_machine::MachineError> {
    println!("{:<18} {:<9} {:<11} why", "step", "section", "class");
    for step in Machine::steps() {
        println!(
            "{:<18} {:<9} {:<11} {}",
            step.name,
            format!("{:?}", step.section),
            format!("{:?}", step.class),
            step.reason
        );
    }
    for engine in [Engine::Classic, Engine::Bolt] {
        let machine = Machine::builder().cpus(8).engine(engine).build()?;
        // Load: 32 tasks hashing in short slices until told to stop.
        let running = Arc::new(AtomicBool::new(true));
        for n in 0..32u64 {
            let running = Arc::clone(&running);
            machine.submit(move |ctx| {
                let mut hash = n;
                for i in 0..1_000u64 {
                    hash = (hash ^ i).wrapping_mul(0x100_0000_01b3);
                }
                std::hint::black_box(hash);
                if let Some(page) = ctx.alloc_page() {
                    ctx.free_page(page);
                }
                if running.load(Ordering::Relaxed) {
                    TaskStatus::Again
                } else {
                    TaskStatus::Done
                }
            });
        }
        let down = machine.offline(CpuId(7))?;
        let up = machine.online(CpuId(7))?;
        let bulk = CpuSet::range(4, 8);
        let bulk_down = machine.offline_many(bulk)?;
        let bulk_up = machine.online_many(bulk)?;
        println!(
            "\n{engine:?}: offline 1 {:>6.1} µs, online 1 {:>6.1} µs, offline 4 {:>6.1} µs, online 4 {:>6.1} µs",
            down.nanos as f64 / 1e3,
            up.nanos as f64 / 1e3,
            bulk_down.nanos as f64 / 1e3,
            bulk_up.nanos as f64 / 1e3,
        );
        for stage in &down.stages {
            println!(
                "    offline 1: {:<18} {:>7.1} µs",
                stage.name,
                stage.nanos as f64 / 1e3
            );
        }
        running.store(false, Ordering::Relaxed);
        // Completion is signalled; the bound only ends the wait if an item
        // was lost, which the tally printed next then shows.
        machine.wait_idle(Duration::from_secs(30));
        let broken = machine.check_invariants();
        let tasks = machine.tally(Item::Task);
        println!(
            "    tasks {} issued, {} completed once, {} lost; {} kernel threads; invariants {}",
            tasks.issued,
            tasks.completed_once,
            tasks.outstanding,
            machine.kernel_threads(),
            if broken.is_empty() { "hold" } else { "BROKEN" }
        );
        let report = machine.shutdown();
        println!("    shutdown clean: {}", report.is_clean());
    }
    Ok(())
}
