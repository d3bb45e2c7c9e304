//! What the disabled-site cases of both the peers' and the call sites'
//! benchmarks share: the event nobody enables, how a case is timed and
//! how its time is recorded.

use super::super::measure::{fastest_ns_per_op, ns_per_op, wall_and_cpu_time, ClockError};
use super::super::{Case, Report};

hotkern_trace::define_event! {
    /// An event nobody enables.
    pub bench_quiet in bench {
        a: u64,
        b: u64,
        c: u32,
    }
    print "a=%llu b=%llu c=%u", a, b, c
}

/// Timed runs per case; the fastest counts. One single run measured the
/// same build's function_graph pair at 47.7 and 52.4 ns.
pub(super) const REPEATS: u64 = 5;

/// ns of thread CPU time per call of `body`: the fastest of [`REPEATS`]
/// runs, `ops` calls in all.
pub(super) fn timed(ops: u64, body: impl FnMut(u64)) -> Result<f64, ClockError> {
    fastest_ns_per_op(ops, REPEATS, body)
}

/// ns of thread CPU time per loop turn of `run` (a loop of `loops.rs`,
/// called with its first turn and its count): the fastest of [`REPEATS`]
/// runs, `turns` turns in all, after a warm-up outside the timing, as
/// [`timed`] does per call.
pub(super) fn timed_turns(turns: u64, mut run: impl FnMut(u64, u64)) -> Result<f64, ClockError> {
    run(0, turns.min(10_000));
    let per_run = (turns / REPEATS).max(1);
    let mut best = f64::INFINITY;
    for index in 0..REPEATS {
        let (elapsed, ()) = wall_and_cpu_time(|| run(index * per_run, per_run))?;
        best = best.min(ns_per_op(elapsed.cpu, per_run));
    }
    Ok(best)
}

/// Records `ns` per operation for `implementation` on case `name`.
pub(super) fn measure(report: &mut Report, name: &str, implementation: &str, ops: u64, ns: f64) {
    report
        .cases
        .push(Case::new(name, implementation, ops).ns_per_op(ns));
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// The turns `counted` was asked for, as (first, count).
    static ASKED: Mutex<Vec<(u64, u64)>> = Mutex::new(Vec::new());

    fn counted(first: u64, turns: u64) {
        ASKED.lock().unwrap().push((first, turns));
    }

    #[test]
    fn turns_are_warmed_up_then_split_into_equal_runs() {
        let ns = timed_turns(100, counted).unwrap();
        assert!(ns.is_finite() && ns >= 0.0, "{ns}");
        assert_eq!(
            *ASKED.lock().unwrap(),
            [(0, 100), (0, 20), (20, 20), (40, 20), (60, 20), (80, 20)]
        );
    }
}
