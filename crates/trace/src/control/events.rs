//! The event files: `set_event`, `available_events`, `events/enable`,
//! `events/<system>/{enable,filter}` and
//! `events/<system>/<event>/{enable,filter,trigger,hist,format,id}`.

use alloc::boxed::Box;
use alloc::string::{String, ToString};
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt::Write;

use super::error::ControlError;
use super::hook::ControlHook;
use super::{Control, EventSettings, State};
use crate::event::EventFormat;
use crate::filter::{FieldSpec, Filter, FilterErrorKind};
use crate::glob::Glob;
use crate::trigger::TriggerSet;

/// An event as the control files see it.
#[derive(Clone)]
pub(crate) struct EventEntry {
    pub(crate) format: EventFormat,
    /// Its fields as filters and triggers name them, from its `format`
    /// text as [`hotkern_tracedat`] parses it.
    pub(crate) fields: Vec<FieldSpec>,
}

impl EventEntry {
    /// Built-in `ftrace/*` events have a format but no switch.
    pub(crate) fn switchable(&self) -> bool {
        self.format.system != "ftrace"
    }

    fn label(&self) -> String {
        [self.format.system.as_str(), ":", self.format.name.as_str()].concat()
    }
}

impl Control<'_> {
    /// Every event, parsed once per set of registered events (the list
    /// only grows, so its length tells whether the cache is current).
    pub(crate) fn events(&self) -> Vec<EventEntry> {
        let registered = crate::event::registered().len();
        let mut catalog = self.catalog.lock();
        if let Some((count, entries)) = &*catalog {
            if *count == registered {
                return entries.as_ref().clone();
            }
        }
        let entries: Vec<EventEntry> = self
            .tracer
            .event_formats()
            .into_iter()
            .map(|format| {
                let parsed =
                    hotkern_tracedat::EventFormat::parse(&format.system, &format.to_format_file());
                let fields = parsed
                    .map(|event| crate::output::field_specs(&event))
                    .unwrap_or_default();
                EventEntry { format, fields }
            })
            .collect();
        *catalog = Some((registered, Arc::new(entries.clone())));
        entries
    }

    fn find_event(&self, system: &str, name: &str) -> Option<EventEntry> {
        self.events()
            .into_iter()
            .find(|e| e.format.system == system && e.format.name == name)
    }

    fn switchable_events(&self) -> Vec<EventEntry> {
        self.events()
            .into_iter()
            .filter(EventEntry::switchable)
            .collect()
    }

    /// `available_events`.
    pub(crate) fn available_events(&self) -> String {
        let mut out = String::new();
        for event in self.switchable_events() {
            let _ = writeln!(out, "{}", event.label());
        }
        out
    }

    /// `set_event` (read).
    pub(crate) fn read_set_event(&self) -> String {
        let mut out = String::new();
        for event in self.switchable_events() {
            if self.tracer.event_enabled(event.format.id) {
                let _ = writeln!(out, "{}", event.label());
            }
        }
        out
    }

    /// `set_event` (write): `sys:event`, `sys:*`, `*:event`, `event`, with
    /// `!` to disable. Every word is checked before anything changes.
    pub(crate) fn write_set_event(&self, text: &str, append: bool) -> Result<(), ControlError> {
        let events = self.switchable_events();
        let mut changes: Vec<(u16, bool)> = Vec::new();
        for word in text.split_whitespace() {
            let (enable, spec) = match word.strip_prefix('!') {
                Some(rest) => (false, rest),
                None => (true, word),
            };
            let (system, name) = match spec.split_once(':') {
                Some((system, name)) => (system, name),
                None => ("*", spec),
            };
            let (system, name) = (
                Glob::new(if system.is_empty() { "*" } else { system }),
                Glob::new(if name.is_empty() { "*" } else { name }),
            );
            let matched: Vec<u16> = events
                .iter()
                .filter(|e| system.matches(&e.format.system) && name.matches(&e.format.name))
                .map(|e| e.format.id)
                .collect();
            if matched.is_empty() {
                return Err(ControlError::invalid(
                    "set_event",
                    ["no event matches '", word, "'"].concat(),
                ));
            }
            changes.extend(matched.into_iter().map(|id| (id, enable)));
        }
        if !append {
            for event in &events {
                self.switch(event.format.id, false)?;
            }
        }
        for (id, enable) in changes {
            self.switch(id, enable)?;
        }
        Ok(())
    }

    fn switch(&self, id: u16, on: bool) -> Result<(), ControlError> {
        self.tracer
            .set_event_enabled(id, on)
            .map_err(|e| ControlError::invalid("set_event", e.to_string()))
    }

    /// `events/enable` and `events/<system>/enable` (read): 0, 1, or X when mixed.
    fn group_enable(&self, system: Option<&str>) -> String {
        let states: Vec<bool> = self
            .switchable_events()
            .iter()
            .filter(|e| system.is_none_or(|s| e.format.system == s))
            .map(|e| self.tracer.event_enabled(e.format.id))
            .collect();
        let all = states.iter().all(|&s| s);
        let none = states.iter().all(|&s| !s);
        String::from(match (all, none) {
            (true, false) => "1\n",
            (false, true) | (true, true) => "0\n",
            (false, false) => "X\n",
        })
    }

    fn write_group_enable(
        &self,
        file: &str,
        system: Option<&str>,
        text: &str,
    ) -> Result<(), ControlError> {
        let on = parse_bool(file, text)?;
        let ids: Vec<u16> = self
            .switchable_events()
            .iter()
            .filter(|e| system.is_none_or(|s| e.format.system == s))
            .map(|e| e.format.id)
            .collect();
        for id in ids {
            self.switch(id, on)?;
        }
        Ok(())
    }

    /// Reads a file under `events/`.
    pub(crate) fn read_event_file(
        &self,
        path: &str,
        parts: &[&str],
    ) -> Result<String, ControlError> {
        let not_found = || ControlError::NoSuchFile(String::from(path));
        match parts {
            ["enable"] => Ok(self.group_enable(None)),
            ["header_page"] => Ok(crate::ring::page::HEADER_PAGE_FORMAT.to_string()),
            ["header_event"] => Ok(crate::ring::page::HEADER_EVENT_FORMAT.to_string()),
            [system, "enable"] => self
                .system_exists(system)
                .then(|| self.group_enable(Some(system)))
                .ok_or_else(not_found),
            [system, "filter"] => {
                if !self.system_exists(system) {
                    return Err(not_found());
                }
                let state = self.state.lock();
                let filters: Vec<String> = self
                    .switchable_events()
                    .iter()
                    .filter(|e| e.format.system == *system)
                    .map(|e| filter_text(&state, e.format.id))
                    .collect();
                // ftrace shows a system filter only while every event has it.
                let first = filters
                    .first()
                    .cloned()
                    .unwrap_or_else(|| "none\n".to_string());
                Ok(if filters.iter().all(|f| *f == first) {
                    first
                } else {
                    "none\n".to_string()
                })
            }
            [system, name, file] => {
                let event = self.find_event(system, name).ok_or_else(not_found)?;
                let id = event.format.id;
                match (*file, event.switchable()) {
                    ("format", _) => Ok(event.format.to_format_file()),
                    ("id", _) => Ok(alloc::format!("{id}\n")),
                    ("enable", true) => {
                        // ftrace marks an event with triggers (soft mode) with `*`.
                        let soft = !self.triggers_of(id).lock().is_empty();
                        let on = self.tracer.event_enabled(id);
                        Ok(String::from(match (on, soft) {
                            (true, false) => "1\n",
                            (true, true) => "1*\n",
                            (false, false) => "0\n",
                            (false, true) => "0*\n",
                        }))
                    }
                    ("filter", true) => Ok(filter_text(&self.state.lock(), id)),
                    ("trigger", true) => Ok(self.triggers_of(id).lock().to_string()),
                    ("hist", true) => {
                        let names = Names {
                            tracer: self.tracer,
                            symbols: super::view::symbols(),
                        };
                        let text = self.triggers_of(id).lock().hist_text_with(&names);
                        Ok(if text.is_empty() {
                            "# event histogram\n#\n# (no hist trigger)\n".to_string()
                        } else {
                            text
                        })
                    }
                    _ => Err(not_found()),
                }
            }
            _ => Err(not_found()),
        }
    }

    /// Writes a file under `events/`.
    pub(crate) fn write_event_file(
        &self,
        path: &str,
        parts: &[&str],
        text: &str,
    ) -> Result<(), ControlError> {
        let not_found = || ControlError::NoSuchFile(String::from(path));
        match parts {
            ["enable"] => self.write_group_enable(path, None, text),
            ["header_page" | "header_event"] => Err(ControlError::ReadOnly(String::from(path))),
            [system, "enable"] if self.system_exists(system) => {
                self.write_group_enable(path, Some(system), text)
            }
            [system, "filter"] if self.system_exists(system) => {
                self.write_system_filter(path, system, text)
            }
            [system, name, file] => {
                let event = self.find_event(system, name).ok_or_else(not_found)?;
                match (*file, event.switchable()) {
                    ("format" | "id" | "hist", _) => {
                        Err(ControlError::ReadOnly(String::from(path)))
                    }
                    ("enable", true) => {
                        let on = parse_bool(path, text)?;
                        self.switch(event.format.id, on)
                    }
                    ("filter", true) => self.write_filter(path, &event, text),
                    ("trigger", true) => self.write_trigger(path, &event, text),
                    _ => Err(not_found()),
                }
            }
            _ => Err(not_found()),
        }
    }

    fn system_exists(&self, system: &str) -> bool {
        self.switchable_events()
            .iter()
            .any(|e| e.format.system == system)
    }

    pub(crate) fn triggers_of(&self, id: u16) -> super::hook::SharedTriggers {
        let mut state = self.state.lock();
        state.events.entry(id).or_default().triggers.clone()
    }

    fn compile(
        &self,
        file: &str,
        event: &EventEntry,
        text: &str,
    ) -> Result<Option<Filter>, ControlError> {
        let text = text.trim();
        if text.is_empty() || text == "0" {
            return Ok(None);
        }
        Filter::compile(text, &event.fields)
            .map(Some)
            .map_err(|error| {
                self.log_error(
                    "event filter parse error",
                    error.kind.message(),
                    text,
                    error.position,
                );
                ControlError::Filter {
                    file: String::from(file),
                    error,
                }
            })
    }

    fn write_filter(&self, file: &str, event: &EventEntry, text: &str) -> Result<(), ControlError> {
        let filter = self.compile(file, event, text)?;
        let mut state = self.state.lock();
        state.events.entry(event.format.id).or_default().filter = filter;
        self.install_hook(&state, event.format.id);
        Ok(())
    }

    fn write_system_filter(
        &self,
        file: &str,
        system: &str,
        text: &str,
    ) -> Result<(), ControlError> {
        let events: Vec<EventEntry> = self
            .switchable_events()
            .into_iter()
            .filter(|e| e.format.system == system)
            .collect();
        // Compile for every event first: one failure changes nothing.
        let mut compiled = Vec::new();
        for event in &events {
            match self.compile(file, event, text) {
                Ok(filter) => compiled.push((event.format.id, filter)),
                Err(ControlError::Filter { error, .. })
                    if error.kind == FilterErrorKind::FieldNotFound =>
                {
                    return Err(ControlError::invalid(
                        file,
                        "Couldn't find or set field in one of a subsystem's events",
                    ));
                }
                Err(error) => return Err(error),
            }
        }
        let mut state = self.state.lock();
        for (id, filter) in compiled {
            state.events.entry(id).or_default().filter = filter;
            self.install_hook(&state, id);
        }
        Ok(())
    }

    fn write_trigger(
        &self,
        file: &str,
        event: &EventEntry,
        text: &str,
    ) -> Result<(), ControlError> {
        let exists = |system: &str, name: &str| self.tracer.event_id(system, name).is_some();
        let triggers = self.triggers_of(event.format.id);
        let result = triggers.lock().write(text, &event.fields, &exists);
        if let Err(error) = result {
            if let Some(position) = error.position() {
                self.log_error(
                    "event trigger parse error",
                    &error.to_string(),
                    text.trim_end(),
                    position,
                );
            }
            return Err(ControlError::Trigger {
                file: String::from(file),
                error,
            });
        }
        let state = self.state.lock();
        self.install_hook(&state, event.format.id);
        Ok(())
    }

    /// Installs or removes the event's hook to match its settings.
    fn install_hook(&self, state: &State, id: u16) {
        let Some(settings) = state.events.get(&id) else {
            return;
        };
        let needed = settings.filter.is_some() || !settings.triggers.lock().is_empty();
        let hook = needed.then(|| {
            Box::new(ControlHook {
                filter: settings.filter.clone(),
                triggers: Arc::clone(&settings.triggers),
            }) as Box<dyn crate::EventHook>
        });
        let _ = self.tracer.set_event_hook(id, hook);
    }
}

impl Default for EventSettings {
    fn default() -> Self {
        EventSettings {
            filter: None,
            triggers: Arc::new(lock_api::Mutex::new(TriggerSet::default())),
        }
    }
}

fn filter_text(state: &State, id: u16) -> String {
    match state.events.get(&id).and_then(|s| s.filter.as_ref()) {
        Some(filter) => [filter.text(), "\n"].concat(),
        None => "none\n".to_string(),
    }
}

/// `0` / `1` as ftrace's boolean files take them (any other number is 1).
pub(crate) fn parse_bool(file: &str, text: &str) -> Result<bool, ControlError> {
    text.trim()
        .parse::<u64>()
        .map(|v| v != 0)
        .map_err(|_| ControlError::invalid(file, "expected a number"))
}

/// Names for `.sym` and `.execname` hist keys, from the tracer.
struct Names<'t> {
    tracer: &'t crate::Tracer,
    symbols: crate::output::Symbols,
}

impl crate::trigger::hist::HistNames for Names<'_> {
    fn symbol(&self, address: u64) -> Option<String> {
        self.symbols
            .lookup(address)
            .map(|(name, _)| String::from(name))
    }

    fn comm(&self, pid: i64) -> Option<String> {
        self.tracer.comm(i32::try_from(pid).ok()?)
    }
}
