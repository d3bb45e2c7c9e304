//! Calling one step's callbacks, instance by instance, with timing and
//! failure injection.

use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, Ordering};

use crate::cpu::{CpuId, CpuSet};
use crate::error::Error;
use crate::platform::Platform;
use crate::step::{
    CallbackError, Callbacks, Context, Direction, InstanceId, Reuse, StepId, StepSpec,
};

/// A table entry with whatever is registered on it.
#[derive(Clone, Debug)]
pub(crate) struct Registered {
    pub(crate) spec: StepSpec,
    pub(crate) callbacks: Option<Callbacks>,
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

/// The injected failure armed for one operation; fires at most once even
/// when targets run in parallel.
pub(crate) struct Injector {
    armed: Option<FailAt>,
    fired: AtomicBool,
}

impl Injector {
    pub(crate) fn new(armed: Option<FailAt>) -> Self {
        Injector {
            armed,
            fired: AtomicBool::new(false),
        }
    }

    /// Whether the call of `step` in `direction` for `cpus` must fail now.
    pub(crate) fn fires(&self, step: StepId, direction: Direction, cpus: CpuSet) -> bool {
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

pub(crate) fn step_failed(
    entry: &Registered,
    step: StepId,
    direction: Direction,
    cpus: CpuSet,
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

/// Runs `step`'s callback for `cpus` (one call per instance of a
/// multi-instance step). If instance `i` fails, instances before it are
/// undone so that the step is left as it was. Returns the time taken.
pub(crate) fn invoke<P: Platform + ?Sized>(
    platform: &P,
    entry: &Registered,
    step: StepId,
    cpus: CpuSet,
    call: Call,
) -> (Result<(), Error>, u64) {
    let Some(callback) = entry.callbacks.as_ref().and_then(|c| c.get(call.direction)) else {
        return (Ok(()), 0);
    };
    let context = |instance: Option<InstanceId>, direction: Direction, rollback: bool| Context {
        cpu: cpus.first().unwrap_or(CpuId(0)),
        cpus,
        step,
        name: entry.spec.name,
        direction,
        instance,
        reuse: call.reuse,
        deferred: call.deferred,
        rollback,
    };
    let start = platform.now_ns();
    let result = if !entry.spec.multi {
        callback(&context(None, call.direction, call.rollback))
            .map_err(|cause| step_failed(entry, step, call.direction, cpus, None, cause))
    } else {
        let mut result = Ok(());
        for (done, instance) in entry.instances.iter().enumerate() {
            if let Err(cause) = callback(&context(Some(*instance), call.direction, call.rollback)) {
                let undo = entry
                    .callbacks
                    .as_ref()
                    .and_then(|c| c.get(call.direction.reverse()));
                if let Some(undo) = undo {
                    for earlier in entry.instances[..done].iter().rev() {
                        // Undo of a partial step: a refusal here cannot be acted on.
                        let _ = undo(&context(Some(*earlier), call.direction.reverse(), true));
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
