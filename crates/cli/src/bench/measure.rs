//! Measuring helpers every benchmark shares: the calling thread's CPU
//! clock.

use std::fmt;
use std::time::Duration;

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_thread_clock_reads_and_advances() {
        let before = thread_cpu_time().expect("the thread CPU clock");
        let sum: u64 = (0..1_000_000u64).map(std::hint::black_box).sum();
        assert_eq!(sum, 499_999_500_000);
        assert!(thread_cpu_time().expect("the thread CPU clock") > before);
    }
}
