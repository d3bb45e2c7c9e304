//! The step callbacks the engine made, in the order it made them, kept by a
//! machine built with [`MachineBuilder::record_step_calls`](crate::MachineBuilder::record_step_calls)
//! so that tests can check an operation's rollback against what it undid.

use std::sync::Arc;

use hotkern_cpuhp::{CallbackError, Callbacks, Context as StepContext, CpuSet, Direction};

use crate::kernel::Kernel;
use hotkern_kernel::steps::differential::StepRecorder;
use hotkern_kernel::steps::StepDef;

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

/// Every call so far, kept by the shared kernel's recorder (the one the
/// differential scenario reads on every platform); one lock, so calls made
/// on different vCPUs are ordered as they happened and each vCPU's in its
/// own order.
pub(crate) type StepLog = StepRecorder;

/// The calls `log` recorded since the last take, as [`StepCall`]s: an
/// injected failure ran no callback, so it is no call here.
pub(crate) fn take_calls(log: &StepLog) -> Vec<StepCall> {
    log.take()
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

type StepFn = fn(&Kernel, &StepContext) -> Result<(), CallbackError>;

/// `def`'s callbacks as registered with the engine. With a log, a
/// direction the step has no callback for gets one that does nothing, so
/// that the engine makes (and traces) each call it would make for it.
pub(crate) fn callbacks(def: &StepDef<Kernel>, kernel: &Arc<Kernel>, logged: bool) -> Callbacks {
    let wrap = |own: Option<StepFn>| {
        if own.is_none() && !logged {
            return None;
        }
        let kernel = Arc::clone(kernel);
        Some(move |ctx: &StepContext| own.map_or(Ok(()), |own| own(&kernel, ctx)))
    };
    let mut callbacks = Callbacks::new();
    if let Some(startup) = wrap(def.startup) {
        callbacks = callbacks.startup(startup);
    }
    if let Some(teardown) = wrap(def.teardown) {
        callbacks = callbacks.teardown(teardown);
    }
    callbacks
}
