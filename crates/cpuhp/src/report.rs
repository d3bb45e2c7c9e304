//! Timing of operations, per stage and per step.

use alloc::vec::Vec;
use core::fmt;

use crate::cpu::CpuSet;
use crate::platform::PlatformError;
use crate::step::{Direction, StepId};
use crate::Engine;

/// One timed piece of an operation's critical path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stage {
    /// A step's name, or one of the engine's own stages: `"hotplug-lock"`, `"grace-period"`,
    /// `"stop-machine"`, `"power"`, or `"finish-deferred"` (deferred
    /// startups of a target that were still pending and had to be completed
    /// before taking it down).
    pub name: &'static str,
    /// The step, for a step's callbacks.
    pub step: Option<StepId>,
    /// Time spent. For a step, the sum over every CPU and instance it ran
    /// for (CPU time, which exceeds wall time when targets run in parallel);
    /// for `"stop-machine"`, the wall time of the whole rendezvous, the
    /// starting/dying steps inside it included.
    pub nanos: u64,
}

/// What one operation did and how long it took.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// The engine that ran it.
    pub engine: Engine,
    /// Online (`Up`) or offline (`Down`).
    pub direction: Direction,
    /// The CPUs reconfigured.
    pub cpus: CpuSet,
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

impl Report {
    /// Time spent in the operation's steps (the sum of its step stages).
    pub fn step_nanos(&self) -> u64 {
        self.stages
            .iter()
            .filter(|s| s.step.is_some())
            .map(|s| s.nanos)
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
impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let engine = match self.engine {
            Engine::Classic => "classic",
            Engine::Bolt => "bolt",
        };
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
            cpus: CpuSet::range(1, 4),
            nanos: 41_200,
            stages: vec![
                Stage {
                    name: "ap:sched-active",
                    step: Some(StepId(8)),
                    nanos: 3_100,
                },
                Stage {
                    name: "grace-period",
                    step: None,
                    nanos: 12_000,
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
        assert_eq!(text.lines().count(), 4);
        assert_eq!(report.step_nanos(), 3_100);
    }
}
