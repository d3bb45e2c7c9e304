//! Calling one step's callbacks, instance by instance, with timing and
//! failure injection.

use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, Ordering};

use crate::cpu::{CpuId, CpuMask};
use crate::error::Error;
use crate::platform::{Platform, PlatformError, PlatformOperation};
use crate::step::{
    Callback, CallbackError, Callbacks, Context, Direction, InstanceId, Reuse, StepId, StepSpec,
};

/// A table entry with whatever is registered on it.
#[derive(Clone, Debug)]
pub(crate) struct Registered<const WORDS: usize> {
    pub(crate) spec: StepSpec,
    pub(crate) callbacks: Option<Callbacks<WORDS>>,
    pub(crate) instances: Vec<InstanceId>,
}

/// Where a failure is injected: the next time the engine reaches `step` in
/// `direction` during an operation (for `cpu`, or any CPU if `None`), it fails
/// as if the callback had returned [`CallbackError::INJECTED`]. One-shot, like
/// Linux's `hotplug/fail`.
///
/// ```
/// use hotkern_cpuhp::{Direction, FailAt, StepId};
/// let point = FailAt { step: StepId(3), direction: Direction::Down, cpu: None };
/// assert_eq!(point.step, StepId(3));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FailAt {
    /// The step that fails.
    pub step: StepId,
    /// Startup (`Up`) or teardown (`Down`).
    pub direction: Direction,
    /// Only for this CPU (or any CPU of an aggregated call holding it).
    pub cpu: Option<CpuId>,
}

/// Where a platform failure is injected: the next time an operation asks
/// the platform for `operation` with `cpu` among the CPUs it concerns (any
/// CPU if `None`), the engine acts as if that CPU had failed it. One-shot,
/// like [`FailAt`].
///
/// What the engine then does is what a real failure of the platform makes
/// it do (see [`Platform`]'s methods): `power-on` starts every other CPU
/// and names this one as not started; `run-on` runs the work on every other
/// CPU; `stop-machine`, `hotplug-lock` and the grace periods fail before
/// anything runs; `power-off` stops every CPU and reports this one as late
/// to die, which the operation survives (its report lists it).
///
/// ```
/// use hotkern_cpuhp::{CpuId, PlatformFailAt, PlatformOperation};
/// let point = PlatformFailAt { operation: PlatformOperation::PowerOn, cpu: Some(CpuId(2)) };
/// assert_eq!(point.operation.name(), "power-on");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PlatformFailAt {
    /// The operation that fails.
    pub operation: PlatformOperation,
    /// Only when this CPU is among the CPUs the call concerns (the targets,
    /// for the hotplug lock and grace periods).
    pub cpu: Option<CpuId>,
}

/// The injected failures armed for one operation; each fires at most once
/// even when targets run in parallel.
pub(crate) struct Injector {
    armed: Option<FailAt>,
    fired: AtomicBool,
    platform: Option<PlatformFailAt>,
    platform_fired: AtomicBool,
}

impl Injector {
    pub(crate) fn new(armed: Option<FailAt>, platform: Option<PlatformFailAt>) -> Self {
        Injector {
            armed,
            fired: AtomicBool::new(false),
            platform,
            platform_fired: AtomicBool::new(false),
        }
    }

    /// The CPU of `cpus` for which `operation` must fail now, if any.
    pub(crate) fn platform_fires<const WORDS: usize>(
        &self,
        operation: PlatformOperation,
        cpus: CpuMask<WORDS>,
    ) -> Option<CpuId> {
        let point = self.platform?;
        if point.operation != operation {
            return None;
        }
        let cpu = match point.cpu {
            Some(cpu) if cpus.contains(cpu) => cpu,
            Some(_) => return None,
            None => cpus.first()?,
        };
        self.platform_fired
            .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
            .then_some(cpu)
    }

    /// The error an injected failure of `operation` for `cpu` returns.
    pub(crate) fn platform_error(operation: PlatformOperation, cpu: CpuId) -> PlatformError {
        PlatformError::new(operation, cpu, PlatformError::INJECTED)
    }

    pub(crate) fn platform_has_fired(&self) -> bool {
        self.platform_fired.load(Ordering::Acquire)
    }

    /// Whether the call of `step` in `direction` for `cpus` must fail now.
    pub(crate) fn fires<const WORDS: usize>(
        &self,
        step: StepId,
        direction: Direction,
        cpus: CpuMask<WORDS>,
    ) -> bool {
        match self.armed {
            Some(point)
                if point.step == step
                    && point.direction == direction
                    && point.cpu.is_none_or(|cpu| cpus.contains(cpu)) =>
            {
                self.fired
                    .compare_exchange(false, true, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok()
            }
            _ => false,
        }
    }

    pub(crate) fn has_fired(&self) -> bool {
        self.fired.load(Ordering::Acquire)
    }
}

/// How a call is made.
#[derive(Clone, Copy)]
pub(crate) struct Call {
    pub(crate) direction: Direction,
    pub(crate) reuse: Reuse,
    pub(crate) deferred: bool,
    pub(crate) rollback: bool,
}

pub(crate) fn step_failed<const WORDS: usize>(
    entry: &Registered<WORDS>,
    step: StepId,
    direction: Direction,
    cpus: CpuMask<WORDS>,
    instance: Option<InstanceId>,
    cause: CallbackError,
) -> Error {
    Error::StepFailed {
        step,
        name: entry.spec.name,
        direction,
        cpu: cpus.first().unwrap_or(CpuId(0)),
        instance,
        cause,
    }
}

/// What a callback of `entry` is told for a call of `step` for `cpus`.
fn call_context<const WORDS: usize>(
    entry: &Registered<WORDS>,
    step: StepId,
    cpus: CpuMask<WORDS>,
    call: Call,
    instance: Option<InstanceId>,
) -> Context<WORDS> {
    Context {
        cpu: cpus.first().unwrap_or(CpuId(0)),
        cpus,
        step,
        name: entry.spec.name,
        direction: call.direction,
        instance,
        reuse: call.reuse,
        deferred: call.deferred,
        rollback: call.rollback,
    }
}

/// An injected failure of `step` for `cpus`: traced as a call that
/// returned [`CallbackError::INJECTED`], so a step log shows where the
/// operation failed; the callback does not run.
pub(crate) fn injected<P: Platform<WORDS> + ?Sized, const WORDS: usize>(
    platform: &P,
    entry: &Registered<WORDS>,
    step: StepId,
    cpus: CpuMask<WORDS>,
    call: Call,
) -> Error {
    let context = call_context(entry, step, cpus, call, None);
    platform.step_entered(&context);
    platform.step_exited(&context, Err(CallbackError::INJECTED));
    step_failed(
        entry,
        step,
        call.direction,
        cpus,
        None,
        CallbackError::INJECTED,
    )
}

/// Runs `step`'s callback for `cpus` (one call per instance of a
/// multi-instance step). If instance `i` fails, instances before it are
/// undone so that the step is left as it was. Returns the time taken.
pub(crate) fn invoke<P: Platform<WORDS> + ?Sized, const WORDS: usize>(
    platform: &P,
    entry: &Registered<WORDS>,
    step: StepId,
    cpus: CpuMask<WORDS>,
    call: Call,
) -> (Result<(), Error>, u64) {
    let Some(callback) = entry.callbacks.as_ref().and_then(|c| c.get(call.direction)) else {
        return (Ok(()), 0);
    };
    let context = |instance: Option<InstanceId>, direction: Direction, rollback: bool| {
        call_context(
            entry,
            step,
            cpus,
            Call {
                direction,
                rollback,
                ..call
            },
            instance,
        )
    };
    // Every call is traced where it is made, as Linux's
    // `cpuhp_invoke_callback` brackets the callback with `trace_cpuhp_enter`
    // and `trace_cpuhp_exit`.
    let traced = |callback: &Callback<WORDS>, context: &Context<WORDS>| {
        platform.step_entered(context);
        let result = callback(context);
        platform.step_exited(context, result);
        result
    };
    let start = platform.now_ns();
    let result = if !entry.spec.multi {
        traced(callback, &context(None, call.direction, call.rollback))
            .map_err(|cause| step_failed(entry, step, call.direction, cpus, None, cause))
    } else {
        let mut result = Ok(());
        for (done, instance) in entry.instances.iter().enumerate() {
            if let Err(cause) = traced(
                callback,
                &context(Some(*instance), call.direction, call.rollback),
            ) {
                let undo = entry
                    .callbacks
                    .as_ref()
                    .and_then(|c| c.get(call.direction.reverse()));
                if let Some(undo) = undo {
                    for earlier in entry.instances[..done].iter().rev() {
                        // Undo of a partial step: a refusal here cannot be acted on.
                        let _ = traced(
                            undo,
                            &context(Some(*earlier), call.direction.reverse(), true),
                        );
                    }
                }
                result = Err(step_failed(
                    entry,
                    step,
                    call.direction,
                    cpus,
                    Some(*instance),
                    cause,
                ));
                break;
            }
        }
        result
    };
    let nanos = platform.now_ns().saturating_sub(start);
    (result, nanos)
}
