//! `hotkern bench bcache` (not built yet).

use super::{BenchOptions, Report};

pub fn run(_options: &BenchOptions) -> Result<Report, String> {
    Err("the bcache benchmark is not built yet".into())
}
