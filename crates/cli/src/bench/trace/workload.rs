//! What the disabled-site cases of both the peers' and the call sites'
//! benchmarks share: the event nobody enables, how a case is timed and
//! how its time is recorded.

use super::super::measure::{fastest_ns_per_op, ClockError};
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

/// Records `ns` per operation for `implementation` on case `name`.
pub(super) fn measure(report: &mut Report, name: &str, implementation: &str, ops: u64, ns: f64) {
    report
        .cases
        .push(Case::new(name, implementation, ops).ns_per_op(ns));
}
