//! A tracefs-like control interface: `write(path, text)` / `read(path)` on
//! ftrace's file names with ftrace's value syntax, so what a user types
//! into `/sys/kernel/tracing` works unchanged.
//!
//! [`Control::write`] is `echo text > file` (truncating: `set_event`,
//! `set_ftrace_filter` and the pid lists are replaced, `trace` is cleared);
//! [`Control::append`] is `echo text >> file`. A refused write returns a
//! [`ControlError`] and changes nothing; parse errors of filters and
//! triggers are also logged in `error_log` with ftrace's `^` marker.
//!
//! ```
//! use hotkern_trace::control::Control;
//! use hotkern_trace::{TraceConfig, Tracer};
//!
//! let tracer = Tracer::with_threads(TraceConfig::small(), 1).unwrap();
//! let control = Control::new(&tracer);
//! control.write("tracing_on", "0").unwrap();
//! assert_eq!(control.read("tracing_on").unwrap(), "0\n");
//! assert!(control.write("current_tracer", "blk").is_err());
//! assert_eq!(control.read("current_tracer").unwrap(), "nop\n");
//! control.write("tracing_on", "1").unwrap();
//! control.write("trace_marker", "hello").unwrap();
//! assert!(control.read("trace").unwrap().contains("tracing_mark_write: hello\n"));
//! ```

mod error;
mod events;
mod files;
pub(crate) mod hook;
pub mod view;

use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::fmt::Write;

/// Why a filter or trigger written to a control file was refused (inside a
/// [`ControlError`]).
pub use crate::filter::{FilterError, FilterErrorKind};
pub use crate::trigger::TriggerError;
pub use error::ControlError;

use crate::filter::Filter;
use crate::ring::RawLock;
use crate::Tracer;
use hook::SharedTriggers;

/// Most entries kept in `error_log` (ftrace keeps 8).
pub(crate) const ERROR_LOG_ENTRIES: usize = 8;

/// The filter and triggers of one event.
pub(crate) struct EventSettings {
    pub(crate) filter: Option<Filter>,
    pub(crate) triggers: SharedTriggers,
}

pub(crate) struct State {
    pub(crate) events: BTreeMap<u16, EventSettings>,
    pub(crate) error_log: Vec<String>,
    pub(crate) text: crate::output::TextOptions,
}

/// The parsed event list and the registered-event count it was built for.
pub(crate) type Catalog = (usize, Arc<Vec<events::EventEntry>>);

/// The control files of one tracer.
pub struct Control<'t> {
    pub(crate) tracer: &'t Tracer,
    pub(crate) state: lock_api::Mutex<RawLock, State>,
    pub(crate) catalog: lock_api::Mutex<RawLock, Option<Catalog>>,
}

impl core::fmt::Debug for Control<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Control")
            .field("tracer", self.tracer)
            .finish()
    }
}

/// The files [`Control::list`] shows (event files come on top).
pub const FILES: &[&str] = &[
    "available_events",
    "available_filter_functions",
    "available_tracers",
    "buffer_size_kb",
    "buffer_total_size_kb",
    "current_tracer",
    "error_log",
    "function_profile_enabled",
    "max_graph_depth",
    "printk_formats",
    "saved_cmdlines",
    "set_event",
    "set_event_pid",
    "set_ftrace_filter",
    "set_ftrace_notrace",
    "set_ftrace_pid",
    "snapshot",
    "trace",
    "trace_clock",
    "trace_marker",
    "trace_options",
    "trace_pipe",
    "tracing_on",
];

impl<'t> Control<'t> {
    /// The control files of `tracer`.
    pub fn new(tracer: &'t Tracer) -> Control<'t> {
        Control {
            tracer,
            state: lock_api::Mutex::new(State {
                events: BTreeMap::new(),
                error_log: Vec::new(),
                text: crate::output::TextOptions::default(),
            }),
            catalog: lock_api::Mutex::new(None),
        }
    }

    /// The tracer behind the files.
    pub fn tracer(&self) -> &'t Tracer {
        self.tracer
    }

    /// `echo text > path`.
    pub fn write(&self, path: &str, text: &str) -> Result<(), ControlError> {
        self.write_file(&normalize(path), text, false)
    }

    /// `echo text >> path`.
    pub fn append(&self, path: &str, text: &str) -> Result<(), ControlError> {
        self.write_file(&normalize(path), text, true)
    }

    /// `cat path`. Reading `trace_pipe` consumes what it returns.
    pub fn read(&self, path: &str) -> Result<String, ControlError> {
        self.read_file(&normalize(path))
    }

    /// Every file, event and `trace_stat` files included.
    pub fn list(&self) -> Vec<String> {
        let mut files: Vec<String> = FILES.iter().map(|f| String::from(*f)).collect();
        for option in files::OPTIONS {
            files.push(alloc::format!("options/{option}"));
        }
        for cpu in 0..self.tracer.cpus() {
            files.push(alloc::format!("trace_stat/function{cpu}"));
            for file in ["stats", "trace", "trace_pipe"] {
                files.push(alloc::format!("per_cpu/cpu{cpu}/{file}"));
            }
        }
        files.push(String::from("events/enable"));
        files.push(String::from("events/header_page"));
        files.push(String::from("events/header_event"));
        let mut systems = Vec::new();
        for event in self.events() {
            let (system, name) = (&event.format.system, &event.format.name);
            let base = alloc::format!("events/{system}/{name}/");
            files.push(base.clone() + "format");
            files.push(base.clone() + "id");
            if event.switchable() {
                for file in ["enable", "filter", "trigger", "hist"] {
                    files.push(base.clone() + file);
                }
                if !systems.contains(system) {
                    systems.push(system.clone());
                }
            }
        }
        for system in systems {
            files.push(alloc::format!("events/{system}/enable"));
            files.push(alloc::format!("events/{system}/filter"));
        }
        files
    }

    /// Adds an `error_log` entry the way ftrace's `tracing_log_err` does.
    pub(crate) fn log_error(&self, location: &str, message: &str, command: &str, position: usize) {
        let now = self.tracer.now_ns();
        let micros = now / 1000;
        let mut entry = String::new();
        let _ = writeln!(
            entry,
            "[{:5}.{:06}] {location}: error: {message}",
            micros / 1_000_000,
            micros % 1_000_000
        );
        let _ = writeln!(entry, "  Command: {command}");
        let _ = writeln!(
            entry,
            "{:>width$}",
            "^",
            width = "  Command: ".len() + position + 1
        );
        let mut state = self.state.lock();
        if state.error_log.len() == ERROR_LOG_ENTRIES {
            state.error_log.remove(0);
        }
        state.error_log.push(entry);
    }
}

/// Accepts `/sys/kernel/tracing/x`, `/sys/kernel/debug/tracing/x`, `/x` and `x`.
fn normalize(path: &str) -> String {
    let mut path = path.trim();
    for prefix in ["/sys/kernel/debug/tracing/", "/sys/kernel/tracing/", "/"] {
        if let Some(rest) = path.strip_prefix(prefix) {
            path = rest;
            break;
        }
    }
    String::from(path.trim_end_matches('/'))
}

#[cfg(all(test, feature = "std"))]
mod tests;
