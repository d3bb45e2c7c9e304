//! The runs this architecture cannot do yet, from what it reports it can
//! ([`Capabilities`]): each is skipped, said on the console, and listed in
//! the summary's `"skipped_runs"`, so that a run missing from a boot's
//! report is never a silent loss.

use core::fmt::{self, Write};

use crate::arch::capabilities::Capabilities;
use crate::arch::console::println;
use crate::runs::json::JsonStr;

/// A run that needs an optional capability, and the capability it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Run {
    /// The call-site patching check (`runs::trace_patch`): text patching.
    TracePatch,
    /// The disk load and the tree walk (`runs::load`): the disk.
    Load,
    /// The virtio-mem resizes (`runs::vmem`): virtio-mem.
    Vmem,
}

impl Run {
    /// Every run that needs an optional capability.
    pub const ALL: [Run; 3] = [Run::TracePatch, Run::Load, Run::Vmem];

    /// The run's name in the summary (the key its report has there).
    pub fn name(self) -> &'static str {
        match self {
            Run::TracePatch => "trace_patch",
            Run::Load => "load",
            Run::Vmem => "vmem",
        }
    }

    /// What the run needs, for the console.
    fn needs(self) -> &'static str {
        match self {
            Run::TracePatch => "text patching",
            Run::Load => "virtio-blk disk",
            Run::Vmem => "virtio-mem interrupt",
        }
    }

    /// Whether an architecture with `capabilities` can do the run.
    pub fn possible(self, capabilities: Capabilities) -> bool {
        match self {
            Run::TracePatch => capabilities.text_patching,
            Run::Load => capabilities.disk,
            Run::Vmem => capabilities.virtio_mem,
        }
    }
}

/// The runs skipped on this architecture.
///
/// ```ignore
/// let skipped = SkippedRuns::of(arch::CAPABILITIES);
/// let patch = skipped.unless(Run::TracePatch, || trace_patch::run(&mut checks));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SkippedRuns {
    capabilities: Capabilities,
}

impl SkippedRuns {
    /// The runs an architecture with `capabilities` skips, each said on
    /// the console once, here.
    pub fn of(capabilities: Capabilities) -> SkippedRuns {
        let skipped = SkippedRuns { capabilities };
        for run in skipped.iter() {
            println!(
                "hotkern: {} run skipped: this architecture has no {} yet",
                run.name(),
                run.needs()
            );
        }
        skipped
    }

    /// The skipped runs, in [`Run::ALL`]'s order.
    pub fn iter(&self) -> impl Iterator<Item = Run> + '_ {
        Run::ALL
            .into_iter()
            .filter(|run| !run.possible(self.capabilities))
    }

    /// Whether `run` is skipped.
    pub fn contains(&self, run: Run) -> bool {
        !run.possible(self.capabilities)
    }

    /// `body`'s report, or `None` without running it if `run` is skipped.
    pub fn unless<T>(&self, run: Run, body: impl FnOnce() -> Option<T>) -> Option<T> {
        if self.contains(run) {
            None
        } else {
            body()
        }
    }
}

/// The skipped runs' names as a JSON array (for the summary).
pub struct SkippedJson<'a>(pub &'a SkippedRuns);

impl fmt::Display for SkippedJson<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_char('[')?;
        for (index, run) in self.0.iter().enumerate() {
            if index > 0 {
                f.write_char(',')?;
            }
            write!(f, "{}", JsonStr(run.name()))?;
        }
        f.write_char(']')
    }
}
