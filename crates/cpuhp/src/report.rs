//! Timing of operations, per stage and per step.

use alloc::vec::Vec;

use crate::cpu::CpuSet;
use crate::step::{Direction, StepId};
use crate::Engine;

/// One timed piece of an operation's critical path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stage {
    /// A step's name, or one of the engine's own stages:
    /// `"grace-period"`, `"stop-machine"`, `"power"`, `"rollback"`.
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
    /// Pending deferred callbacks cancelled because their CPU came back
    /// (or went away again) first.
    pub cancelled: usize,
}

impl Report {
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
