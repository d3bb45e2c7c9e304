//! The runs layer: what a boot does and reports — the self checks, the
//! CPU start and offline exercise, the hotplug run, the disk load and
//! walk, the virtio-mem experiment, and the summary line the host reads
//! (with the runs this architecture skips, [`skipped`]).
//!
//! Runs use every layer below; nothing below uses a run.

pub mod checks;
pub mod cpus;
pub mod early;
pub mod hotplug;
pub mod json;
pub mod load;
pub mod selftest;
pub mod skipped;
pub mod summary;
pub mod tasks;
pub mod trace_bench;
pub mod trace_patch;
pub mod vmem;
