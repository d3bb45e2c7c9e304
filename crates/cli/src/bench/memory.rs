//! `hotkern bench memory`: the latency of taking memory away while it is
//! used, on the user-mode machine's memory device. A region of four
//! quarters is plugged; tasks own a fraction of its frames (0, 50 or 75 %,
//! spread at random, 4 KiB each); the device asks for a quarter back and
//! the driver migrates, unplugs and confirms. Each case is the median of a
//! few shrinks (a fresh machine each), scaled to 128 MiB. With
//! `--platform qemu` the booted kernel runs the same cases ([`qemu`]), and
//! with `--linux` Debian's Linux as well ([`linux`]), and a 256 MiB guest
//! grows by a whole device and back ([`grow`], [`linux_grow`]).

mod grow;
mod linux;
mod linux_grow;
mod qemu;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use hotkern_machine::{Machine, MemoryDeviceConfig, ResizeOutcome, TaskStatus};
use rand::seq::SliceRandom;

use super::measure::input_rng;
use super::{BenchOptions, Case, Platform, Report};
use crate::progress::Progress;
use crate::statistics::median;

/// 2 MiB blocks of 4 KiB frames, as virtio-mem's default block on x86.
const BLOCK_FRAMES: u64 = 512;
const FRAME_WORDS: usize = 512;
const MIB: u64 = 1 << 20;
const FILLS: [u64; 3] = [0, 50, 75];
const REPETITIONS: usize = 3;

/// One shrink of a quarter of the region at `fill` % used: its driver
/// time, frames migrated, and whether every invariant held after it.
fn shrink_once(quarter_blocks: u64, fill: u64, seed: u64) -> Result<(u64, u64, bool), String> {
    let blocks = 4 * quarter_blocks;
    let machine = Machine::builder()
        .cpus(2)
        .memory_device(MemoryDeviceConfig {
            blocks: blocks as usize,
            block_frames: BLOCK_FRAMES,
            plugged_blocks: blocks as usize,
            frame_words: FRAME_WORDS,
            confirm_timeout: Duration::from_secs(10),
            ..Default::default()
        })
        .build()
        .map_err(|e| e.to_string())?;
    let frames = blocks * BLOCK_FRAMES;
    let keep = (frames * fill / 100) as usize;
    // Which of the region's frames stay owned: drawn before anything runs.
    let mut order: Vec<usize> = (0..frames as usize).collect();
    order.shuffle(&mut input_rng(seed));
    let kept = Arc::new(Mutex::new(order.split_off(frames as usize - keep)));
    let theirs = Arc::clone(&kept);
    machine.submit(move |ctx| {
        let slots: Vec<_> = (0..frames)
            .map(|owner| ctx.alloc_movable(owner).expect("the region is plugged"))
            .collect();
        let mut owned = vec![false; slots.len()];
        for &at in theirs.lock().unwrap().iter() {
            owned[at] = true;
        }
        for (slot, owned) in slots.into_iter().zip(owned) {
            if !owned {
                ctx.free_movable(slot);
            }
        }
        TaskStatus::Done
    });
    if !machine.wait_idle(Duration::from_secs(120)) {
        return Err("the filling task did not finish".into());
    }
    let report = machine
        .resize_memory(3 * quarter_blocks * BLOCK_FRAMES)
        .map_err(|e| e.to_string())?;
    if report.outcome != ResizeOutcome::Completed {
        return Err(format!("the shrink stopped short: {report:?}"));
    }
    let clean = machine.check_memory().is_empty() && machine.shutdown().is_clean();
    Ok((report.nanos, report.migrated, clean))
}

/// `bench memory`: `shrink/used-{0,50,75}`, impl `hotkern` (and `linux`
/// with `--platform qemu --linux`).
pub fn run(options: &BenchOptions) -> Result<Report, String> {
    if options.platform == Platform::Qemu {
        return qemu::run(options, &FILLS, REPETITIONS);
    }
    // A quarter of 16 MiB in the quick run (bench all's smoke stays
    // short), of 128 MiB with --full.
    let quarter_mib: u64 = if options.full { 128 } else { 16 };
    let quarter_blocks = quarter_mib * MIB / (BLOCK_FRAMES * 4096);
    let mut report = Report::new("memory");
    report.table_figures = vec!["ms_per_128mib", "migrated", "invariants_ok"];
    let progress = Progress::steps("memory", (FILLS.len() * REPETITIONS) as u64);
    for fill in FILLS {
        let name = format!("shrink/used-{fill}");
        progress.start(&name);
        let mut nanos = Vec::new();
        let mut migrated = 0;
        let mut clean = true;
        for repetition in 0..REPETITIONS {
            let (ns, moved, ok) =
                shrink_once(quarter_blocks, fill, 0x6d65_6d00 + repetition as u64)?;
            nanos.push(ns);
            migrated = moved;
            clean &= ok;
            progress.advance();
        }
        let ns = median(&nanos);
        let frames = quarter_mib * MIB / 4096;
        report.cases.push(
            Case::new(&name, "hotkern", frames)
                .ns_per_op(ns / frames as f64)
                .with(
                    "ms_per_128mib",
                    (ns * (128 / quarter_mib) as f64 / 1e5).round() / 10.0,
                )
                .with("shrunk_mib", quarter_mib)
                .with("migrated", migrated)
                .with("invariants_ok", clean),
        );
    }
    progress.finish();
    report.notes.push(format!(
        "a quarter ({quarter_mib} MiB) of a plugged region taken back at each fill, \
         frames of 4 KiB in 2 MiB blocks; median of {REPETITIONS}, scaled to 128 MiB"
    ));
    report.notes.push(
        "grow/64G-from-256M runs with --platform qemu only: the user-mode machine's memory \
         device builds its whole arena at start (every frame's words, 512 of them for a 4 KiB \
         frame here), so a 64 GiB device would take 64 GiB of host memory"
            .to_owned(),
    );
    if report.cases.iter().any(|case| {
        case.extra
            .iter()
            .any(|(key, value)| key == "invariants_ok" && value != &serde_json::Value::Bool(true))
    }) {
        return Err("a memory invariant broke during the benchmark".into());
    }
    Ok(report)
}
