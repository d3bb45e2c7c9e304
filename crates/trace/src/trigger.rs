//! Event triggers: actions run when an event is hit, as written to
//! ftrace's `events/<system>/<event>/trigger` file.
//!
//! `traceon`, `traceoff`, `snapshot`, `stacktrace`,
//! `enable_event:<system>:<event>`, `disable_event:<system>:<event>`, each
//! with an optional `:count` and `if <filter>`; and
//! `hist:keys=…[:vals=…][:sort=…][:size=N][:pause]` with its own filter.
//! A [`TriggerSet`] holds an event's triggers; the tracer calls
//! [`TriggerSet::fire`] when the event is hit and the set calls back into
//! the tracer through [`TriggerActions`].
//!
//! ```
//! use hotkern_trace::internals::filter::FieldSpec;
//! use hotkern_trace::internals::trigger::{TriggerActions, TriggerSet};
//!
//! #[derive(Default)]
//! struct Switch { on: bool }
//! impl TriggerActions for Switch {
//!     fn tracing_on(&self) -> bool { self.on }
//!     fn set_tracing_on(&mut self, on: bool) { self.on = on; }
//!     fn snapshot(&mut self) {}
//!     fn stacktrace(&mut self, _cpu: u32) {}
//!     fn event_enabled(&self, _: &str, _: &str) -> bool { false }
//!     fn set_event_enabled(&mut self, _: &str, _: &str, _: bool) {}
//! }
//!
//! let fields = [FieldSpec::signed("pid", 8, 4)];
//! let mut set = TriggerSet::default();
//! set.write("traceon:1 if pid == 7", &fields, &|_, _| true).unwrap();
//! let mut tracer = Switch::default();
//! let mut payload = [0u8; 12];
//! payload[8..].copy_from_slice(&7i32.to_ne_bytes());
//! set.fire(&payload, 0, &mut tracer);
//! assert!(tracer.on);
//! assert_eq!(set.to_string(), "traceon:count=0 if pid == 7\n");
//! ```

mod command;
mod error;
pub(crate) mod hist;

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::{self, Write};

pub use command::{parse_trigger, TriggerCommand, TriggerSpec, AVAILABLE_TRIGGERS};
pub use error::TriggerError;
use hist::{HistControl, HistTable};

use crate::filter::FieldSpec;

/// What triggers can do to the tracer.
pub trait TriggerActions {
    /// Whether the tracing switch (`tracing_on`) is on.
    fn tracing_on(&self) -> bool;
    /// Flips the tracing switch.
    fn set_tracing_on(&mut self, on: bool);
    /// Swaps the live buffer with the snapshot buffer.
    fn snapshot(&mut self);
    /// Records the current call stack into the buffer of `cpu`.
    fn stacktrace(&mut self, cpu: u32);
    /// Whether an event is enabled.
    fn event_enabled(&self, system: &str, event: &str) -> bool;
    /// Enables or disables an event.
    fn set_event_enabled(&mut self, system: &str, event: &str, enabled: bool);
    /// The name of the task that hit the event (the kernel's `task->comm`,
    /// NUL-padded), for filters on `COMM`; `None` if the platform does not
    /// know it.
    fn current_comm(&self) -> Option<[u8; crate::platform::TASK_COMM_LEN]> {
        None
    }
}

/// When a trigger runs relative to the recording of its event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FirePhase {
    /// Unfiltered action triggers, before the event is recorded.
    BeforeRecord,
    /// Filtered triggers and `hist`, after the event is recorded.
    AfterRecord,
    /// Every trigger.
    #[cfg(any(test, feature = "internals"))]
    All,
}

impl FirePhase {
    fn includes(self, trigger: &Installed) -> bool {
        let early = trigger.spec.filter.is_none()
            && !matches!(trigger.spec.command, TriggerCommand::Hist(_));
        match self {
            FirePhase::BeforeRecord => early,
            FirePhase::AfterRecord => !early,
            #[cfg(any(test, feature = "internals"))]
            FirePhase::All => true,
        }
    }
}

#[derive(Debug, Clone)]
struct Installed {
    spec: TriggerSpec,
    hist: HistTable,
    paused: bool,
}

/// The triggers of one event.
#[derive(Debug, Clone, Default)]
pub struct TriggerSet {
    triggers: Vec<Installed>,
}

impl TriggerSet {
    /// Applies one write to the `trigger` file: adds a trigger, or removes
    /// one with `!command`. On error nothing changes.
    pub fn write(
        &mut self,
        text: &str,
        fields: &[FieldSpec],
        event_exists: &dyn Fn(&str, &str) -> bool,
    ) -> Result<(), TriggerError> {
        let line = parse_trigger(text, fields, event_exists)?;
        let existing = self
            .triggers
            .iter()
            .position(|t| t.spec.command.same_slot(&line.spec.command));
        match (line.remove, existing) {
            (true, Some(index)) => {
                self.triggers.remove(index);
                Ok(())
            }
            (true, None) => Err(TriggerError::NotFound),
            (false, Some(index)) => {
                let installed = &mut self.triggers[index];
                match &line.spec.command {
                    TriggerCommand::Hist(spec) => match spec.control {
                        Some(HistControl::Pause) => installed.paused = true,
                        Some(HistControl::Continue) => installed.paused = false,
                        Some(HistControl::Clear) => installed.hist.clear(),
                        None => return Err(TriggerError::Exists),
                    },
                    _ => return Err(TriggerError::Exists),
                }
                Ok(())
            }
            (false, None) => {
                let paused = matches!(&line.spec.command, TriggerCommand::Hist(h) if h.control == Some(HistControl::Pause));
                self.triggers.push(Installed {
                    spec: line.spec,
                    hist: HistTable::default(),
                    paused,
                });
                Ok(())
            }
        }
    }

    /// Removes every trigger.
    #[cfg(any(test, feature = "internals"))]
    pub fn clear(&mut self) {
        self.triggers.clear();
    }

    /// Number of triggers set.
    #[cfg(any(test, feature = "internals"))]
    pub fn len(&self) -> usize {
        self.triggers.len()
    }

    /// True if no trigger is set.
    pub fn is_empty(&self) -> bool {
        self.triggers.is_empty()
    }

    /// True if a trigger targets `system:event` with enable/disable_event.
    #[cfg(any(test, feature = "internals"))]
    pub fn targets(&self, system: &str, event: &str) -> bool {
        self.triggers.iter().any(|t| {
            matches!(&t.spec.command,
                TriggerCommand::EnableEvent { system: s, event: e }
                | TriggerCommand::DisableEvent { system: s, event: e } if s == system && e == event)
        })
    }

    /// Runs every trigger for one hit of the event (`payload` as recorded on `cpu`).
    #[cfg(any(test, feature = "internals"))]
    pub fn fire(&mut self, payload: &[u8], cpu: u32, actions: &mut dyn TriggerActions) {
        self.fire_phase(payload, cpu, actions, FirePhase::All);
    }

    /// True if some trigger runs in `phase`.
    pub(crate) fn has_phase(&self, phase: FirePhase) -> bool {
        self.triggers.iter().any(|t| phase.includes(t))
    }

    /// Runs the triggers that belong to `phase`: as in ftrace, triggers
    /// without a filter run before the event is recorded (so `traceoff`
    /// keeps its own event out), the filtered ones and `hist` after it.
    pub(crate) fn fire_phase(
        &mut self,
        payload: &[u8],
        cpu: u32,
        actions: &mut dyn TriggerActions,
        phase: FirePhase,
    ) {
        // Looked up once, and only if some filter names `COMM`.
        let mut comm = None;
        for trigger in &mut self.triggers {
            if !phase.includes(trigger) {
                continue;
            }
            if let Some(filter) = &trigger.spec.filter {
                let lookup = || *comm.get_or_insert_with(|| actions.current_comm());
                if !filter.matches_looking_up(payload, cpu, lookup) {
                    continue;
                }
            }
            // As in ftrace, a counted trigger only spends a count when it
            // changes something: traceon while tracing is on is a no-op.
            let effective = match &trigger.spec.command {
                TriggerCommand::TraceOn => !actions.tracing_on(),
                TriggerCommand::TraceOff => actions.tracing_on(),
                TriggerCommand::EnableEvent { system, event } => {
                    !actions.event_enabled(system, event)
                }
                TriggerCommand::DisableEvent { system, event } => {
                    actions.event_enabled(system, event)
                }
                TriggerCommand::Snapshot | TriggerCommand::StackTrace => true,
                TriggerCommand::Hist(spec) => {
                    if !trigger.paused {
                        trigger.hist.record(spec, payload);
                    }
                    continue;
                }
            };
            if !effective || trigger.spec.count == Some(0) {
                continue;
            }
            if let Some(count) = trigger.spec.count.as_mut() {
                *count -= 1;
            }
            match &trigger.spec.command {
                TriggerCommand::TraceOn => actions.set_tracing_on(true),
                TriggerCommand::TraceOff => actions.set_tracing_on(false),
                TriggerCommand::Snapshot => actions.snapshot(),
                TriggerCommand::StackTrace => actions.stacktrace(cpu),
                TriggerCommand::EnableEvent { system, event } => {
                    actions.set_event_enabled(system, event, true)
                }
                TriggerCommand::DisableEvent { system, event } => {
                    actions.set_event_enabled(system, event, false)
                }
                TriggerCommand::Hist(_) => {}
            }
        }
    }

    /// The `hist` file of the event: every hist trigger's table.
    #[cfg(any(test, feature = "internals"))]
    pub fn hist_text(&self) -> String {
        self.hist_text_with(&hist::NoNames)
    }

    /// [`TriggerSet::hist_text`], naming `.sym` and `.execname` keys.
    pub(crate) fn hist_text_with(&self, names: &dyn hist::HistNames) -> String {
        let mut out = String::new();
        for trigger in &self.triggers {
            if let TriggerCommand::Hist(spec) = &trigger.spec.command {
                if !out.is_empty() {
                    out.push_str("\n\n");
                }
                let mut info = String::new();
                let _ = write_trigger(&mut info, trigger);
                let _ = trigger.hist.write(spec, info.trim_end(), names, &mut out);
            }
        }
        out
    }

    /// The hist table of the first hist trigger, if any.
    #[cfg(test)]
    pub(crate) fn hist_table(&self) -> Option<&HistTable> {
        self.triggers.iter().find_map(|t| match t.spec.command {
            TriggerCommand::Hist(_) => Some(&t.hist),
            _ => None,
        })
    }
}

fn write_trigger(out: &mut impl Write, trigger: &Installed) -> fmt::Result {
    match &trigger.spec.command {
        TriggerCommand::Hist(spec) => {
            spec.write_spec(out)?;
            if let Some(filter) = &trigger.spec.filter {
                write!(out, " if {}", filter.text())?;
            }
            let state = if trigger.paused { "paused" } else { "active" };
            writeln!(out, " [{state}]")
        }
        command => {
            out.write_str(command.name())?;
            if let TriggerCommand::EnableEvent { system, event }
            | TriggerCommand::DisableEvent { system, event } = command
            {
                write!(out, ":{system}:{event}")?;
            }
            match trigger.spec.count {
                None => out.write_str(":unlimited")?,
                Some(count) => write!(out, ":count={count}")?,
            }
            if let Some(filter) = &trigger.spec.filter {
                write!(out, " if {}", filter.text())?;
            }
            out.write_char('\n')
        }
    }
}

impl fmt::Display for TriggerSet {
    /// The `trigger` file: one line per trigger, or ftrace's list of
    /// available commands when none is set.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.triggers.is_empty() {
            return writeln!(f, "# Available triggers:\n# {AVAILABLE_TRIGGERS}");
        }
        for trigger in &self.triggers {
            write_trigger(f, trigger)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
