//! Control-interface tests. Tracers and events are process-wide, so each
//! test defines its own events and installs its own tracer.

use super::*;
use crate::{TraceConfig, Tracer};
use alloc::string::ToString;

mod ctl_events {
    crate::define_event! {
        /// A request.
        pub ctl_request in ctltest {
            pid: i32,
            bytes: u32,
            name: [u8; 8],
        }
        print "pid=%d bytes=%u name=%s", pid, bytes, name
    }
    crate::define_event! {
        /// A reply.
        pub ctl_reply in ctltest {
            code: u32,
        }
        print "code=%u", code
    }
    crate::define_event! {
        /// Something in another system.
        pub ctl_other in ctlother {
            value: u64,
        }
        print "value=%llu", value
    }
    crate::define_event! {
        /// Used only by the trigger test.
        pub trig_hit in trigtest {
            n: u32,
        }
        print "n=%u", n
    }
    crate::define_event! {
        /// Used only by the filter test.
        pub filt_hit in filttest {
            n: u32,
            label: [u8; 8],
        }
        print "n=%u label=%s", n, label
    }
}

use ctl_events::*;

pub(super) fn name8(text: &str) -> [u8; 8] {
    let mut out = [0u8; 8];
    out[..text.len()].copy_from_slice(text.as_bytes());
    out
}

pub(super) fn register_all() {
    for event in [
        &ctl_request::EVENT,
        &ctl_reply::EVENT,
        &ctl_other::EVENT,
        &trig_hit::EVENT,
        &filt_hit::EVENT,
    ] {
        crate::event::register(event);
    }
}

pub(super) fn installed() -> &'static Tracer {
    register_all();
    Tracer::with_threads(TraceConfig::small(), 2)
        .unwrap()
        .install()
        .unwrap()
}

/// Everything a write could change, read back through the files.
pub(super) fn observable(control: &Control<'_>) -> Vec<(String, String)> {
    let files = [
        "tracing_on",
        "current_tracer",
        "buffer_size_kb",
        "set_event",
        "set_event_pid",
        "set_ftrace_pid",
        "set_ftrace_notrace",
        "max_graph_depth",
        "function_profile_enabled",
        "options/overwrite",
        "options/function-fork",
        "trace_options",
        "events/ctltest/ctl_request/enable",
        "events/ctltest/ctl_request/filter",
        "events/ctltest/ctl_request/trigger",
        "events/ctltest/filter",
        "events/enable",
    ];
    let mut state: Vec<(String, String)> = files
        .iter()
        .map(|f| (f.to_string(), control.read(f).unwrap()))
        .collect();
    // The file lists matching functions, and other tests register functions
    // concurrently; the selectors are what a write could change.
    state.push((
        "set_ftrace_filter".to_string(),
        control.tracer().ftrace_filter_text(),
    ));
    state
}

mod events;
mod files;
mod functions;
