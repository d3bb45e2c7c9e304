//! Counting the kernel's self checks, each printed as it runs with the time
//! it took.

use core::fmt;

use crate::arch::clock;
use crate::arch::console::println;

/// Names of failed checks kept for the summary.
const KEPT_FAILURES: usize = 8;

/// Passed and failed checks, with the first failures' names.
pub struct Checks {
    passed: u32,
    failed: u32,
    skipped: u32,
    failures: [&'static str; KEPT_FAILURES],
    /// The TSC when the last check ended (or the checks began).
    last: u64,
}

/// " (N µs)" once the TSC is calibrated, nothing before.
struct Took(Option<u64>);

impl fmt::Display for Took {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(micros) => write!(f, " ({micros} µs)"),
            None => Ok(()),
        }
    }
}

impl Checks {
    /// No checks yet; the first check's time counts from now.
    pub fn new() -> Self {
        Checks {
            passed: 0,
            failed: 0,
            skipped: 0,
            failures: [""; KEPT_FAILURES],
            last: clock::now(),
        }
    }

    /// Starts the next check's time now (after work that is not a check).
    pub fn restart_clock(&mut self) {
        self.last = clock::now();
    }

    /// Microseconds since the last check, restarting the count.
    fn lap(&mut self) -> Option<u64> {
        let took = clock::micros_since(self.last);
        self.last = clock::now();
        took
    }

    /// Records and prints one check; returns `ok`.
    pub fn check(&mut self, name: &'static str, ok: bool) -> bool {
        if ok {
            self.passed += 1;
            println!("hotkern: check ok   {name}{}", Took(self.lap()));
        } else {
            if let Some(slot) = self.failures.get_mut(self.failed as usize) {
                *slot = name;
            }
            self.failed += 1;
            println!("hotkern: check FAIL {name}{}", Took(self.lap()));
        }
        ok
    }

    /// Records a check that cannot run here, and why.
    pub fn skip(&mut self, name: &'static str, why: &str) {
        self.skipped += 1;
        println!("hotkern: check skip {name} ({why})");
        self.restart_clock();
    }

    /// Checks skipped.
    pub fn skipped(&self) -> u32 {
        self.skipped
    }

    /// Checks passed.
    pub fn passed(&self) -> u32 {
        self.passed
    }

    /// Checks failed.
    pub fn failed(&self) -> u32 {
        self.failed
    }

    /// The first failed checks' names.
    pub fn failures(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.failures
            .iter()
            .copied()
            .take((self.failed as usize).min(KEPT_FAILURES))
    }
}
