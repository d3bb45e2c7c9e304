//! `hotkern bench trace`: the cost of recording, hotkern against the
//! tracers people use, each built and run by the benchmark on the same
//! workload and timed the same way, in one run.
//!
//! Cases (plus `clock/read`, one read of hotkern's TSC clock, for
//! reference):
//! * `event/disabled` — a call site whose event nobody wants;
//! * `event/enabled` — an event with three integer fields, recorded:
//!   `hotkern`, the event calling its only consumer directly, and
//!   `hotkern-list`, forced through the walk over every tracer
//!   (`event::direct`);
//! * `function_graph/pair` — one instrumented call: entry + exit records
//!   (hotkern's `#[function]` under `function_graph`; for `tracing`, a span
//!   created, entered, exited and closed, which is what `#[instrument]`
//!   does; for uftrace, a `-pg` call recorded, less the untraced call);
//! * `function/enabled` — one instrumented call under the `function`
//!   tracer: `hotkern`, the site calling its only tracer directly, and
//!   `hotkern-list`, the same call forced through the walk over every
//!   tracer that shared sites take (`function::dispatch`);
//! * `printk` — a debug message with two integer arguments stored unformatted
//!   (hotkern's `trace_printk!`; for `tracing`, `info!(a, b, "message")`);
//! * `function/disabled`, `event/disabled-cold`, `overhead/all-sites-off`
//!   and `event/disabled`'s `hotkern-branch` and `none`: call sites nobody
//!   enabled, patched to NOPs or not, against no site ([`sites`]).
//!
//! and for hotkern `throughput/1`, `throughput/2`: events per second from one
//! and two writer threads, each on its own CPU buffer.
//!
//! Peers: `tracing-bare` ([`bare`], every case), `tracing-fmt` and
//! `tracing-chrome` ([`subscribers`]: enabled events and pairs), `lttng-ust` ([`lttng`]: disabled and enabled
//! events) and `uftrace` ([`uftrace`]: pairs). A peer whose tools are not
//! installed is skipped with a note naming the Debian packages.
//!
//! Per-call costs are the measuring thread's CPU time
//! (`CLOCK_THREAD_CPUTIME_ID`), so a busy machine does not inflate them,
//! and each is the fastest of five runs, inputs (the loop counter) made
//! outside the timing; the C peers time themselves with the same rules
//! (`c/timing.h`). Throughput is wall-clock.

/// Defines `$name(first, turns)`: loop turns `first..first + turns` of
/// four calls of `$call`, written with `$i` (the loop counter) and `$k` (0
/// to 3), each with its own `$k`; [`workload::timed_turns`] times it. A
/// one-site loop is a handful of instructions whose speed (one or two
/// cycles a turn) hangs on where the linker happened to place it, not on
/// the site: hence four calls a turn, and a function of its own for every
/// compared loop, in the link section `aligned.ld` starts on a 64-byte
/// boundary, so each loop is placed by its own code alone.
macro_rules! four_a_turn {
    ($(#[$doc:meta])* $name:ident, |$i:ident, $k:ident| $call:expr) => {
        $(#[$doc])*
        #[link_section = concat!(".text.hotkern_bench_aligned.loop.", stringify!($name))]
        #[inline(never)]
        pub fn $name(first: u64, turns: u64) {
            for $i in first..first + turns {
                {
                    let $k = 0;
                    $call;
                }
                {
                    let $k = 1;
                    $call;
                }
                {
                    let $k = 2;
                    $call;
                }
                {
                    let $k = 3;
                    $call;
                }
            }
        }
    };
}

mod bare;
mod compared;
mod guests;
mod linux_guest;
mod loops;
mod lttng;
mod qemu;
mod sites;
mod subscribers;
pub(super) mod tools;
mod uftrace;
mod verdict;
mod workload;

use std::hint::black_box;
use std::sync::Arc;

use hotkern_trace::function::TracerKind;
use hotkern_trace::internals::dispatch::set_list_only;
use hotkern_trace::platform::{Clock, ThreadCpus, TscClock};
use hotkern_trace::ring::Mode;
use hotkern_trace::{TraceConfig, Tracer};

use super::measure::{host_cpus, wall_and_cpu_time, wall_time, ClockError};
use super::{BenchOptions, Case, Report};
use crate::progress::Progress;
use tools::NotMeasured;
use workload::{bench_quiet, measure, timed, timed_turns, REPEATS};

hotkern_trace::define_event! {
    /// The benchmark's event: three integer fields.
    pub bench_sample in bench {
        a: u64,
        b: u64,
        c: u32,
    }
    print "a=%llu b=%llu c=%u", a, b, c
}

mod traced {
    /// The instrumented call of `function_graph/pair`.
    #[hotkern_trace::function]
    #[inline(never)]
    pub fn traced_call(x: u64) -> u64 {
        std::hint::black_box(x.wrapping_mul(3))
    }
}

/// Events per second (wall clock) from `threads` writers, each on its own
/// CPU buffer, and per second of the writers' own CPU time (which shows
/// whether they slow each other down, whatever else the machine runs): the
/// best of [`THROUGHPUT_REPEATS`] runs.
fn throughput(threads: usize, per_thread: u64) -> Result<(f64, f64), String> {
    let (mut best, mut best_cpu) = (0.0f64, 0.0f64);
    for _ in 0..THROUGHPUT_REPEATS {
        let (rate, cpu_rate) = throughput_once(threads, per_thread)?;
        best = best.max(rate);
        best_cpu = best_cpu.max(cpu_rate);
    }
    Ok((best, best_cpu))
}

/// Runs per throughput case; the best counts (see [`REPEATS`]).
const THROUGHPUT_REPEATS: usize = 3;

/// `function/enabled` and `event/enabled` through the list walk (hotkern,
/// direct calls off).
const LIST: &str = "hotkern-list";

fn throughput_once(threads: usize, per_thread: u64) -> Result<(f64, f64), String> {
    let (elapsed, writers) = wall_time(|| {
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|_| s.spawn(move || write_events(per_thread)))
                .collect();
            handles.into_iter().map(|h| h.join()).collect::<Vec<_>>()
        })
    });
    let mut cpu_seconds = 0.0;
    for writer in writers {
        cpu_seconds += writer.map_err(|_| "a throughput writer panicked".to_owned())??;
    }
    let events = (threads as u64 * per_thread) as f64;
    Ok((
        events / elapsed.as_secs_f64(),
        events / cpu_seconds.max(1e-9) * threads as f64,
    ))
}

/// One throughput writer: `events` events; returns its CPU seconds.
fn write_events(events: u64) -> Result<f64, ClockError> {
    let (elapsed, ()) = wall_and_cpu_time(|| {
        for i in 0..events {
            bench_sample::trace(i, i ^ 0x55, i as u32);
        }
    })?;
    Ok(elapsed.cpu.as_secs_f64())
}

/// The cases in the order the table shows them, each with all its peers.
const CASE_ORDER: [&str; 11] = [
    "clock/read",
    "function/disabled",
    "event/disabled",
    "event/disabled-cold",
    "overhead/all-sites-off",
    "event/enabled",
    "function_graph/pair",
    "function/enabled",
    "printk",
    "throughput/1",
    "throughput/2",
];

/// The peers the targets say hotkern must beat: what people record with.
const MAINSTREAM: [&str; 4] = [
    lttng::NAME,
    uftrace::NAME,
    subscribers::FMT,
    subscribers::CHROME,
];

/// hotkern's `bench_sample` as a `tracing` event: three integer fields.
#[inline(always)]
fn tracing_event(i: u64) {
    tracing::info!(a = black_box(i), b = i ^ 0x55, c = i as u32)
}

/// The `tracing` twin of hotkern's `traced_call`: what `#[instrument]`
/// expands to.
#[inline(never)]
fn tracing_call(x: u64) -> u64 {
    let span = tracing::info_span!("traced_call");
    let _entered = span.enter();
    black_box(x.wrapping_mul(3))
}

/// `event/enabled` and `function_graph/pair` through the `tracing`
/// subscriber this thread sees, ns each.
fn tracing_cases(counts: subscribers::Counts) -> Result<[(&'static str, f64); 2], String> {
    let enabled = timed(counts.enabled_ops, tracing_event)?;
    let pair = timed(counts.pair_ops, |i| {
        black_box(tracing_call(black_box(i)));
    })?;
    Ok([("event/enabled", enabled), ("function_graph/pair", pair)])
}

/// Runs the benchmark: hotkern and `tracing-bare` in this process, then
/// the other peers.
pub fn run(options: &BenchOptions) -> Result<Report, String> {
    if options.platform == super::Platform::Qemu {
        return qemu::run();
    }
    let scale: u64 = if options.full { 10 } else { 1 };
    let progress = Progress::steps("trace", 18 + sites::STEPS);
    let mut report = Report::new("trace");
    // event/disabled-cold's stream and timing, the same for LTTng-UST.
    let stream = sites::Stream::new();
    let cold = sites::Cold {
        calls: 20 * scale,
        runs: REPEATS,
        ticks_per_ns: sites::ticks_per_ns(),
    };
    let clock_ns = run_in_process(&mut report, &progress, scale, (&stream, cold))?;

    // Fewer calls than hotkern's cases: each costs hundreds of ns.
    let counts = subscribers::Counts {
        enabled_ops: 300_000 * scale,
        pair_ops: 200_000 * scale,
    };
    let ops = [counts.enabled_ops, counts.pair_ops];
    for (peer, measure) in [
        (subscribers::FMT, subscribers::fmt as fn(_, _) -> _),
        (subscribers::CHROME, subscribers::chrome),
    ] {
        progress.start(peer);
        for ((case, ns), ops) in measure(counts, tracing_cases)?.into_iter().zip(ops) {
            report.cases.push(Case::new(case, peer, ops).ns_per_op(ns));
        }
        progress.advance();
    }

    progress.start(lttng::NAME);
    let counts = lttng::Counts {
        disabled_turns: 12_500_000 * scale,
        enabled_ops: 3_000_000 * scale,
        runs: REPEATS,
        cold_calls: cold.calls,
        stream_bytes: stream.bytes(),
    };
    drop(stream);
    match lttng::measure(counts) {
        Ok([(disabled, off), (enabled, on), (cold_case, ticks)]) => {
            report
                .cases
                .push(Case::new(disabled, lttng::NAME, 4 * counts.disabled_turns).ns_per_op(off));
            report
                .cases
                .push(Case::new(enabled, lttng::NAME, counts.enabled_ops).ns_per_op(on));
            report.cases.push(
                Case::new(cold_case, lttng::NAME, cold.calls * cold.runs)
                    .ns_per_op(ticks / cold.ticks_per_ns)
                    .with("ticks", ticks),
            );
        }
        Err(why) => skipped(&mut report, lttng::NAME, why)?,
    }
    progress.advance();

    progress.start(uftrace::NAME);
    // The recorded data (16 bytes per record) goes to disk: 32 MB a
    // million calls, so --full stops at four million.
    let ops = 1_000_000 * scale.min(4);
    match uftrace::measure(ops, REPEATS) {
        Ok(pair) => report.cases.push(
            Case::new("function_graph/pair", uftrace::NAME, ops)
                .ns_per_op(pair.added())
                .with("traced_ns", pair.traced)
                .with("untraced_ns", pair.untraced),
        ),
        Err(why) => skipped(&mut report, uftrace::NAME, why)?,
    }
    progress.advance();

    report
        .cases
        .sort_by_key(|c| CASE_ORDER.iter().position(|n| *n == c.name));
    verdict::add_ratios(&mut report);
    notes(&mut report, clock_ns);
    report.table_figures = vec![
        verdict::OVER_HOTKERN,
        "traced_ns",
        "untraced_ns",
        "events_per_s",
    ];
    Ok(report)
}

/// A peer without figures: a note when its tools are missing, the
/// benchmark's error when they are there and failed.
fn skipped(report: &mut Report, peer: &str, why: NotMeasured) -> Result<(), String> {
    match why {
        NotMeasured::Skip(skip) => {
            report.notes.push(format!("{peer} not measured: {skip}"));
            Ok(())
        }
        NotMeasured::Failed(error) => Err(format!("bench trace, peer {peer}: {error}")),
    }
}

/// hotkern's cases and `tracing-bare`'s, in this process (with
/// [`sites`]'s, which get `event/disabled-cold`'s stream and counts);
/// returns the clock read's ns.
fn run_in_process(
    report: &mut Report,
    progress: &Progress,
    scale: u64,
    (stream, cold): (&sites::Stream, sites::Cold),
) -> Result<f64, String> {
    let clock = TscClock::calibrate();
    let cpus = ThreadCpus::new(4);
    let config = TraceConfig {
        buffer_kb: 4096,
        mode: Mode::Overwrite,
    };
    let tracer = Tracer::new(config, Arc::new(clock), cpus)
        .map_err(|e| e.to_string())?
        .install()
        .map_err(|e| e.to_string())?;
    tracing::subscriber::set_global_default(bare::MemorySubscriber { clock })
        .map_err(|e| format!("installing the tracing subscriber: {e}"))?;
    let sample_id = bench_sample::EVENT.id();
    let _ = bench_quiet::EVENT.id();

    // clock/read: what one read of the shared clock costs here, the floor
    // under every recorded event (both sides read it once per event, twice
    // per function_graph pair).
    progress.start("clock/read");
    let ops = 10_000_000 * scale;
    let clock_ns = timed(ops, |_| {
        black_box(clock.now_ns());
    })?;
    measure(report, "clock/read", "tsc", ops, clock_ns);
    progress.advance();

    // event/disabled
    progress.start("event/disabled");
    let ops = 50_000_000 * scale;
    // Four call sites per loop turn on both sides (`loops`).
    let ns = timed_turns(ops / 4, loops::event_disabled_hotkern)? / 4.0;
    measure(report, "event/disabled", "hotkern", ops, ns);
    progress.advance();
    let ns = timed_turns(ops / 4, loops::event_disabled_tracing)? / 4.0;
    measure(report, "event/disabled", bare::NAME, ops, ns);
    progress.advance();
    sites::run(report, progress, scale, stream, cold)?;

    // event/enabled
    progress.start("event/enabled");
    tracer
        .set_event_enabled(sample_id, true)
        .map_err(|e| e.to_string())?;
    let ops = 3_000_000 * scale;
    // Its only consumer called directly, and forced through the list.
    for (implementation, list_only) in [("hotkern", false), (LIST, true)] {
        set_list_only(list_only);
        let ns = timed(ops, |i| {
            bench_sample::trace(black_box(i), i ^ 0x55, i as u32)
        });
        set_list_only(false);
        measure(report, "event/enabled", implementation, ops, ns?);
        progress.advance();
    }
    let ns = timed(ops, tracing_event)?;
    measure(report, "event/enabled", bare::NAME, ops, ns);
    progress.advance();

    // function_graph/pair
    progress.start("function_graph/pair");
    tracer
        .set_ftrace_filter("traced_call", false)
        .map_err(|e| e.to_string())?;
    tracer
        .set_current_tracer(TracerKind::FunctionGraph)
        .map_err(|e| e.to_string())?;
    let ops = 2_000_000 * scale;
    let ns = timed(ops, |i| {
        black_box(traced::traced_call(black_box(i)));
    })?;
    tracer
        .set_current_tracer(TracerKind::Nop)
        .map_err(|e| e.to_string())?;
    measure(report, "function_graph/pair", "hotkern", ops, ns);
    progress.advance();
    let ns = timed(ops, |i| {
        black_box(tracing_call(black_box(i)));
    })?;
    measure(report, "function_graph/pair", bare::NAME, ops, ns);
    progress.advance();

    // function/enabled: one call under the `function` tracer, its site
    // watched by this tracer alone: called directly, and forced through
    // the list walk shared sites take.
    progress.start("function/enabled");
    tracer
        .set_current_tracer(TracerKind::Function)
        .map_err(|e| e.to_string())?;
    let ops = 2_000_000 * scale;
    for (implementation, list_only) in [("hotkern", false), (LIST, true)] {
        set_list_only(list_only);
        let ns = timed(ops, |i| {
            black_box(traced::traced_call(black_box(i)));
        });
        set_list_only(false);
        measure(report, "function/enabled", implementation, ops, ns?);
        progress.advance();
    }
    tracer
        .set_current_tracer(TracerKind::Nop)
        .map_err(|e| e.to_string())?;

    // printk
    progress.start("printk");
    let ops = 2_000_000 * scale;
    let ns = timed(ops, |i| {
        hotkern_trace::trace_printk!("block {} sector {}", black_box(i), i + 1)
    })?;
    measure(report, "printk", "hotkern", ops, ns);
    progress.advance();
    let ns = timed(ops, |i| {
        tracing::info!(block = black_box(i), sector = i + 1, "block and sector")
    })?;
    measure(report, "printk", bare::NAME, ops, ns);
    progress.advance();

    // throughput: hotkern's event path from 1 and 2 threads, own buffers.
    progress.start("throughput");
    let per_thread = 3_000_000 * scale;
    let (one, one_cpu) = throughput(1, per_thread)?;
    report.cases.push(
        Case::new("throughput/1", "hotkern", per_thread)
            .with("events_per_s", one.round())
            .with("events_per_cpu_s", one_cpu.round())
            .ns_per_op(1e9 / one),
    );
    progress.advance();
    let (two, two_cpu) = throughput(2, per_thread)?;
    report.cases.push(
        Case::new("throughput/2", "hotkern", 2 * per_thread)
            .with("events_per_s", two.round())
            .with("events_per_cpu_s", two_cpu.round())
            .ns_per_op(1e9 / two),
    );
    progress.advance();
    tracer
        .set_event_enabled(sample_id, false)
        .map_err(|e| e.to_string())?;

    // Accounting sanity: everything offered was either kept or counted lost.
    let mut written = 0;
    for cpu in 0..tracer.cpus() {
        let stats = tracer.stats(cpu).map_err(|e| e.to_string())?;
        if stats.written < stats.read + stats.lost() {
            return Err(format!("cpu {cpu}: accounting broken: {stats:?}"));
        }
        written += stats.written;
    }
    tracer.clear();
    tracer.uninstall();
    black_box(bare::memory_checksum());

    if one > 0.0 {
        report
            .ratios
            .insert("throughput/2_over_1".into(), two / one);
    }
    report.notes.extend([
        format!(
            "target throughput/2 >= 1.6x throughput/1: {:.2}x, {} ({} CPUs here)",
            two / one.max(1.0),
            verdict::verdict(two >= 1.6 * one),
            host_cpus()
        ),
        format!(
            "per-writer CPU-time throughput 2/1: {:.2}x (2.0 = writers do not slow each other down)",
            two_cpu / one_cpu.max(1.0)
        ),
        format!("{written} events written to the hotkern buffers during the run; every one read or counted lost"),
    ]);
    Ok(clock_ns)
}

/// The targets met or missed, and what the clock costs of each figure.
fn notes(report: &mut Report, clock_ns: f64) {
    let ns = |name: &str| {
        report
            .case(name, "hotkern")
            .and_then(|c| c.ns_per_op)
            .unwrap_or(f64::NAN)
    };
    let (disabled, enabled, pair) = (
        ns("event/disabled"),
        ns("event/enabled"),
        ns("function_graph/pair"),
    );
    let mut notes = vec![
        format!(
            "target event/disabled <= 1 ns: {disabled:.2} ns, {}",
            verdict::verdict(disabled <= 1.0)
        ),
        verdict::faster_than(report, &MAINSTREAM),
    ];
    notes.extend(sites::notes(report));
    notes.extend(verdict::clock_targets(enabled, pair, clock_ns));
    notes.push(format!(
        "per-call figures are the measuring thread's CPU time; hotkern and tracing-bare read the same TSC clock, {clock_ns:.1} ns per read here (clock/read), so hotkern's own work per event is ~{:.1} ns (event/enabled minus one read) and ~{:.1} ns per function_graph pair (minus two)",
        enabled - clock_ns,
        pair - 2.0 * clock_ns
    ));
    // Informational: the bare subscriber is the floor of `tracing`, not
    // what anyone records with, so it has no target.
    notes.push(verdict::faster_than(report, &[bare::NAME]).replacen("target ", "", 1));
    // Targets first, as the other benchmarks print them.
    let throughput: Vec<String> = report.notes.drain(..).collect();
    report.notes = notes;
    report.notes.extend(throughput);
}

#[cfg(test)]
mod tests {
    use super::tools::Skip;
    use super::*;

    #[test]
    fn missing_tools_are_a_note_and_a_failed_peer_an_error() {
        let mut report = Report::new("trace");
        let skip = Skip::Missing {
            what: "`uftrace`".into(),
            packages: "uftrace",
        };
        assert!(skipped(&mut report, uftrace::NAME, skip.into()).is_ok());
        assert_eq!(
            report.notes,
            [
                "uftrace not measured: `uftrace` not found; install Debian's uftrace \
              (apt-get install uftrace, or scripts/setup)"
            ]
        );
        let failed = NotMeasured::Failed("lttng start: exit status: 1".into());
        let err = skipped(&mut report, lttng::NAME, failed).unwrap_err();
        assert_eq!(
            err,
            "bench trace, peer lttng-ust: lttng start: exit status: 1"
        );
        assert_eq!(report.notes.len(), 1);
    }

    #[test]
    fn cases_are_shown_grouped_in_the_fixed_order() {
        let mut cases = [
            ("event/enabled", "hotkern"),
            ("function_graph/pair", "hotkern"),
            ("event/enabled", "lttng-ust"),
            ("clock/read", "tsc"),
        ];
        cases.sort_by_key(|(name, _)| CASE_ORDER.iter().position(|n| n == name));
        assert_eq!(
            cases.map(|(name, implementation)| format!("{name} {implementation}")),
            [
                "clock/read tsc",
                "event/enabled hotkern",
                "event/enabled lttng-ust",
                "function_graph/pair hotkern"
            ]
        );
    }
}
