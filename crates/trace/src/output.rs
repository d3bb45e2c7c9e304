//! What the tracer shows live: ftrace's `trace` text. (`trace.dat` is
//! written and read by [`hotkern_tracedat`], which also exports Chrome trace
//! JSON from it; the recorder's side of it is
//! [`control::view::trace_dat`](crate::control::view::trace_dat).)
//!
//! Everything here works from a [`TraceData`]: event formats (ftrace's
//! `format` text parsed by [`hotkern_tracedat::EventFormat::parse`]),
//! symbol and task tables, and the records decoded from the rings' pages
//! in time order.
//!
//! ```
//! use hotkern_trace::control::view;
//! use hotkern_trace::output::{write_trace, TextOptions};
//! use hotkern_trace::{TraceConfig, Tracer};
//!
//! let tracer = Tracer::with_threads(TraceConfig::small(), 1).unwrap().install().unwrap();
//! tracer.write_marker("hello").unwrap();
//! let data = view::peek(tracer);
//! let mut text = String::new();
//! write_trace(&data, "nop", &TextOptions::default(), &mut text);
//! assert!(text.starts_with("# tracer: nop\n"));
//! assert!(text.trim_end().ends_with("tracing_mark_write: hello"));
//! tracer.uninstall();
//! ```

mod data;
mod format;
pub(crate) mod graph;
pub(crate) mod line;
pub(crate) mod pages;
pub(crate) mod stack;
mod symbols;
pub(crate) mod text;

pub use data::{Entry, RawRecord, TraceData};
pub(crate) use format::field_specs;
pub(crate) use graph::{write_graph_duration, write_graph_trace};
pub use line::TextOptions;
pub(crate) use pages::decode_pages;
#[cfg(feature = "std")]
pub(crate) use stack::{add_stack_symbols, resolve_in_process};
pub use symbols::{Comms, Symbols};
pub(crate) use text::write_lines;
pub use text::write_trace;
