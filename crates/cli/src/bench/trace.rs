//! `hotkern bench trace` (not built yet).

use super::{BenchOptions, Report};

pub fn run(_options: &BenchOptions) -> Result<Report, String> {
    Err("the trace benchmark is not built yet".into())
}
