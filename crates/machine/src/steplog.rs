//! The step callbacks the engine made, in the order it made them, kept by a
//! machine built with [`MachineBuilder::record_step_calls`](crate::MachineBuilder::record_step_calls)
//! so that tests can check an operation's rollback against what it undid.

use hotkern_cpuhp::{CallbackError, CpuSet, Direction};

use hotkern_kernel::hotplug::Control;

/// One call of a step's startup or teardown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepCall {
    /// The step's name.
    pub name: &'static str,
    /// Startup (`Up`) or teardown (`Down`).
    pub direction: Direction,
    /// The CPUs the call covered (several for an aggregated call).
    pub cpus: CpuSet,
    /// Whether it undid part of a failed operation.
    pub rollback: bool,
    /// Whether the deferred worker made it.
    pub deferred: bool,
}

/// The calls `control` recorded since the last take (one lock, so calls
/// made on different vCPUs are in the order they were made), as [`StepCall`]s: an
/// injected failure ran no callback, so it is no call here.
pub(crate) fn take_calls(control: &Control) -> Vec<StepCall> {
    control
        .take_steps()
        .into_iter()
        .filter(|record| record.result != Err(CallbackError::INJECTED))
        .map(|record| StepCall {
            name: record.name,
            direction: record.direction,
            cpus: record.cpus,
            rollback: record.rollback,
            deferred: record.deferred,
        })
        .collect()
}
