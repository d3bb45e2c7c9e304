//! The function profiler (`function_profile_enabled`, `trace_stat/function<N>`):
//! per CPU and per function, hits, total time and the sum of squared times.

use alloc::boxed::Box;
use alloc::vec::Vec;

use super::{FunctionSite, MAX_SITES};
use crate::ring::local::{AtomicU64, Ordering};

/// One row of `trace_stat/function<N>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileEntry {
    /// The profiled function's name (the `Function` column).
    pub(crate) function: &'static str,
    /// Its Rust module path, to tell apart functions of the same name.
    pub(crate) module: &'static str,
    /// Calls that returned while the profiler ran (`Hit`).
    pub(crate) hits: u64,
    /// Total time in the function (children included), ns.
    pub(crate) time_ns: u64,
    /// Sum of squared durations in ns²/1000.
    pub(crate) time_squared: u64,
}

impl ProfileEntry {
    /// Average time per call, ns.
    pub fn avg_ns(&self) -> u64 {
        self.time_ns.checked_div(self.hits).unwrap_or(0)
    }

    /// ftrace's `s^2` column: the sample variance in ns²/1000, which ftrace
    /// prints with its duration format (so it reads as µs²).
    pub fn variance(&self) -> u64 {
        if self.hits < 2 {
            return 0;
        }
        let n = u128::from(self.hits);
        let sum = u128::from(self.time_ns);
        let squares = u128::from(self.time_squared) * 1000;
        let numerator = (n * squares).saturating_sub(sum * sum);
        (numerator / (n * (n - 1) * 1000)) as u64
    }
}

/// One function's counters on one CPU.
///
/// Locked atomics, not `LocalU64`: besides the owning CPU's exit hooks,
/// `set_function_profile(true)` resets the cells from the controlling
/// thread while writers may be recording. A non-locked `add` racing with
/// that reset could write back its pre-reset sum and undo the reset.
struct Cell {
    hits: AtomicU64,
    time: AtomicU64,
    squared: AtomicU64,
}

impl Cell {
    fn new() -> Self {
        Cell {
            hits: AtomicU64::new(0),
            time: AtomicU64::new(0),
            squared: AtomicU64::new(0),
        }
    }
}

/// Per-CPU profile cells, indexed by site.
pub(crate) struct ProfileTable {
    cells: Box<[Cell]>,
}

impl ProfileTable {
    pub(crate) fn new() -> Self {
        ProfileTable {
            cells: (0..MAX_SITES).map(|_| Cell::new()).collect(),
        }
    }

    /// Adds one completed call (owning CPU only).
    #[inline]
    pub(crate) fn record(&self, index: usize, ns: u64) {
        if let Some(cell) = self.cells.get(index) {
            // Relaxed: independent counters, read only for statistics.
            cell.hits.fetch_add(1, Ordering::Relaxed);
            cell.time.fetch_add(ns, Ordering::Relaxed);
            cell.squared
                .fetch_add(ns.saturating_mul(ns) / 1000, Ordering::Relaxed);
        }
    }

    pub(crate) fn reset(&self) {
        for cell in self.cells.iter() {
            cell.hits.store(0, Ordering::Relaxed);
            cell.time.store(0, Ordering::Relaxed);
            cell.squared.store(0, Ordering::Relaxed);
        }
    }

    /// Rows with at least one hit, by total time, longest first.
    pub(crate) fn entries(&self, sites: &[&'static FunctionSite]) -> Vec<ProfileEntry> {
        let mut rows: Vec<ProfileEntry> = sites
            .iter()
            .enumerate()
            .filter_map(|(index, site)| {
                let cell = self.cells.get(index)?;
                let hits = cell.hits.load(Ordering::Relaxed);
                (hits > 0).then(|| ProfileEntry {
                    function: site.name(),
                    module: site.module(),
                    hits,
                    time_ns: cell.time.load(Ordering::Relaxed),
                    time_squared: cell.squared.load(Ordering::Relaxed),
                })
            })
            .collect();
        rows.sort_by(|a, b| b.time_ns.cmp(&a.time_ns).then(a.function.cmp(b.function)));
        rows
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variance_matches_the_textbook_formula() {
        let times = [1000u64, 3000, 5000];
        let entry = ProfileEntry {
            function: "f",
            module: "m",
            hits: 3,
            time_ns: times.iter().sum(),
            time_squared: times.iter().map(|t| t * t / 1000).sum(),
        };
        assert_eq!(entry.avg_ns(), 3000);
        // Sample variance = 4e6 ns² = 4000 in ns²/1000.
        assert_eq!(entry.variance(), 4000);
        let one = ProfileEntry {
            hits: 1,
            ..entry.clone()
        };
        assert_eq!(one.variance(), 0);
    }
}
