//! Function probes on a tracer (`function::probe`): written through
//! `set_ftrace_filter`, judged per function with the filters, fired on a
//! function's entry.

use alloc::string::String;
use alloc::vec::Vec;
use core::sync::atomic::Ordering;

use super::{common_header, TraceError, Tracer};
use crate::control::hook::TracerActions;
use crate::event::format;
use crate::function::probe::{Probe, ProbeCommand, ProbeError, ProbeErrorKind, ProbeWrite};
use crate::function::FunctionSite;
use crate::trigger::TriggerActions;

/// A function's flag: the tracer's mode traces it (`current_tracer` or
/// the profiler, and the filters select it).
pub(crate) const TRACED: u8 = 1;
/// A function's flag: a probe of the tracer fires on it.
pub(crate) const PROBED: u8 = 2;

impl Tracer {
    /// Takes the probe commands out of a `set_ftrace_filter` write: the
    /// rest of the text (probe commands blanked, so selectors keep their
    /// positions) and the commands, each checked. Changes nothing.
    pub(super) fn split_probes(&self, text: &str) -> Result<(String, Vec<ProbeWrite>), TraceError> {
        let mut rest = String::from(text);
        let mut writes = Vec::new();
        for token in text.split(char::is_whitespace).filter(|t| !t.is_empty()) {
            let position = token.as_ptr() as usize - text.as_ptr() as usize;
            let Some(parsed) = ProbeWrite::parse(token, position) else {
                continue;
            };
            let write = parsed.map_err(TraceError::Probe)?;
            self.check_probe(&write).map_err(|kind| {
                TraceError::Probe(ProbeError {
                    kind,
                    text: String::from(token),
                    position,
                })
            })?;
            rest.replace_range(position..position + token.len(), &" ".repeat(token.len()));
            writes.push(write);
        }
        Ok((rest, writes))
    }

    /// Refuses a probe naming an event that does not exist, or (where
    /// there is a site table) whose glob matches no function.
    fn check_probe(&self, write: &ProbeWrite) -> Result<(), ProbeErrorKind> {
        if write.removes() {
            return Ok(());
        }
        if let ProbeCommand::EnableEvent { system, event }
        | ProbeCommand::DisableEvent { system, event } = write.command()
        {
            if self.event_id(system, event).is_none() {
                return Err(ProbeErrorKind::NoSuchEvent);
            }
        }
        if crate::site::has_table() {
            let glob = crate::glob::Glob::new(write.glob());
            if !self
                .available_functions()
                .iter()
                .any(|f| glob.matches(f.name()))
            {
                return Err(ProbeErrorKind::NoMatch);
            }
        }
        Ok(())
    }

    /// Installs or removes checked probe writes (a probe written again
    /// replaces the one of the same glob and command).
    pub(super) fn apply_probes(&self, writes: Vec<ProbeWrite>) {
        let mut probes = self.probes.lock();
        for write in writes {
            probes.retain(|probe| !probe.removed_by(&write));
            if !write.removes() {
                probes.push(Probe::new(&write));
            }
        }
    }

    /// The probes as `set_ftrace_filter` lists them after the functions.
    pub(crate) fn function_probes_text(&self) -> String {
        self.probes.lock().iter().map(Probe::line).collect()
    }

    /// Whether one of the tracer's probes fires on `site`.
    pub(super) fn probes_function(&self, site: &FunctionSite) -> bool {
        site.is_instrumented() && self.probes.lock().iter().any(|p| p.matches(site.name()))
    }

    /// The [`TRACED`] | [`PROBED`] flags of a registered site.
    #[inline(always)]
    pub(crate) fn site_flags(&self, site: &FunctionSite) -> u8 {
        site.registered_index()
            .and_then(|index| self.site_flags.get(index))
            .map_or(0, |flags| flags.load(Ordering::Relaxed))
    }

    /// Records a site's flags (when the tracer judged it).
    pub(super) fn set_site_flags(&self, site: &FunctionSite, flags: u8) {
        if let Some(cell) = site.registered_index().and_then(|i| self.site_flags.get(i)) {
            cell.store(flags, Ordering::Release);
        }
    }

    /// Runs the probes that fire on `site`: what a function only probes
    /// watch calls directly, and the list calls before the mode's entry.
    /// Never once `uninstall` returned (the gate, as entries).
    #[cold]
    #[inline(never)]
    pub(crate) fn fire_probes(&self, site: &'static FunctionSite) {
        let Some((cpu, pid)) = self.current() else {
            return;
        };
        let Some(_passage) = self.gate.pass(&self.calls[cpu].doorway) else {
            return;
        };
        // A probe acting (enabling an event) may enter a probed function
        // on this CPU: it skips the probes rather than deadlock.
        let Some(mut probes) = self.probes.try_lock() else {
            return;
        };
        // The header a `stacktrace` copies; on this frame's stack, so the
        // trace leaves the tracer's own frames out.
        let header = common_header(format::FUNCTION_ID, 0, pid);
        let mut actions = TracerActions {
            tracer: self,
            payload: &header,
        };
        for probe in probes.iter_mut() {
            if !probe.armed() || !probe.matches(site.name()) {
                continue;
            }
            // A switch's count is used up only by calls that flip it.
            let acts = match &probe.command {
                ProbeCommand::TraceOn => !actions.tracing_on(),
                ProbeCommand::TraceOff => actions.tracing_on(),
                ProbeCommand::StackTrace => true,
                ProbeCommand::EnableEvent { system, event } => {
                    !actions.event_enabled(system, event)
                }
                ProbeCommand::DisableEvent { system, event } => {
                    actions.event_enabled(system, event)
                }
            };
            if !acts || !probe.take() {
                continue;
            }
            match &probe.command {
                ProbeCommand::TraceOn => actions.set_tracing_on(true),
                ProbeCommand::TraceOff => actions.set_tracing_on(false),
                ProbeCommand::StackTrace => actions.stacktrace(cpu as u32),
                ProbeCommand::EnableEvent { system, event } => {
                    actions.set_event_enabled(system, event, true)
                }
                ProbeCommand::DisableEvent { system, event } => {
                    actions.set_event_enabled(system, event, false)
                }
            }
        }
    }
}

impl From<ProbeError> for TraceError {
    fn from(error: ProbeError) -> Self {
        TraceError::Probe(error)
    }
}
