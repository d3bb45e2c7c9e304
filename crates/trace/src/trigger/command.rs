//! Parsing one line written to an event's `trigger` file.

use alloc::string::String;
use alloc::vec::Vec;

use super::error::TriggerError;
use super::hist::HistSpec;
use crate::filter::{FieldSpec, Filter};

/// What a trigger does when its event is hit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TriggerCommand {
    /// Set `tracing_on` to 1 (`traceon`).
    TraceOn,
    /// Set `tracing_on` to 0 (`traceoff`); later events still reach their
    /// triggers.
    TraceOff,
    /// Swap the live buffer with the snapshot buffer.
    Snapshot,
    /// Record the call stack at the event as a `kernel_stack` event
    /// (`stacktrace`).
    StackTrace,
    /// Enable another event (`enable_event:system:event`).
    EnableEvent {
        /// The target event's system.
        system: String,
        /// The target event's name.
        event: String,
    },
    /// Disable another event (`disable_event:system:event`).
    DisableEvent {
        /// The target event's system.
        system: String,
        /// The target event's name.
        event: String,
    },
    /// Aggregate hits into a histogram.
    Hist(HistSpec),
}

impl TriggerCommand {
    /// The command word as ftrace spells it.
    pub fn name(&self) -> &'static str {
        match self {
            TriggerCommand::TraceOn => "traceon",
            TriggerCommand::TraceOff => "traceoff",
            TriggerCommand::Snapshot => "snapshot",
            TriggerCommand::StackTrace => "stacktrace",
            TriggerCommand::EnableEvent { .. } => "enable_event",
            TriggerCommand::DisableEvent { .. } => "disable_event",
            TriggerCommand::Hist(_) => "hist",
        }
    }

    /// True if `other` occupies the same slot: ftrace allows one trigger
    /// of each kind per event (per target event for enable/disable, per
    /// key/value layout for hist).
    pub fn same_slot(&self, other: &TriggerCommand) -> bool {
        match (self, other) {
            (TriggerCommand::Hist(a), TriggerCommand::Hist(b)) => a.same_layout(b),
            (
                TriggerCommand::EnableEvent { system, event }
                | TriggerCommand::DisableEvent { system, event },
                TriggerCommand::EnableEvent {
                    system: s2,
                    event: e2,
                }
                | TriggerCommand::DisableEvent {
                    system: s2,
                    event: e2,
                },
            ) => self.name() == other.name() && system == s2 && event == e2,
            _ => self.name() == other.name(),
        }
    }
}

/// A parsed trigger line: `command[:count] [if filter]`.
#[derive(Debug, Clone)]
pub struct TriggerSpec {
    /// What to do when the event is hit and the filter passes.
    pub(crate) command: TriggerCommand,
    /// How many more times it may fire (`None`: unlimited).
    pub(crate) count: Option<u64>,
    /// The `if` filter, compiled.
    pub(crate) filter: Option<Filter>,
}

/// A parsed line: add a trigger, or remove one (`!command`).
#[derive(Debug, Clone)]
pub struct TriggerLine {
    /// True for `!command`.
    pub(crate) remove: bool,
    /// The trigger to add, or the one to match for removal.
    pub(crate) spec: TriggerSpec,
}

/// The commands this implementation accepts, as the empty `trigger` file lists them.
pub const AVAILABLE_TRIGGERS: &str =
    "traceon traceoff snapshot stacktrace enable_event disable_event hist";

/// Parses `text` for an event with `fields`. `event_exists(system, event)`
/// answers for `enable_event`/`disable_event` targets.
pub fn parse_trigger(
    text: &str,
    fields: &[FieldSpec],
    event_exists: &dyn Fn(&str, &str) -> bool,
) -> Result<TriggerLine, TriggerError> {
    let leading = text.len() - text.trim_start().len();
    let body = text.trim();
    if body.is_empty() {
        return Err(TriggerError::Empty);
    }
    let (remove, start) = match body.strip_prefix('!') {
        Some(_) => (true, leading + 1),
        None => (false, leading),
    };
    let body = &text[start..leading + body.len()];
    let command_len = body.find(char::is_whitespace).unwrap_or(body.len());
    let command_text = &body[..command_len];
    let rest = &body[command_len..];
    let filter = parse_if(rest, start + command_len, fields)?;

    // Each ':'-separated part with the byte offset where it starts.
    let mut at = start;
    let mut parts: Vec<(&str, usize)> = Vec::new();
    for part in command_text.split(':') {
        parts.push((part, at));
        at += part.len() + 1;
    }
    let word = parts[0].0;
    let end = start + command_text.len();
    let mut parts = parts.into_iter().skip(1);
    let command = match word {
        "traceon" => TriggerCommand::TraceOn,
        "traceoff" => TriggerCommand::TraceOff,
        "snapshot" => TriggerCommand::Snapshot,
        "stacktrace" => TriggerCommand::StackTrace,
        "enable_event" | "disable_event" => {
            let (system, at) = parts
                .next()
                .ok_or(TriggerError::InvalidArgument { position: end })?;
            let (event, _) = parts
                .next()
                .ok_or(TriggerError::InvalidArgument { position: end })?;
            if system.is_empty() || event.is_empty() {
                return Err(TriggerError::InvalidArgument { position: at });
            }
            if !event_exists(system, event) {
                return Err(TriggerError::NoSuchEvent { position: at });
            }
            let (system, event) = (String::from(system), String::from(event));
            if word == "enable_event" {
                TriggerCommand::EnableEvent { system, event }
            } else {
                TriggerCommand::DisableEvent { system, event }
            }
        }
        "hist" => {
            let spec_start = start + word.len() + 1;
            let spec_text = command_text.get(word.len() + 1..).unwrap_or_default();
            let spec = HistSpec::parse(spec_text, spec_start, fields)?;
            return Ok(TriggerLine {
                remove,
                spec: TriggerSpec {
                    command: TriggerCommand::Hist(spec),
                    count: None,
                    filter,
                },
            });
        }
        _ => return Err(TriggerError::UnknownCommand { position: start }),
    };
    let count = match parts.next() {
        None => None,
        Some((count, at)) => {
            let parsed = count
                .parse::<u64>()
                .map_err(|_| TriggerError::InvalidArgument { position: at })?;
            Some(parsed)
        }
    };
    if let Some((_, at)) = parts.next() {
        return Err(TriggerError::InvalidArgument { position: at });
    }
    Ok(TriggerLine {
        remove,
        spec: TriggerSpec {
            command,
            count,
            filter,
        },
    })
}

/// Parses the optional `if <filter>` tail that starts at byte `base`.
fn parse_if(rest: &str, base: usize, fields: &[FieldSpec]) -> Result<Option<Filter>, TriggerError> {
    let blank = rest.len() - rest.trim_start().len();
    let tail = rest.trim_start();
    if tail.is_empty() {
        return Ok(None);
    }
    let position = base + blank;
    let Some(after_if) = tail.strip_prefix("if") else {
        return Err(TriggerError::InvalidArgument { position });
    };
    if !after_if.starts_with(char::is_whitespace) {
        return Err(TriggerError::InvalidArgument { position });
    }
    let filter_start = position + 2;
    Filter::compile(after_if, fields)
        .map(Some)
        .map_err(|mut error| {
            error.position += filter_start;
            TriggerError::Filter(error)
        })
}
