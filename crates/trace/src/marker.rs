//! `trace_marker`: user text written into the trace as `ftrace/print`
//! events (see [`Tracer::write_marker`](crate::Tracer::write_marker)).
//!
//! ```
//! use hotkern_trace::{TraceConfig, Tracer};
//! let tracer = Tracer::with_threads(TraceConfig::small(), 1).unwrap();
//! assert_eq!(tracer.write_marker("phase 2 starts").unwrap(), 14);
//! let record = &tracer.drain_records()[0];
//! assert_eq!(record.event_id, hotkern_trace::event::PRINT_ID);
//! assert_eq!(record.string(16), "phase 2 starts\n");
//! ```

use crate::function::FunctionSite;

/// The `ip` of marker events, named like ftrace's writer function so
/// outputs print `tracing_mark_write: <text>`.
pub(crate) static MARKER_SYMBOL: FunctionSite =
    FunctionSite::symbol(module_path!(), "tracing_mark_write", file!(), line!());
