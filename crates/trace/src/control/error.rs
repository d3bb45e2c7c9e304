//! Errors of the control interface, named after the errno ftrace returns.

use alloc::string::String;
use core::fmt;

use crate::filter::FilterError;
use crate::trigger::TriggerError;

/// Why a read or write of a control file failed. A failed write changes nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ControlError {
    /// No such file (`ENOENT`).
    NoSuchFile(String),
    /// The file cannot be written (`EACCES`: read-only files).
    ReadOnly(String),
    /// The file cannot be read (`EINVAL` from `trace_marker`).
    WriteOnly(String),
    /// The value is not acceptable (`EINVAL`); `reason` says why.
    InvalidArgument {
        /// The control file's path, relative to the tracing root.
        file: String,
        /// What is wrong with the value.
        reason: String,
    },
    /// An event filter did not parse (`EINVAL`; the error is also in `error_log`).
    Filter {
        /// The control file's path, relative to the tracing root.
        file: String,
        /// The parse error, with its position.
        error: FilterError,
    },
    /// A trigger was refused (`EINVAL`, `EEXIST` or `ENOENT`).
    Trigger {
        /// The control file's path, relative to the tracing root.
        file: String,
        /// What the trigger parser or the trigger set refused.
        error: TriggerError,
    },
    /// The operation is not possible now (`EBUSY`).
    Busy {
        /// The control file's path, relative to the tracing root.
        file: String,
        /// Why it cannot happen now (e.g. the hwlat thread could not start).
        reason: String,
    },
}

impl ControlError {
    /// The errno name ftrace would return (`EINVAL`, `ENOENT`, …).
    pub fn errno(&self) -> &'static str {
        match self {
            ControlError::NoSuchFile(_) => "ENOENT",
            ControlError::ReadOnly(_) => "EACCES",
            ControlError::Trigger {
                error: TriggerError::Exists,
                ..
            } => "EEXIST",
            ControlError::Trigger {
                error: TriggerError::NotFound | TriggerError::NoSuchEvent { .. },
                ..
            } => "ENOENT",
            ControlError::Busy { .. } => "EBUSY",
            _ => "EINVAL",
        }
    }

    pub(crate) fn invalid(file: &str, reason: impl Into<String>) -> ControlError {
        ControlError::InvalidArgument {
            file: String::from(file),
            reason: reason.into(),
        }
    }
}

impl fmt::Display for ControlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ControlError::NoSuchFile(file) => write!(f, "{file}: No such file or directory"),
            ControlError::ReadOnly(file) => write!(f, "{file}: Permission denied"),
            ControlError::WriteOnly(file) => {
                write!(f, "{file}: Invalid argument (write-only file)")
            }
            ControlError::InvalidArgument { file, reason } => {
                write!(f, "{file}: Invalid argument ({reason})")
            }
            ControlError::Filter { file, error } => write!(f, "{file}: Invalid argument ({error})"),
            ControlError::Trigger { file, error } => write!(f, "{file}: {error}"),
            ControlError::Busy { file, reason } => {
                write!(f, "{file}: Device or resource busy ({reason})")
            }
        }
    }
}

// The filter and trigger variants' text is already in Display, so no `source`.
impl core::error::Error for ControlError {}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    #[test]
    fn messages_start_with_the_file_and_its_errno_text() {
        let error: &dyn core::error::Error = &ControlError::ReadOnly("trace_pipe".into());
        assert_eq!(error.to_string(), "trace_pipe: Permission denied");
        assert_eq!(
            ControlError::invalid("buffer_size_kb", "not a number").to_string(),
            "buffer_size_kb: Invalid argument (not a number)"
        );
        let trigger = ControlError::Trigger {
            file: "events/sched/sched_switch/trigger".into(),
            error: TriggerError::NotFound,
        };
        assert_eq!(
            trigger.to_string(),
            "events/sched/sched_switch/trigger: No such file or directory"
        );
    }
}
