//! `bench trace`'s cases of call sites nobody enabled, each for three
//! implementations: hotkern's patched site (`hotkern`: a NOP, see
//! `hotkern_trace::site`), the load-and-branch site it replaced
//! (`hotkern-branch`: what `#[function]` and an event's `trace` were before
//! sites were patched, and still are where text cannot be written) and no
//! site at all (`none`).
//!
//! * `function/disabled` — a call of a small `#[inline(never)]` function
//!   (four per loop turn, as `event/disabled`), instrumented or not.
//! * `event/disabled` — `hotkern-branch` and `none` beside the hotkern and
//!   peer figures of the parent module (`none`: the loop, no site).
//! * `event/disabled-cold` — each call timed alone (`lfence; rdtsc`
//!   around it, in TSC ticks turned into ns) after streaming through twice
//!   the last-level cache, so the enable word a branch site loads comes
//!   from memory, as a kernel's tracepoint keys usually do: the case jump
//!   labels exist for. The site's code is evicted as well, for every
//!   implementation alike; `none`'s figure is the floor (the call, the
//!   code miss, the timer). LTTng-UST runs it too (`lttng.rs`).
//! * `overhead/all-sites-off` — a workload of many small functions
//!   (physmem-like frame lookups, bcache-like block probes, every function
//!   instrumented), tracing off, against the same functions built without
//!   sites.
//!
//! Every compared function starts on a 64-byte boundary, whatever its
//! site (`site_fn!`, `aligned.ld`), and so does every hot case's timing
//! loop (`loops.rs`), so no copy gains or loses by where the linker put it.

use std::hint::black_box;

use hotkern_trace::site;
use rand::Rng;

use super::super::measure::input_rng;
use super::super::{Case, Report};
use super::compared::Tables;
use super::loops;
use super::verdict;
use super::workload::{bench_quiet, measure, timed_turns};
use crate::progress::Progress;

/// The load-and-branch site's implementation name.
pub const BRANCH: &str = "hotkern-branch";
/// No site.
pub const NONE: &str = "none";

/// `event/disabled-cold`'s three call sites, each in its own function.
#[inline(never)]
fn cold_event_patched(i: u64) {
    bench_quiet::trace(i, i, i as u32);
}

#[inline(never)]
fn cold_event_branch(i: u64) {
    bench_quiet::trace_branch(i, i, i as u32);
}

#[inline(never)]
fn cold_event_none(i: u64) {
    black_box(i);
}

/// The size of the last-level cache (sysfs), 32 MiB if it cannot be read.
pub fn llc_bytes() -> usize {
    let read = |index: usize, file: &str| {
        std::fs::read_to_string(format!(
            "/sys/devices/system/cpu/cpu0/cache/index{index}/{file}"
        ))
        .ok()
    };
    let size = (0..8)
        .filter_map(|i| Some((read(i, "level")?, read(i, "size")?)))
        .filter_map(|(level, size)| {
            let level: u32 = level.trim().parse().ok()?;
            let size = size.trim();
            let kb: usize = size.strip_suffix('K')?.parse().ok()?;
            Some((level, kb * 1024))
        })
        .max();
    size.map_or(32 << 20, |(_, bytes)| bytes)
}

/// Memory streamed through between cold calls (touched when made, before
/// any timing).
pub struct Stream {
    words: Vec<u64>,
}

impl Stream {
    /// Twice the last-level cache.
    pub fn new() -> Stream {
        let words = (2 * llc_bytes()).min(1 << 30) / 8;
        Stream {
            words: (0..words as u64).collect(),
        }
    }

    /// The stream's size in bytes.
    pub fn bytes(&self) -> usize {
        self.words.len() * 8
    }

    /// Reads one word of every cache line.
    fn evict(&self) {
        let mut sum = 0u64;
        for line in self.words.iter().step_by(8) {
            sum = sum.wrapping_add(*line);
        }
        black_box(sum);
    }
}

/// The TSC, once every earlier instruction has completed (loads
/// included) and before any later one starts.
#[inline(always)]
fn stamp() -> u64 {
    use std::arch::x86_64::{_mm_lfence, _rdtsc};
    // SAFETY: `lfence` and `rdtsc` have no preconditions on x86-64.
    unsafe {
        _mm_lfence();
        let ticks = _rdtsc();
        _mm_lfence();
        ticks
    }
}

/// TSC ticks per nanosecond, measured over 20 ms of the monotonic clock.
pub fn ticks_per_ns() -> f64 {
    let start = std::time::Instant::now();
    let t0 = stamp();
    while start.elapsed().as_millis() < 20 {
        std::hint::spin_loop();
    }
    let ticks = stamp() - t0;
    ticks as f64 / start.elapsed().as_nanos() as f64
}

/// The counts of `event/disabled-cold`: calls per run and runs (the
/// fastest run's mean counts, as everywhere in `bench trace`).
#[derive(Debug, Clone, Copy)]
pub struct Cold {
    /// Calls per run.
    pub calls: u64,
    /// Runs.
    pub runs: u64,
    /// TSC ticks per ns.
    pub ticks_per_ns: f64,
}

/// Ticks per call of `call`, each made after `stream` is read through.
fn cold_ticks(cold: Cold, stream: &Stream, mut call: impl FnMut(u64)) -> f64 {
    call(0);
    let mut best = f64::INFINITY;
    for run in 0..cold.runs {
        let mut ticks = 0;
        for i in 0..cold.calls {
            stream.evict();
            let start = stamp();
            call(run * cold.calls + i);
            ticks += stamp() - start;
        }
        best = best.min(ticks as f64 / cold.calls as f64);
    }
    best
}

/// Steps of [`run`] on the progress bar.
pub const STEPS: u64 = 4;

/// Measures every case of this module but LTTng-UST's; `cold` is what
/// LTTng-UST's run of `event/disabled-cold` must use too.
pub fn run(
    report: &mut Report,
    progress: &Progress,
    scale: u64,
    stream: &Stream,
    cold: Cold,
) -> Result<(), String> {
    progress.start("function/disabled");
    let ops = 20_000_000 * scale;
    for (implementation, run) in [
        ("hotkern", loops::function_disabled_hotkern as fn(u64, u64)),
        (BRANCH, loops::function_disabled_branch),
        (NONE, loops::function_disabled_none),
    ] {
        let ns = timed_turns(ops / 4, run)? / 4.0;
        measure(report, "function/disabled", implementation, ops, ns);
    }
    progress.advance();

    // event/disabled: the loop of the parent module's hotkern case, with
    // the portable site, and with no site (the loop's floor).
    progress.start("event/disabled");
    let ops = 50_000_000 * scale;
    for (implementation, run) in [
        (BRANCH, loops::event_disabled_branch as fn(u64, u64)),
        (NONE, loops::event_disabled_none),
    ] {
        let ns = timed_turns(ops / 4, run)? / 4.0;
        measure(report, "event/disabled", implementation, ops, ns);
    }
    progress.advance();

    progress.start("event/disabled-cold");
    for (implementation, call) in [
        ("hotkern", cold_event_patched as fn(u64)),
        (BRANCH, cold_event_branch),
        (NONE, cold_event_none),
    ] {
        let ticks = cold_ticks(cold, stream, call);
        report.cases.push(
            Case::new(
                "event/disabled-cold",
                implementation,
                cold.calls * cold.runs,
            )
            .ns_per_op(ticks / cold.ticks_per_ns)
            .with("ticks", ticks),
        );
    }
    progress.advance();

    progress.start("overhead/all-sites-off");
    let ops = 2_000_000 * scale;
    let mut rng = input_rng(2026);
    let blocks: Vec<u64> = (0..ops).map(|_| rng.random_range(0..1 << 20)).collect();
    // One lookup a turn through each build of the same functions, on
    // fresh tables.
    for (implementation, run) in [
        (
            "hotkern",
            loops::all_sites_off_hotkern as fn(&mut Tables, &[u64]),
        ),
        (BRANCH, loops::all_sites_off_branch),
        (NONE, loops::all_sites_off_none),
    ] {
        let mut tables = Tables::new();
        let ns = timed_turns(ops, |first, turns| {
            run(
                &mut tables,
                &blocks[first as usize..(first + turns) as usize],
            )
        })?;
        measure(report, "overhead/all-sites-off", implementation, ops, ns);
    }
    progress.advance();
    Ok(())
}

/// The targets of these cases (issue 26), met or missed, and what the
/// call sites are in this run.
pub fn notes(report: &Report) -> Vec<String> {
    let ns = |name: &str, implementation: &str| {
        report
            .case(name, implementation)
            .and_then(|c| c.ns_per_op)
            .unwrap_or(f64::NAN)
    };
    let over_floor = |name: &str| ns(name, "hotkern") / ns(name, NONE) - 1.0;
    let mut notes = vec![format!("call sites: {}", site::status())];
    let (patched, branch, lttng) = (
        ns("event/disabled-cold", "hotkern"),
        ns("event/disabled-cold", BRANCH),
        ns("event/disabled-cold", super::lttng::NAME),
    );
    let below_lttng = lttng.is_nan() || patched < lttng;
    notes.push(format!(
        "target event/disabled-cold hotkern < hotkern-branch and < lttng-ust: {patched:.1} vs {branch:.1} vs {} ns, {}",
        if lttng.is_nan() { "(not measured)".into() } else { format!("{lttng:.1}") },
        verdict::verdict(patched < branch && below_lttng)
    ));
    for case in ["function/disabled", "event/disabled"] {
        let over = over_floor(case);
        notes.push(format!(
            "target {case} within 5% of none: {:+.1}%, {}",
            over * 100.0,
            verdict::verdict(over <= 0.05)
        ));
    }
    let over = over_floor("overhead/all-sites-off");
    notes.push(format!(
        "target overhead/all-sites-off within 2% of none: {:+.1}% (hotkern-branch {:+.1}%), {}",
        over * 100.0,
        (ns("overhead/all-sites-off", BRANCH) / ns("overhead/all-sites-off", NONE) - 1.0) * 100.0,
        verdict::verdict(over <= 0.02)
    ));
    notes
}

#[cfg(test)]
mod tests {
    use super::super::compared::{calls, workloads};
    use super::*;

    fn report(cases: &[(&str, &str, f64)]) -> Report {
        let mut report = Report::new("trace");
        for &(name, implementation, ns) in cases {
            report
                .cases
                .push(Case::new(name, implementation, 1).ns_per_op(ns));
        }
        report
    }

    #[test]
    fn each_target_is_judged_from_its_cases() {
        let notes = notes(&report(&[
            ("event/disabled-cold", "hotkern", 150.0),
            ("event/disabled-cold", BRANCH, 900.0),
            ("event/disabled-cold", super::super::lttng::NAME, 400.0),
            ("function/disabled", "hotkern", 1.0),
            ("function/disabled", NONE, 1.0),
            ("event/disabled", "hotkern", 0.2),
            ("event/disabled", NONE, 0.1),
            ("overhead/all-sites-off", "hotkern", 10.1),
            ("overhead/all-sites-off", BRANCH, 15.0),
            ("overhead/all-sites-off", NONE, 10.0),
        ]));
        assert!(notes[0].starts_with("call sites: "), "{notes:?}");
        assert_eq!(
            notes[1],
            "target event/disabled-cold hotkern < hotkern-branch and < lttng-ust: 150.0 vs 900.0 vs 400.0 ns, met"
        );
        assert_eq!(
            notes[2],
            "target function/disabled within 5% of none: +0.0%, met"
        );
        assert_eq!(
            notes[3],
            "target event/disabled within 5% of none: +100.0%, missed"
        );
        assert_eq!(
            notes[4],
            "target overhead/all-sites-off within 2% of none: +1.0% (hotkern-branch +50.0%), met"
        );
    }

    #[test]
    fn a_cold_case_slower_than_a_peer_misses_and_a_missing_peer_is_said() {
        let notes = notes(&report(&[
            ("event/disabled-cold", "hotkern", 500.0),
            ("event/disabled-cold", BRANCH, 900.0),
        ]));
        assert!(notes[1].ends_with("500.0 vs 900.0 vs (not measured) ns, met"));
        let notes = notes_of_cold(500.0, 900.0, 400.0);
        assert!(notes.ends_with("missed"), "{notes}");
    }

    fn notes_of_cold(patched: f64, branch: f64, lttng: f64) -> String {
        notes(&report(&[
            ("event/disabled-cold", "hotkern", patched),
            ("event/disabled-cold", BRANCH, branch),
            ("event/disabled-cold", super::super::lttng::NAME, lttng),
        ]))
        .swap_remove(1)
    }

    /// Every function the site cases compare, by address.
    fn compared_functions() -> Vec<(String, usize)> {
        let call = |name: &str, function: fn(u64) -> u64| (name.to_owned(), function as usize);
        let mut functions = vec![
            call("patched_call", calls::patched_call),
            call("branch_call", calls::branch_call),
            call("plain_call", calls::plain_call),
        ];
        macro_rules! workload {
            ($module:ident) => {{
                use workloads::$module::*;
                let name = |function| format!("{}::{function}", stringify!($module));
                functions.extend([
                    (name("section_of"), section_of as fn(_, _) -> _ as usize),
                    (name("segment_of"), segment_of as fn(_, _) -> _ as usize),
                    (name("frame_at"), frame_at as fn(_, _, _) -> _ as usize),
                    (name("lookup"), lookup as fn(_, _) -> _ as usize),
                    (name("bucket_of"), bucket_of as fn(_, _) -> _ as usize),
                    (name("probe"), probe as fn(_, _, _) -> _ as usize),
                    (name("fill"), fill as fn(_, _, _) as usize),
                    (name("read_block"), read_block as fn(_, _) -> _ as usize),
                ]);
            }};
        }
        workload!(patched);
        workload!(branch);
        workload!(plain);
        functions
    }

    #[test]
    fn every_compared_function_starts_a_cache_line() {
        let functions = compared_functions();
        assert_eq!(functions.len(), 27);
        for (name, address) in functions {
            assert_eq!(address % 64, 0, "{name} at {address:#x}");
        }
    }

    #[test]
    fn the_last_level_cache_has_a_size() {
        assert!(llc_bytes() >= 1 << 20);
    }
}
