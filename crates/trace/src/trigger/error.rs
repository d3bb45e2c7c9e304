//! Why a trigger command was refused.

use core::fmt;

use crate::filter::FilterError;

/// A trigger command that was refused; the trigger set is unchanged.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TriggerError {
    /// Nothing but blanks was written.
    Empty,
    /// The command word is not one ftrace knows.
    UnknownCommand {
        /// Byte offset of the command word.
        position: usize,
    },
    /// A malformed `:count`, or a malformed `enable_event:sys:event` target.
    InvalidArgument {
        /// Byte offset of the argument.
        position: usize,
    },
    /// `enable_event`/`disable_event` names an event that does not exist.
    NoSuchEvent {
        /// Byte offset of the `system:event` target.
        position: usize,
    },
    /// The `if` filter does not parse; `error.position` counts from the
    /// start of the whole command.
    Filter(FilterError),
    /// A hist trigger with an invalid clause.
    Hist {
        /// What is wrong, in ftrace's words.
        message: &'static str,
        /// Byte offset of the clause.
        position: usize,
    },
    /// The same trigger is already set (ftrace's `EEXIST`).
    Exists,
    /// `!trigger` for a trigger that is not set (ftrace's `ENOENT`).
    NotFound,
}

impl TriggerError {
    /// Byte offset of the problem in the command, if there is one.
    pub fn position(&self) -> Option<usize> {
        match self {
            TriggerError::UnknownCommand { position }
            | TriggerError::InvalidArgument { position }
            | TriggerError::NoSuchEvent { position }
            | TriggerError::Hist { position, .. } => Some(*position),
            TriggerError::Filter(error) => Some(error.position),
            TriggerError::Empty | TriggerError::Exists | TriggerError::NotFound => None,
        }
    }
}

impl fmt::Display for TriggerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TriggerError::Empty => f.write_str("Invalid argument: empty trigger"),
            TriggerError::UnknownCommand { .. } => {
                f.write_str("Invalid argument: unknown trigger command")
            }
            TriggerError::InvalidArgument { .. } => f.write_str("Invalid argument"),
            TriggerError::NoSuchEvent { .. } => {
                f.write_str("No such file or directory: no such event")
            }
            TriggerError::Filter(error) => write!(f, "{}", error.kind.message()),
            TriggerError::Hist { message, .. } => f.write_str(message),
            TriggerError::Exists => f.write_str("File exists"),
            TriggerError::NotFound => f.write_str("No such file or directory"),
        }
    }
}

// The filter variant's text is already in Display, so no `source`.
impl core::error::Error for TriggerError {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::FilterErrorKind;
    use alloc::string::ToString;

    #[test]
    fn messages_use_the_errno_text_ftrace_returns() {
        let error: &dyn core::error::Error = &TriggerError::Exists;
        assert_eq!(error.to_string(), "File exists");
        assert_eq!(
            TriggerError::UnknownCommand { position: 0 }.to_string(),
            "Invalid argument: unknown trigger command"
        );
        let filter = FilterError::new(FilterErrorKind::FieldNotFound, 4);
        assert_eq!(TriggerError::Filter(filter).to_string(), "Field not found");
    }
}
