//! The machine part of the tour: a loaded user-mode machine hot-adds memory
//! and takes CPUs offline and back with each hotplug engine, then proves
//! that no task was lost and every invariant held; then the same engines
//! on the x86-64 kernel under QEMU, printed beside the machine's figures.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use hotkern_machine::{
    CpuId, CpuSet, Engine, Item, Machine, MachineError, PageCount, Pfn, TaskStatus,
};

use crate::statistics::median;

const CPUS: usize = 4;
const TASKS: u64 = 64;
const REPETITIONS: usize = 5;

/// Median latencies of one engine's operations, in microseconds.
struct Latencies {
    offline_one: f64,
    online_one: f64,
    offline_bulk: f64,
    online_bulk: f64,
}

/// Runs the scenario for both engines and prints what happened.
pub fn run() -> Result<(), String> {
    println!("== machine: {CPUS} vCPUs (threads), {TASKS} tasks running, CPU hotplug and memory hot-add ==");
    let mut measured = Vec::new();
    for engine in [Engine::Classic, Engine::Bolt] {
        let latencies = scenario(engine).map_err(|e| format!("machine ({engine:?}): {e}"))?;
        measured.push((engine, latencies));
    }
    println!();
    println!(
        "{:<8} {:>14} {:>13} {:>18} {:>17}",
        "engine", "offline 1 µs", "online 1 µs", "offline 3 bulk µs", "online 3 bulk µs"
    );
    for (engine, l) in &measured {
        println!(
            "{:<8} {:>14.1} {:>13.1} {:>18.1} {:>17.1}",
            format!("{engine:?}").to_lowercase(),
            l.offline_one,
            l.online_one,
            l.offline_bulk,
            l.online_bulk
        );
    }
    if let [(_, classic), (_, bolt)] = measured.as_slice() {
        println!(
            "classic ÷ bolt: offline {:.1}x, online {:.1}x (medians of {REPETITIONS} on a loaded \
             machine; `hotkern bench cpuhp` measures with more care)",
            classic.offline_one / bolt.offline_one,
            classic.online_one / bolt.online_one
        );
    }
    println!();
    kernel(&measured);
    Ok(())
}

/// Boots the x86-64 kernel, which runs the same scenario on four real
/// (virtual) CPUs, and prints its medians under the machine's. Without
/// QEMU it says how to get it; a kernel that fails is reported, not fatal
/// to the tour.
fn kernel(machine: &[(Engine, Latencies)]) {
    println!("== kernel: the same engines on the x86-64 kernel, {CPUS} vCPUs under QEMU (TCG) ==");
    if !prepare_kernel() {
        println!();
        return;
    }
    let run = match crate::kernel::run_quietly(&crate::kernel::BootArgs::scenario(CPUS as u32)) {
        Ok(run) => run,
        Err(message) => {
            println!("({message})\n");
            return;
        }
    };
    let document = run.to_json();
    if !run.outcome.is_success() || document["invariants_hold"] != true {
        println!("(the kernel's run failed: {})\n", run.failure_message());
        return;
    }
    let guest = |engine: &str, name: &str| -> Option<f64> {
        document["cases"]
            .as_array()?
            .iter()
            .find(|case| case["impl"] == engine && case["name"] == name)?["latency_us"]
            .as_f64()
    };
    println!(
        "{:<16} {:>14} {:>13} {:>18} {:>17}",
        "", "offline 1 µs", "online 1 µs", "offline 3 bulk µs", "online 3 bulk µs"
    );
    let cell = |value: Option<f64>| value.map_or("-".to_owned(), |us| format!("{us:.1}"));
    for (engine, latencies) in machine {
        let name = format!("{engine:?}").to_lowercase();
        println!(
            "{:<16} {:>14.1} {:>13.1} {:>18.1} {:>17.1}",
            format!("machine {name}"),
            latencies.offline_one,
            latencies.online_one,
            latencies.offline_bulk,
            latencies.online_bulk
        );
        println!(
            "{:<16} {:>14} {:>13} {:>18} {:>17}",
            format!("kernel {name}"),
            cell(guest(&name, "offline/1-load")),
            cell(guest(&name, "online/1-load")),
            cell(guest(&name, "offline/bulk-3-load")),
            cell(guest(&name, "online/bulk-3-load")),
        );
    }
    let tasks = &document["guest"]["hotplug"]["tasks"];
    println!(
        "kernel: booted and ran in {:.2} s; tasks {} issued, {} completed once, {} lost; \
         invariants hold; {} trace events in {}",
        document["host"]["total_s"].as_f64().unwrap_or(0.0),
        tasks["issued"],
        tasks["completed"],
        tasks["lost"],
        document["trace_events"],
        document["trace_dat"].as_str().unwrap_or("-"),
    );
    let load = &document["load"];
    if load["sha256_ok"] == true {
        println!(
            "kernel: loaded {} ({} KiB) from a FAT disk over virtio-blk through the {} cache \
             in {:.1} ms; SHA-256 matches the image",
            load["path"].as_str().unwrap_or("?"),
            load["bytes"].as_u64().unwrap_or(0) >> 10,
            load["cache"].as_str().unwrap_or("?"),
            load["seconds"].as_f64().unwrap_or(0.0) * 1e3
        );
    }
    println!(
        "(both keep Linux's time: a tick at HZ=1000, normal grace periods for classic and \
         expedited ones for bolt; machine: vCPUs are threads; kernel: real CPU starts and \
         stop-machine; both run the same sixteen steps — `hotkern boot` and `hotkern bench cpuhp \
         --platform qemu` say more)\n"
    );
}

/// Installs what the kernel step needs where the tour may (see
/// [`crate::prerequisites`]), printing what it does; whether the kernel
/// step can run.
pub fn prepare_kernel() -> bool {
    let mut out = String::new();
    let ready = crate::prerequisites::prepare(&crate::prerequisites::RealHost, &mut out);
    print!("{out}");
    ready
}

fn scenario(engine: Engine) -> Result<Latencies, String> {
    operate(engine).map_err(|e| e.to_string())?
}

/// The outer error is the machine refusing an operation; the inner one a
/// broken promise found afterwards.
fn operate(engine: Engine) -> Result<Result<Latencies, String>, MachineError> {
    let machine = Machine::builder().cpus(CPUS).engine(engine).build()?;
    let running = Arc::new(AtomicBool::new(true));
    for seed in 0..TASKS {
        let running = Arc::clone(&running);
        machine.submit(move |context| {
            let mut hash = seed;
            for i in 0..2_000u64 {
                hash = (hash ^ i).wrapping_mul(0x100_0000_01b3);
            }
            std::hint::black_box(hash);
            if let Some(page) = context.alloc_page() {
                context.free_page(page);
            }
            if running.load(Ordering::Relaxed) {
                TaskStatus::Again
            } else {
                TaskStatus::Done
            }
        });
    }
    // Hot-add 16 MiB of memory above what the machine booted with.
    let before = machine.frames().total.0;
    machine.plug_memory(Pfn(1 << 20), PageCount(4096))?;
    let after = machine.frames().total.0;

    let mut offline_one = Vec::new();
    let mut online_one = Vec::new();
    let mut offline_bulk = Vec::new();
    let mut online_bulk = Vec::new();
    let last = CpuId(CPUS as u32 - 1);
    let bulk = CpuSet::range(1, CPUS as u32);
    for _ in 0..REPETITIONS {
        offline_one.push(machine.offline(last)?.nanos);
        online_one.push(machine.online(last)?.nanos);
        offline_bulk.push(machine.offline_many(bulk)?.nanos);
        online_bulk.push(machine.online_many(bulk)?.nanos);
    }
    running.store(false, Ordering::Relaxed);
    let idle = machine.wait_idle(Duration::from_secs(30));
    let violations = machine.check_invariants();
    let tasks = machine.tally(Item::Task);
    let threads = machine.kernel_threads();
    let segments = machine.memory_segments();
    let report = machine.shutdown();
    println!(
        "{:<8} memory {} → {} frames in {} segments; tasks {} issued, {} completed once, {} lost; \
         {} kernel threads; invariants {}; shutdown {}",
        format!("{engine:?}").to_lowercase(),
        before,
        after,
        segments,
        tasks.issued,
        tasks.completed_once,
        tasks.outstanding,
        threads,
        if violations.is_empty() && idle {
            "hold"
        } else {
            "BROKEN"
        },
        if report.is_clean() {
            "clean"
        } else {
            "NOT clean"
        },
    );
    if !(violations.is_empty() && idle && report.is_clean() && tasks.outstanding == 0) {
        return Ok(Err(format!(
            "broken: {} violations, {} tasks outstanding, idle {idle}",
            violations.len(),
            tasks.outstanding
        )));
    }
    Ok(Ok(Latencies {
        offline_one: median(&offline_one) / 1e3,
        online_one: median(&online_one) / 1e3,
        offline_bulk: median(&offline_bulk) / 1e3,
        online_bulk: median(&online_bulk) / 1e3,
    }))
}
