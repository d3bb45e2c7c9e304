//! `tracebench=N`: what one traced kernel function costs per call, for
//! `hotkern bench trace --platform qemu` to set beside Linux's `function`
//! tracer on the same emulator.
//!
//! The boot CPU calls a tiny function N times in a loop, three ways, in
//! each of [`REPETITIONS`] rounds:
//!
//! * *floor*: [`untraced_parent_pid`], a twin with no trace site at all;
//! * *off*: [`traced_parent_pid`], its call site a 5-byte NOP (the
//!   function tracer off, as every function of a Linux kernel built with
//!   `CONFIG_FUNCTION_TRACER` is while ftrace is off);
//! * *on*: the same function patched in by `set_ftrace_filter` and the
//!   `function` tracer on, recording each call into a ring.
//!
//! The body does about what Linux's `getppid(2)` handler does: follow the
//! current task to its parent and read that task's thread-group id. The
//! tracer is an instance of its own with rings that overwrite (as
//! ftrace's do by default), so the boot's own trace keeps its events.
//! Interrupts stay on, as they are around Linux's system call loop.

use core::fmt;
use core::sync::atomic::{AtomicU32, Ordering};

use hotkern_trace::function::TracerKind;
use hotkern_trace::ring::Mode;
use hotkern_trace::site::{self, SiteStatus};

use crate::arch::clock;
use crate::arch::console::println;
use crate::arch::smp;
use crate::platform::trace::TRACING;
use crate::runs::checks::Checks;

/// Rounds of the three loops; the host takes medians over them.
pub const REPETITIONS: usize = 5;
/// Calls per loop when `tracebench=` gives no number.
const DEFAULT_CALLS: u64 = 200_000;
/// Ring bytes per CPU of the bench's tracer instance: small on purpose,
/// so the rings wrap and the loop measures steady-state recording.
const BUFFER_KB: usize = 64;

/// A task as the traced function sees it: the fields `getppid` reads.
struct Task {
    thread_group: AtomicU32,
    parent: &'static Task,
}

static INIT_TASK: Task = Task {
    thread_group: AtomicU32::new(1),
    parent: &INIT_TASK,
};
static CURRENT_TASK: Task = Task {
    thread_group: AtomicU32::new(42),
    parent: &INIT_TASK,
};

/// The floor: the function's body with no trace site.
#[inline(never)]
fn untraced_parent_pid(task: &Task) -> u32 {
    core::hint::black_box(task)
        .parent
        .thread_group
        .load(Ordering::Relaxed)
}

/// The traced function (its name is what the bench's filter selects).
#[hotkern_trace::function]
#[inline(never)]
fn traced_parent_pid(task: &Task) -> u32 {
    core::hint::black_box(task)
        .parent
        .thread_group
        .load(Ordering::Relaxed)
}

/// Nanoseconds per call, one figure per round, for each way.
#[derive(Clone, Copy, Debug, Default)]
pub struct BenchReport {
    /// Calls per loop.
    pub calls: u64,
    /// The untraced twin.
    pub floor_ns: [f64; REPETITIONS],
    /// The traced function, its site a NOP.
    pub off_ns: [f64; REPETITIONS],
    /// The traced function, patched in and recording.
    pub on_ns: [f64; REPETITIONS],
    /// Events the tracer took during the *on* loops (each call's one).
    pub recorded: u64,
}

/// Nanoseconds per call of `calls` calls of `function`, timed by the TSC.
fn per_call(calls: u64, function: fn(&Task) -> u32, hz: u64) -> f64 {
    let started = clock::now();
    let mut sum = 0u32;
    for _ in 0..calls {
        sum = sum.wrapping_add(function(&CURRENT_TASK));
    }
    let ticks = clock::now().saturating_sub(started);
    core::hint::black_box(sum);
    ticks as f64 * 1e9 / hz as f64 / calls as f64
}

/// Events written to the boot CPU's rings of `tracer` so far.
fn written(tracer: &hotkern_trace::Tracer) -> u64 {
    tracer
        .stats(smp::BOOT_CPU.index())
        .map_or(0, |stats| stats.written)
}

/// Runs the bench if `word` (the `tracebench=` value) asks for it.
pub fn run(word: Option<&str>, tsc_hz: Option<u64>, checks: &mut Checks) -> Option<BenchReport> {
    const NAME: &str = "tracebench: the traced function recorded every call while patched in, none while its site was a NOP";
    let word = word?;
    let calls = if word.is_empty() {
        DEFAULT_CALLS
    } else {
        match word.parse::<u64>() {
            Ok(calls) if calls > 0 => calls,
            _ => {
                println!("hotkern: tracebench={word}: expected a number of calls above 0; not run");
                checks.check(NAME, false);
                return None;
            }
        }
    };
    let Some(hz) = tsc_hz else {
        checks.skip(NAME, "the TSC is not calibrated");
        return None;
    };
    if !matches!(site::status(), SiteStatus::Patched { .. }) {
        checks.skip(NAME, "call sites are not patched here");
        return None;
    }
    let tracer = match TRACING.instance(BUFFER_KB, Mode::Overwrite) {
        Ok(tracer) => tracer,
        Err(error) => {
            println!("hotkern: no tracer instance for tracebench: {error}");
            checks.check(NAME, false);
            return None;
        }
    };
    let mut ok = tracer.set_ftrace_filter("traced_parent_pid", false).is_ok();
    let mut report = BenchReport {
        calls,
        ..BenchReport::default()
    };
    for round in 0..REPETITIONS {
        report.floor_ns[round] = per_call(calls, untraced_parent_pid, hz);
        let before = written(tracer);
        report.off_ns[round] = per_call(calls, traced_parent_pid, hz);
        ok &= written(tracer) == before;
        ok &= tracer.set_current_tracer(TracerKind::Function).is_ok();
        let before = written(tracer);
        report.on_ns[round] = per_call(calls, traced_parent_pid, hz);
        let recorded = written(tracer) - before;
        report.recorded += recorded;
        ok &= recorded == calls;
        ok &= tracer.set_current_tracer(TracerKind::Nop).is_ok();
    }
    tracer.uninstall();
    checks.check(NAME, ok);
    let median = |values: &[f64; REPETITIONS]| {
        let mut sorted = *values;
        sorted.sort_by(f64::total_cmp);
        sorted[REPETITIONS / 2]
    };
    println!(
        "hotkern: tracebench: {calls} calls × {REPETITIONS}: floor {:.2} ns, off {:.2} ns, on {:.2} ns per call (medians)",
        median(&report.floor_ns),
        median(&report.off_ns),
        median(&report.on_ns)
    );
    Some(report)
}

/// The summary's `"tracebench"` value, or `null` when it did not run.
pub struct BenchJson<'a>(pub Option<&'a BenchReport>);

/// A JSON array of nanoseconds, to the picosecond.
struct Nanos<'a>(&'a [f64]);

impl fmt::Display for Nanos<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (index, value) in self.0.iter().enumerate() {
            if index > 0 {
                f.write_str(",")?;
            }
            write!(f, "{value:.3}")?;
        }
        f.write_str("]")
    }
}

impl fmt::Display for BenchJson<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(report) = self.0 else {
            return f.write_str("null");
        };
        write!(
            f,
            "{{\"function\":\"traced_parent_pid\",\"calls\":{},\"repetitions\":{REPETITIONS},\"recorded\":{},\"floor_ns\":{},\"off_ns\":{},\"on_ns\":{}}}",
            report.calls,
            report.recorded,
            Nanos(&report.floor_ns),
            Nanos(&report.off_ns),
            Nanos(&report.on_ns),
        )
    }
}
