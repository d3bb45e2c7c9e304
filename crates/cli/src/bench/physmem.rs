//! `hotkern bench physmem` (not built yet).

use super::{BenchOptions, Report};

pub fn run(_options: &BenchOptions) -> Result<Report, String> {
    Err("the physmem benchmark is not built yet".into())
}
