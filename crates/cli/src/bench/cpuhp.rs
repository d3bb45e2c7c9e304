//! `hotkern bench cpuhp` (not built yet).

use super::{BenchOptions, Report};

pub fn run(_options: &BenchOptions) -> Result<Report, String> {
    Err("the cpuhp benchmark is not built yet".into())
}
