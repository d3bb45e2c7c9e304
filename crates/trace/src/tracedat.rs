//! Writing a `trace.dat`, the file trace-cmd and KernelShark read:
//! hotkern-tracedat's writer, re-exported so that a user of this crate
//! (a kernel on `alloc` alone included) needs no dependency of its own.
//!
//! [`control::view::trace_dat`](crate::control::view::trace_dat) turns a
//! tracer's pages into a [`TraceDat`]; [`write_trace_dat`] lays it out,
//! version 6 (trace-cmd 2.x and later) by default or version 7. Compressed
//! version 7 files need the `compression` feature. Reading a `trace.dat`
//! back, and its reports and JSON export, are `hotkern-tracedat`'s own,
//! with its `std` feature.
//!
//! ```
//! use hotkern_trace::control::view;
//! use hotkern_trace::tracedat::{write_trace_dat, FileVersion, WriteOptions};
//! use hotkern_trace::{TraceConfig, Tracer};
//!
//! let tracer = Tracer::with_threads(TraceConfig::small(), 1).unwrap();
//! tracer.write_marker("hello").unwrap();
//! let pages = view::drain_pages(&tracer);
//! let options = WriteOptions { version: FileVersion::V7, ..WriteOptions::default() };
//! let bytes = write_trace_dat(&view::trace_dat(&tracer, pages), &options).unwrap();
//! // trace-cmd's magic, then the version as text.
//! assert!(bytes.starts_with(b"\x17\x08\x44tracing7\0"));
//! ```

pub use hotkern_tracedat::write::{
    write_trace_dat, Compression, FileVersion, TraceDat, WriteError, WriteOptions,
};
