//! The engine's typed errors.

use core::fmt;

use crate::cpu::CpuId;
use crate::platform::PlatformError;
use crate::step::{CallbackError, Direction, InstanceId, StepId};

/// Why an engine call was refused or failed. Whenever one is returned, the
/// engine's state (and, through rollback, every CPU) is as it was before the call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The table has more steps than a [`StepId`] can number.
    TooManySteps,
    /// Two table entries share a name.
    DuplicateName(&'static str),
    /// A table entry's section comes before the previous entry's.
    SectionOrder(&'static str),
    /// The CPU is out of range or not in the possible set.
    NoSuchCpu(CpuId),
    /// The machine was created with no CPU online.
    NoOnlineCpu,
    /// Bringing up a CPU that is already online.
    AlreadyOnline(CpuId),
    /// Taking down a CPU that is already offline.
    AlreadyOffline(CpuId),
    /// A bulk operation was given an empty set.
    EmptySet,
    /// The operation would leave no CPU online.
    LastCpu,
    /// No step has this id.
    NoSuchStep(StepId),
    /// The step already has callbacks.
    AlreadySetUp(StepId),
    /// The step has no callbacks to remove.
    NotSetUp(StepId),
    /// Instances were used on a single-instance step.
    NotMultiInstance(StepId),
    /// The instance is already registered on the step.
    DuplicateInstance(StepId, InstanceId),
    /// The instance is not registered on the step.
    NoSuchInstance(StepId, InstanceId),
    /// A multi-instance step cannot be removed while it has instances.
    HasInstances(StepId),
    /// `Starting` steps must not fail, so a failure cannot be injected there.
    CannotFail(StepId),
    /// A callback (or an injected failure) failed; everything done so far
    /// was rolled back.
    StepFailed {
        /// The failing step.
        step: StepId,
        /// Its name.
        name: &'static str,
        /// Startup or teardown.
        direction: Direction,
        /// The CPU it ran for (the lowest of the set for an aggregated call).
        cpu: CpuId,
        /// The instance, for a multi-instance step.
        instance: Option<InstanceId>,
        /// What the callback said.
        cause: CallbackError,
    },
    /// The platform failed to do what the engine asked (a CPU that did not
    /// start, a stop-machine that could not gather, a grace period that
    /// stalled); everything done so far was rolled back.
    PlatformFailed(PlatformError),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::TooManySteps => f.write_str("too many steps in the table"),
            Error::DuplicateName(name) => write!(f, "step name {name} used twice"),
            Error::SectionOrder(name) => {
                write!(
                    f,
                    "step {name} is in an earlier section than the step before it"
                )
            }
            Error::NoSuchCpu(cpu) => write!(f, "{cpu} is not a possible CPU"),
            Error::NoOnlineCpu => f.write_str("no CPU is online"),
            Error::AlreadyOnline(cpu) => write!(f, "{cpu} is already online"),
            Error::AlreadyOffline(cpu) => write!(f, "{cpu} is already offline"),
            Error::EmptySet => f.write_str("empty CPU set"),
            Error::LastCpu => f.write_str("refusing to take down the last online CPU"),
            Error::NoSuchStep(step) => write!(f, "no step {}", step.0),
            Error::AlreadySetUp(step) => write!(f, "step {} already has callbacks", step.0),
            Error::NotSetUp(step) => write!(f, "step {} has no callbacks", step.0),
            Error::NotMultiInstance(step) => write!(f, "step {} is not multi-instance", step.0),
            Error::DuplicateInstance(step, instance) => {
                write!(f, "instance {} already on step {}", instance.0, step.0)
            }
            Error::NoSuchInstance(step, instance) => {
                write!(f, "no instance {} on step {}", instance.0, step.0)
            }
            Error::HasInstances(step) => write!(f, "step {} still has instances", step.0),
            Error::CannotFail(step) => {
                write!(
                    f,
                    "step {} is a starting/dying step and must not fail",
                    step.0
                )
            }
            Error::StepFailed {
                name,
                direction,
                cpu,
                instance,
                cause,
                ..
            } => {
                write!(f, "{direction} of step {name} failed on {cpu}")?;
                if let Some(instance) = instance {
                    write!(f, " (instance {})", instance.0)?;
                }
                write!(f, ": {cause}")
            }
            Error::PlatformFailed(error) => write!(f, "the platform's {error}"),
        }
    }
}

impl core::error::Error for Error {
    fn source(&self) -> Option<&(dyn core::error::Error + 'static)> {
        match self {
            Error::PlatformFailed(error) => Some(error),
            _ => None,
        }
    }
}

impl From<PlatformError> for Error {
    fn from(error: PlatformError) -> Self {
        Error::PlatformFailed(error)
    }
}

#[cfg(test)]
mod tests {
    use alloc::string::ToString;

    use super::*;
    use crate::platform::PlatformOperation;

    #[test]
    fn a_failed_step_names_step_cpu_instance_and_cause() {
        let error: &dyn core::error::Error = &Error::StepFailed {
            step: StepId(3),
            name: "sched:active",
            direction: Direction::Up,
            cpu: CpuId(2),
            instance: Some(InstanceId(4)),
            cause: CallbackError::new("out of memory"),
        };
        assert_eq!(
            error.to_string(),
            "startup of step sched:active failed on cpu2 (instance 4): out of memory"
        );
        assert_eq!(
            Error::AlreadyOnline(CpuId(1)).to_string(),
            "cpu1 is already online"
        );
        let platform: Error =
            PlatformError::new(PlatformOperation::StopMachine, CpuId(2), "did not come").into();
        assert_eq!(
            platform.to_string(),
            "the platform's stop-machine failed for cpu2: did not come"
        );
        assert!(core::error::Error::source(&platform).is_some());
    }
}
