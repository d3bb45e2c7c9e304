//! Measuring helpers every benchmark shares: the seeded generator of random
//! inputs, the calling thread's CPU clock, wall and CPU time of a region,
//! the fastest of several runs (the median of samples is
//! [`crate::statistics::median`], shared with the other commands).

use std::fmt;
use std::hint::black_box;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::SeedableRng;

/// The generator of every benchmark's random inputs, seeded so that every
/// run sees the same inputs. `StdRng` (ChaCha12 in rand 0.9) rather than
/// `SmallRng`, whose algorithm depends on the pointer width: figures from
/// different hosts are compared, so they must come from the same inputs.
/// Inputs are drawn before any timed region, where its speed is no matter.
pub fn input_rng(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}

/// The calling thread's CPU clock could not be read.
///
/// A benchmark that meets this stops with the error: a CPU-time figure
/// without a clock behind it would be garbage dressed as a measurement.
#[derive(Debug)]
pub struct ClockError(std::io::Error);

impl fmt::Display for ClockError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cannot read the thread CPU clock (CLOCK_THREAD_CPUTIME_ID): {}",
            self.0
        )
    }
}

impl std::error::Error for ClockError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.0)
    }
}

impl From<ClockError> for String {
    fn from(error: ClockError) -> String {
        error.to_string()
    }
}

/// CPU time the calling thread has used. Unlike wall time it does not
/// count the periods the scheduler gives this core to another thread,
/// which on a shared machine would be charged to the code measured.
pub fn thread_cpu_time() -> Result<Duration, ClockError> {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid, writable timespec that outlives the call,
    // which only fills it in.
    let status = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    if status != 0 {
        return Err(ClockError(std::io::Error::last_os_error()));
    }
    // On success the kernel leaves tv_sec >= 0 and tv_nsec < 1e9.
    Ok(Duration::new(now.tv_sec as u64, now.tv_nsec as u32))
}

/// Wall-clock and thread CPU time of one region.
#[derive(Debug, Clone, Copy)]
pub struct Elapsed {
    /// Wall-clock time.
    pub wall: Duration,
    /// CPU time of the thread that ran the region.
    pub cpu: Duration,
}

/// Runs `region` and returns its wall-clock time and its result, which is
/// passed through [`black_box`] so the work cannot be optimised away.
pub fn wall_time<T>(region: impl FnOnce() -> T) -> (Duration, T) {
    let start = Instant::now();
    let out = region();
    let elapsed = start.elapsed();
    (elapsed, black_box(out))
}

/// Runs `region` and returns its wall-clock time, the calling thread's CPU
/// time during it, and its result (through [`black_box`]).
pub fn wall_and_cpu_time<T>(region: impl FnOnce() -> T) -> Result<(Elapsed, T), ClockError> {
    let cpu = thread_cpu_time()?;
    let (wall, out) = wall_time(region);
    let cpu = thread_cpu_time()?.saturating_sub(cpu);
    Ok((Elapsed { wall, cpu }, out))
}

/// Nanoseconds per operation of `ops` operations that took `elapsed`.
pub fn ns_per_op(elapsed: Duration, ops: u64) -> f64 {
    elapsed.as_secs_f64() * 1e9 / ops.max(1) as f64
}

/// Nanoseconds of thread CPU time per call of `body`: `ops` calls split
/// into `runs` equal runs, of which the fastest counts. A run that an
/// interrupt, a migration or a neighbour's cache traffic slowed down is
/// discarded instead of averaged in, on every side of a comparison alike.
/// `body` gets the call's index; a warm-up of up to 10 000 calls (first-call
/// registration, page faults) runs outside the timing.
pub fn fastest_ns_per_op(
    ops: u64,
    runs: u64,
    mut body: impl FnMut(u64),
) -> Result<f64, ClockError> {
    for i in 0..ops.min(10_000) {
        body(i);
    }
    let per_run = (ops / runs.max(1)).max(1);
    let mut best = f64::INFINITY;
    for run in 0..runs.max(1) {
        let first = run * per_run;
        let (elapsed, ()) = wall_and_cpu_time(|| {
            for i in first..first + per_run {
                body(i);
            }
        })?;
        best = best.min(ns_per_op(elapsed.cpu, per_run));
    }
    Ok(best)
}

/// The CPUs this process may run on (1 when the system will not say).
pub fn host_cpus() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ns_per_op_never_divides_by_zero() {
        assert_eq!(ns_per_op(Duration::from_micros(3), 1_000), 3.0);
        assert_eq!(ns_per_op(Duration::from_nanos(5), 0), 5.0);
    }

    #[test]
    fn the_thread_clock_reads_and_advances() {
        let (elapsed, sum) = wall_and_cpu_time(|| (0..1_000_000u64).map(black_box).sum::<u64>())
            .expect("the thread CPU clock");
        assert_eq!(sum, 499_999_500_000);
        assert!(elapsed.cpu > Duration::ZERO);
    }

    #[test]
    fn fastest_run_is_reported_per_call() {
        let mut calls = 0u64;
        let ns = fastest_ns_per_op(50, 5, |_| calls += 1).expect("the thread CPU clock");
        // Warm-up (50) plus five runs of ten.
        assert_eq!(calls, 100);
        assert!(ns.is_finite() && ns >= 0.0);
    }
}
