//! Sequences of control-file writes and reads: nothing panics, and a
//! refused write changes nothing that can be read back.
#![no_main]

use std::sync::OnceLock;

use hotkern_trace::control::Control;
use hotkern_trace::{TraceConfig, Tracer};
use libfuzzer_sys::fuzz_target;

hotkern_trace::define_event! {
    /// The event the fuzzer configures.
    pub fuzz_event in fuzzsys {
        pid: i32,
        bytes: u32,
        name: [u8; 8],
    }
    print "pid=%d bytes=%u name=%s", pid, bytes, name
}

const FILES: &[&str] = &[
    "tracing_on",
    "current_tracer",
    "buffer_size_kb",
    "set_event",
    "set_event_pid",
    "set_ftrace_pid",
    "set_ftrace_filter",
    "set_ftrace_notrace",
    "max_graph_depth",
    "options/overwrite",
    "options/event-fork",
    "trace_options",
    "snapshot",
    "trace_marker",
    "trace",
    "error_log",
    "events/enable",
    "events/fuzzsys/enable",
    "events/fuzzsys/filter",
    "events/fuzzsys/fuzz_event/enable",
    "events/fuzzsys/fuzz_event/filter",
    "events/fuzzsys/fuzz_event/trigger",
    "events/fuzzsys/fuzz_event/format",
    "no_such_file",
];

/// Files whose content only a write to them can change (and that do not
/// depend on the clock or on other threads).
const OBSERVED: &[&str] = &[
    "tracing_on",
    "current_tracer",
    "buffer_size_kb",
    "set_event",
    "set_event_pid",
    "set_ftrace_pid",
    "set_ftrace_notrace",
    "max_graph_depth",
    "trace_options",
    "events/fuzzsys/fuzz_event/filter",
    "events/fuzzsys/fuzz_event/trigger",
];

fn control() -> &'static Control<'static> {
    static CONTROL: OnceLock<Control<'static>> = OnceLock::new();
    CONTROL.get_or_init(|| {
        hotkern_trace::event::register(&fuzz_event::EVENT);
        let tracer: &'static Tracer = Box::leak(Box::new(
            Tracer::with_threads(TraceConfig::small(), 2).unwrap(),
        ));
        Control::new(tracer)
    })
}

fn state(control: &Control<'_>) -> Vec<String> {
    OBSERVED
        .iter()
        .map(|f| control.read(f).unwrap_or_default())
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let control = control();
    for chunk in data.split(|&b| b == 0xff) {
        let Some((&selector, text)) = chunk.split_first() else {
            continue;
        };
        let Ok(text) = std::str::from_utf8(text) else {
            continue;
        };
        let file = FILES[usize::from(selector) % FILES.len()];
        // A tracer keeps every ring it ever allocated (a writer may still be
        // in an old one), so accepted resizes and mode switches would grow
        // memory without bound: only their refusals are fuzzed.
        let reallocates = match file {
            "buffer_size_kb" | "options/overwrite" => text.trim().parse::<u64>().is_ok(),
            "trace_options" => text.contains("overwrite"),
            _ => false,
        };
        if reallocates {
            continue;
        }
        let before = state(control);
        let result = if selector & 0x80 != 0 {
            control.append(file, text)
        } else {
            control.write(file, text)
        };
        if result.is_err() {
            assert_eq!(state(control), before, "{file} <- {text:?}");
        }
        let _ = control.read(file);
    }
});
