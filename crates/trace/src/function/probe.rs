//! Function probes: commands written to `set_ftrace_filter` that act when
//! a function is entered, as Linux's `register_ftrace_function_probe`
//! commands do (kernel/trace/trace_functions.c, `ftrace_trace_probe_ops`):
//!
//! * `glob:traceon[:count]`, `glob:traceoff[:count]` — switch tracing on
//!   or off; a count is used up only by calls that change the switch;
//! * `glob:stacktrace[:count]` — record the call stack (`kernel_stack`);
//! * `glob:enable_event:system:event[:count]`,
//!   `glob:disable_event:system:event[:count]` — switch an event; a count
//!   is used up only by calls that change it;
//! * `!glob:command[:arguments]` removes the probes of that command on
//!   that glob.
//!
//! The functions a probe fires on are judged by its glob when the tracer
//! re-decides its function sites, as `set_ftrace_filter`'s selectors are;
//! a function only probes watch calls the probe directly
//! (`function::dispatch`).
//!
//! ```
//! use hotkern_trace::function::probe::{ProbeCommand, ProbeErrorKind, ProbeWrite};
//!
//! let write = ProbeWrite::parse("schedule:traceoff:3", 0).unwrap().unwrap();
//! assert_eq!(write.glob(), "schedule");
//! assert_eq!(write.command(), &ProbeCommand::TraceOff);
//! assert_eq!(write.count(), Some(3));
//! // `:mod:` is a selector, not a probe.
//! assert!(ProbeWrite::parse("x:mod:app", 0).is_none());
//! let error = ProbeWrite::parse("x:traceon:lots", 4).unwrap().unwrap_err();
//! assert_eq!((error.kind, error.position), (ProbeErrorKind::BadCount, 4));
//! ```

use alloc::string::{String, ToString};
use core::fmt;

use crate::glob::Glob;

/// What a probe does when its function is entered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeCommand {
    /// `traceon`: sets `tracing_on`.
    TraceOn,
    /// `traceoff`: clears `tracing_on`.
    TraceOff,
    /// `stacktrace`: records the call stack.
    StackTrace,
    /// `enable_event:system:event`.
    EnableEvent {
        /// The event's system.
        system: String,
        /// The event's name.
        event: String,
    },
    /// `disable_event:system:event`.
    DisableEvent {
        /// The event's system.
        system: String,
        /// The event's name.
        event: String,
    },
}

impl ProbeCommand {
    /// The command as written after the glob (`traceon`,
    /// `enable_event:sched:sched_switch`).
    pub fn text(&self) -> String {
        match self {
            ProbeCommand::TraceOn => "traceon".to_string(),
            ProbeCommand::TraceOff => "traceoff".to_string(),
            ProbeCommand::StackTrace => "stacktrace".to_string(),
            ProbeCommand::EnableEvent { system, event } => {
                ["enable_event:", system, ":", event].concat()
            }
            ProbeCommand::DisableEvent { system, event } => {
                ["disable_event:", system, ":", event].concat()
            }
        }
    }
}

/// Why a probe command was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeErrorKind {
    /// Not one of the probe commands (nor `mod`).
    UnknownCommand,
    /// The glob before the command is empty.
    EmptyFunction,
    /// `enable_event`/`disable_event` without `system:event`.
    MissingEvent,
    /// The count is not a decimal number.
    BadCount,
    /// More fields than the command takes.
    TooManyFields,
    /// `enable_event`/`disable_event` names an event that does not exist.
    NoSuchEvent,
    /// The glob matches no function.
    NoMatch,
}

impl ProbeErrorKind {
    fn reason(self) -> &'static str {
        match self {
            ProbeErrorKind::UnknownCommand => "unknown command",
            ProbeErrorKind::EmptyFunction => "empty function glob",
            ProbeErrorKind::MissingEvent => "expected system:event",
            ProbeErrorKind::BadCount => "the count is not a number",
            ProbeErrorKind::TooManyFields => "too many fields",
            ProbeErrorKind::NoSuchEvent => "no such event",
            ProbeErrorKind::NoMatch => "no function matches",
        }
    }
}

/// A refused probe command: why, the command as written, and its byte
/// position in the written text. Nothing changed when one is returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeError {
    /// Why it was refused.
    pub kind: ProbeErrorKind,
    /// The command as written.
    pub text: String,
    /// Byte offset of the command in the written text.
    pub position: usize,
}

impl fmt::Display for ProbeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "invalid function probe '{}' at {}: {}",
            self.text,
            self.position,
            self.kind.reason()
        )
    }
}

impl core::error::Error for ProbeError {}

/// One parsed probe write: add (or with `!` remove) a command on a glob.
#[derive(Debug, Clone)]
pub struct ProbeWrite {
    glob: String,
    command: ProbeCommand,
    count: Option<u64>,
    remove: bool,
}

impl ProbeWrite {
    /// Parses one white-space-free token of a `set_ftrace_filter` write:
    /// `None` if it is not a probe command (a selector, `:mod:`
    /// included), else the command or why it is malformed.
    pub fn parse(token: &str, position: usize) -> Option<Result<ProbeWrite, ProbeError>> {
        let (remove, body) = match token.strip_prefix('!') {
            Some(rest) => (true, rest),
            None => (false, token),
        };
        let (glob, rest) = body.split_once(':')?;
        if rest.starts_with("mod:") || rest == "mod" {
            return None;
        }
        let error = |kind| ProbeError {
            kind,
            text: token.to_string(),
            position,
        };
        Some(Self::parse_command(glob, rest, remove).map_err(error))
    }

    fn parse_command(glob: &str, rest: &str, remove: bool) -> Result<ProbeWrite, ProbeErrorKind> {
        if glob.is_empty() {
            return Err(ProbeErrorKind::EmptyFunction);
        }
        let mut fields = rest.split(':');
        let name = fields.next().unwrap_or_default();
        let command = match name {
            "traceon" => ProbeCommand::TraceOn,
            "traceoff" => ProbeCommand::TraceOff,
            "stacktrace" => ProbeCommand::StackTrace,
            "enable_event" | "disable_event" => {
                let system = fields.next().filter(|s| !s.is_empty());
                let event = fields.next().filter(|s| !s.is_empty());
                let (Some(system), Some(event)) = (system, event) else {
                    return Err(ProbeErrorKind::MissingEvent);
                };
                let (system, event) = (system.to_string(), event.to_string());
                if name == "enable_event" {
                    ProbeCommand::EnableEvent { system, event }
                } else {
                    ProbeCommand::DisableEvent { system, event }
                }
            }
            _ => return Err(ProbeErrorKind::UnknownCommand),
        };
        let count = match fields.next() {
            None => None,
            Some(count) => Some(count.parse().map_err(|_| ProbeErrorKind::BadCount)?),
        };
        if fields.next().is_some() {
            return Err(ProbeErrorKind::TooManyFields);
        }
        Ok(ProbeWrite {
            glob: glob.to_string(),
            command,
            count,
            remove,
        })
    }

    /// The function glob.
    pub fn glob(&self) -> &str {
        &self.glob
    }

    /// The command.
    pub fn command(&self) -> &ProbeCommand {
        &self.command
    }

    /// How many times it may act (`None`: unlimited).
    pub fn count(&self) -> Option<u64> {
        self.count
    }

    /// Whether the write removes the probes of this glob and command.
    pub fn removes(&self) -> bool {
        self.remove
    }
}

/// An installed probe.
#[derive(Debug, Clone)]
pub(crate) struct Probe {
    glob_text: String,
    glob: Glob,
    pub(crate) command: ProbeCommand,
    /// Actions left (`None`: unlimited).
    pub(crate) remaining: Option<u64>,
}

impl Probe {
    pub(crate) fn new(write: &ProbeWrite) -> Probe {
        Probe {
            glob_text: write.glob.clone(),
            glob: Glob::new(&write.glob),
            command: write.command.clone(),
            remaining: write.count,
        }
    }

    /// Whether the probe fires on the function `name`.
    pub(crate) fn matches(&self, name: &str) -> bool {
        self.glob.matches(name)
    }

    /// Whether `write` removes this probe.
    pub(crate) fn removed_by(&self, write: &ProbeWrite) -> bool {
        self.glob_text == write.glob && self.command == write.command
    }

    /// The probe as `set_ftrace_filter` lists it:
    /// `glob:command:count=N` or `glob:command:unlimited`.
    pub(crate) fn line(&self) -> String {
        let count = match self.remaining {
            Some(count) => alloc::format!("count={count}"),
            None => "unlimited".to_string(),
        };
        [
            self.glob_text.as_str(),
            ":",
            &self.command.text(),
            ":",
            &count,
            "\n",
        ]
        .concat()
    }

    /// Uses up one action if any is left; `false` when the count is spent.
    pub(crate) fn take(&mut self) -> bool {
        match &mut self.remaining {
            None => true,
            Some(0) => false,
            Some(left) => {
                *left -= 1;
                true
            }
        }
    }

    /// Whether a count is left.
    pub(crate) fn armed(&self) -> bool {
        self.remaining != Some(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_parse_and_malformed_ones_are_named() {
        let ok = |text: &str| ProbeWrite::parse(text, 0).unwrap().unwrap();
        let kind = |text: &str| ProbeWrite::parse(text, 0).unwrap().unwrap_err().kind;
        assert_eq!(ok("f*:traceon").count(), None);
        assert_eq!(ok("f:stacktrace:2").count(), Some(2));
        assert!(ok("!f:traceoff").removes());
        assert_eq!(
            ok("f:enable_event:sys:ev:1").command(),
            &ProbeCommand::EnableEvent {
                system: "sys".into(),
                event: "ev".into()
            }
        );
        assert_eq!(kind("f:tracon"), ProbeErrorKind::UnknownCommand);
        assert_eq!(kind(":traceon"), ProbeErrorKind::EmptyFunction);
        assert_eq!(kind("f:enable_event:sys"), ProbeErrorKind::MissingEvent);
        assert_eq!(kind("f:disable_event::ev"), ProbeErrorKind::MissingEvent);
        assert_eq!(kind("f:traceon:-1"), ProbeErrorKind::BadCount);
        assert_eq!(kind("f:traceon:"), ProbeErrorKind::BadCount);
        assert_eq!(kind("f:traceon:1:2"), ProbeErrorKind::TooManyFields);
        assert!(ProbeWrite::parse("plain_glob", 0).is_none());
        assert!(ProbeWrite::parse(":mod:app", 0).is_none());
    }

    #[test]
    fn counts_run_out_and_lines_show_them() {
        let write = ProbeWrite::parse("f:traceoff:2", 0).unwrap().unwrap();
        let mut probe = Probe::new(&write);
        assert_eq!(probe.line(), "f:traceoff:count=2\n");
        assert!(probe.take() && probe.take());
        assert!(!probe.take() && !probe.armed());
        assert_eq!(probe.line(), "f:traceoff:count=0\n");
        let write = ProbeWrite::parse("f:enable_event:a:b", 0).unwrap().unwrap();
        assert_eq!(Probe::new(&write).line(), "f:enable_event:a:b:unlimited\n");
    }
}
