//! The step callbacks the engine made, in the order it made them, kept by a
//! machine built with [`MachineBuilder::record_step_calls`](crate::MachineBuilder::record_step_calls)
//! so that tests can check an operation's rollback against what it undid.

use std::sync::Arc;

use hotkern_cpuhp::{CallbackError, Callbacks, Context as StepContext, CpuSet, Direction};
use parking_lot::Mutex;

use crate::kernel::Kernel;
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

/// Every call so far; one lock, so calls made on different vCPUs are
/// ordered as they happened and each vCPU's in its own order.
#[derive(Default)]
pub(crate) struct StepLog(Mutex<Vec<StepCall>>);

impl StepLog {
    /// Called from the engine's trace of a returning call
    /// ([`Platform::step_exited`](hotkern_cpuhp::Platform::step_exited)):
    /// an injected failure ran no callback, so it is no call here.
    pub(crate) fn record(&self, ctx: &StepContext, result: Result<(), CallbackError>) {
        if result == Err(CallbackError::INJECTED) {
            return;
        }
        self.0.lock().push(StepCall {
            name: ctx.name,
            direction: ctx.direction,
            cpus: ctx.cpus,
            rollback: ctx.rollback,
            deferred: ctx.deferred,
        });
    }

    /// The calls recorded since the last take.
    pub(crate) fn take(&self) -> Vec<StepCall> {
        std::mem::take(&mut *self.0.lock())
    }
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
