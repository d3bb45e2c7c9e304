//! Timing of operations, per stage and per step.

use alloc::vec::Vec;
use core::fmt;

use crate::cpu::{CpuMask, DEFAULT_WORDS};
use crate::platform::PlatformError;
use crate::step::{Direction, StepId};
use crate::Engine;

/// One timed piece of an operation's critical path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stage {
    /// A step's name, or one of the engine's own stages: `"checks"` (the
    /// request checked against the engine's state), `"hotplug-lock"`,
    /// `"prepare"` (the `Prepare` section), `"grace-period"`, `"stop-machine"`, `"power"`, `"starting"` (the
    /// bring-up's steps after power), `"run-on"` (the `Online` steps on
    /// their CPUs, hand-offs included), `"kick-deferred"` (waking the
    /// deferred worker), `"hotplug-unlock"`, `"snapshot"`, `"outcomes"`
    /// and `"commit"` (the engine copying the states it works on,
    /// recording each step's outcome in them, and writing them back), or
    /// `"finish-deferred"`
    /// (deferred startups of a target that were still pending and had to
    /// be completed before taking it down).
    pub name: &'static str,
    /// The step, for a step's callbacks.
    pub step: Option<StepId>,
    /// Time spent. For a step, the sum over every CPU and instance it ran
    /// for (CPU time, which exceeds wall time when targets run in parallel);
    /// for the engine's own stages, wall time on the controlling CPU:
    /// `"stop-machine"`, `"starting"` and `"run-on"` include the steps that
    /// ran inside them.
    pub nanos: u64,
    /// Whether it was timed inside one of the engine's own stages (every
    /// step is: a `Prepare` step inside `"prepare"`, a `Starting` step
    /// inside the stop-machine or the bring-up, an `Online` step inside
    /// the run on its CPU), whose time includes it:
    /// [`Report::path_nanos`] leaves it out.
    pub nested: bool,
}

/// What one operation did and how long it took.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report<const WORDS: usize = DEFAULT_WORDS> {
    /// The engine that ran it.
    pub engine: Engine,
    /// Online (`Up`) or offline (`Down`).
    pub direction: Direction,
    /// The CPUs reconfigured.
    pub cpus: CpuMask<WORDS>,
    /// Wall time from entry to return (the critical path).
    pub nanos: u64,
    /// Timed stages, in the order they ran. Each step appears at most once.
    pub stages: Vec<Stage>,
    /// Callbacks handed to the deferred worker (one per step and CPU set).
    pub deferred: usize,
    /// Pending deferred teardowns cancelled because their CPU came back
    /// first, counted per (CPU, step).
    pub cancelled: usize,
    /// Platform failures the operation went on through: a CPU that did
    /// not report dead after its dying steps ran (see
    /// [`Platform::power_off_many`](crate::Platform::power_off_many)).
    pub failures: Vec<PlatformError>,
}

impl<const WORDS: usize> Report<WORDS> {
    /// Time spent in the operation's steps (the sum of its step stages).
    pub fn step_nanos(&self) -> u64 {
        self.stages
            .iter()
            .filter(|s| s.step.is_some())
            .map(|s| s.nanos)
            .sum()
    }

    /// The critical path's time that its stages account for: every stage
    /// not [`nested`](Stage::nested) in another, in wall time on the
    /// controlling CPU (the hotplug lock and its release, the `Prepare`
    /// section, the grace period, the stop-machine or bring-up, the runs
    /// on the targets with their hand-offs, power, the deferred worker's
    /// kick, the engine's snapshot and commit of its states).
    /// What [`Report::nanos`] holds beyond it is the engine's own
    /// bookkeeping between stages.
    pub fn path_nanos(&self) -> u64 {
        self.stages
            .iter()
            .filter(|stage| !stage.nested)
            .map(|stage| stage.nanos)
            .sum()
    }

    /// The time recorded for a stage by name, if it ran.
    pub fn stage(&self, name: &str) -> Option<u64> {
        self.stages.iter().find(|s| s.name == name).map(|s| s.nanos)
    }
}

/// The last time a step's callbacks ran, on the critical path or deferred.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StepTime {
    /// Nanoseconds of the last operation's startups of this step (all CPUs and instances).
    pub startup_nanos: Option<u64>,
    /// Nanoseconds of the last operation's teardowns of this step.
    pub teardown_nanos: Option<u64>,
    /// Whether that last teardown ran on the deferred worker.
    pub teardown_deferred: bool,
    /// Whether that last startup ran on the deferred worker.
    pub startup_deferred: bool,
}

/// One line for the operation, then one per stage:
///
/// ```text
/// bolt offline 1-3: 41.2 us, 2 deferred, 0 cancelled
///   ap:sched-active          3.1 us
///   grace-period            12.0 us
/// ```
impl<const WORDS: usize> fmt::Display for Report<WORDS> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let engine = self.engine.name();
        let what = match self.direction {
            Direction::Up => "online",
            Direction::Down => "offline",
        };
        write!(
            f,
            "{engine} {what} {}: {:.1} us, {} deferred, {} cancelled",
            self.cpus,
            self.nanos as f64 / 1000.0,
            self.deferred,
            self.cancelled
        )?;
        for stage in &self.stages {
            write!(
                f,
                "\n  {:<24}{:>8.1} us",
                stage.name,
                stage.nanos as f64 / 1000.0
            )?;
        }
        for failure in &self.failures {
            write!(f, "\n  failed: {failure}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;
    use alloc::vec;

    #[test]
    fn display_lists_every_stage() {
        let report = Report {
            engine: Engine::Bolt,
            direction: Direction::Down,
            cpus: crate::CpuSet::range(1, 4),
            nanos: 41_200,
            stages: vec![
                Stage {
                    name: "ap:sched-active",
                    step: Some(StepId(8)),
                    nanos: 3_100,
                    nested: true,
                },
                Stage {
                    name: "run-on",
                    step: None,
                    nanos: 5_000,
                    nested: false,
                },
                Stage {
                    name: "grace-period",
                    step: None,
                    nanos: 12_000,
                    nested: false,
                },
            ],
            deferred: 2,
            cancelled: 0,
            failures: vec![PlatformError::new(
                crate::PlatformOperation::PowerOff,
                crate::CpuId(2),
                "did not report dead",
            )],
        };
        let text = format!("{report}");
        assert!(text.starts_with("bolt offline 1-3: 41.2 us, 2 deferred, 0 cancelled"));
        assert!(text.contains("ap:sched-active") && text.contains("12.0 us"));
        assert!(text.ends_with("failed: power-off failed for cpu2: did not report dead"));
        assert_eq!(text.lines().count(), 5);
        assert_eq!(report.step_nanos(), 3_100);
        // The step ran inside `run-on`, which counts it already.
        assert_eq!(report.path_nanos(), 17_000);
    }
}
