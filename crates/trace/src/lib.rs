//! An ftrace-class tracer: per-CPU lock-free ring buffers in ftrace's binary
//! format, typed trace events, `trace_marker` and `trace_printk`, function
//! and function_graph tracing with filters and profiling, snapshots and a
//! hardware-latency-style detector.
//!
//! Recording side:
//! * [`ring`] — [`RingBuffer`](ring::RingBuffer): one ring of 4 KiB pages per
//!   CPU in ftrace's `buffer_data_page` / event-header encoding
//!   ([`PageView`](ring::PageView)), lock-free reserve/commit with nesting writers, readers
//!   that take whole pages without stopping writers, overwrite and
//!   producer/consumer modes, exact loss accounting.
//! * [`platform`] — the [`Clock`](platform::Clock),
//!   [`CpuContext`](platform::CpuContext) and
//!   [`TextPoke`](platform::TextPoke) a kernel provides; in user space
//!   [`ThreadCpus`](platform::ThreadCpus) (thread-per-CPU), the TSC or
//!   monotonic clock and [`UserText`](platform::UserText).
//! * [`site`] — call sites that are NOPs until enabled, patched in place
//!   (Linux's jump labels and `text_poke_bp`).
//! * [`event`] — [`define_event!`] typed events and their `format` files,
//!   the built-in `ftrace/*` formats.
//! * [`function`](mod@function) — `#[hotkern_trace::function]` call sites,
//!   filters, pid lists, profiling, graph duration markers.
//! * [`printk`] — [`trace_printk!`]; [`Tracer::write_marker`] — `trace_marker`.
//! * [`Tracer`] — an instance tying them together, with the methods the
//!   control files call.
//!
//! ```
//! use hotkern_trace::function::TracerKind;
//! use hotkern_trace::{TraceConfig, Tracer};
//!
//! hotkern_trace::define_event! {
//!     /// A request finished.
//!     pub request_done in demo { id: u64, bytes: u32 }
//!     print "id=%llu bytes=%u", id, bytes
//! }
//!
//! #[hotkern_trace::function]
//! fn handle(id: u64) -> u32 {
//!     request_done::trace(id, 512);
//!     512
//! }
//!
//! let tracer = Tracer::with_threads(TraceConfig::small(), 2).unwrap().install().unwrap();
//! tracer.set_event_enabled(request_done::EVENT.id(), true).unwrap();
//! tracer.set_ftrace_filter("handle", false).unwrap();
//! tracer.set_current_tracer(TracerKind::FunctionGraph).unwrap();
//! handle(7);
//! tracer.set_current_tracer(TracerKind::Nop).unwrap();
//! let ids: Vec<u16> = tracer.drain_records().iter().map(|r| r.event_id).collect();
//! // funcgraph_entry, the event, funcgraph_exit
//! assert_eq!(ids, [11, request_done::EVENT.id(), 10]);
//! tracer.uninstall();
//! ```
#![no_std]
// Links from the other hotkern crates to this one point here when this
// crate's docs are not beside theirs (a fresh `cargo doc --no-deps`).
#![doc(html_root_url = "https://docs.rs/hotkern-trace/0.1")]
#![warn(unnameable_types)]
extern crate alloc;
#[cfg(feature = "std")]
extern crate std;

// Lets the `#[function]` attribute and the macros name this crate as
// `::hotkern_trace` from inside it too (its own tests and doc examples).
extern crate self as hotkern_trace;

pub mod event;
pub mod function;
#[cfg(feature = "std")]
mod hwlat;
mod marker;
pub mod platform;
pub mod printk;
pub mod ring;
pub mod site;
pub mod tracedat;
mod tracer;

/// `#[hotkern_trace::function]`: instruments a function for the function
/// and function_graph tracers (see [`function`](mod@function)).
pub use hotkern_trace_macros::function;
#[cfg(feature = "std")]
pub use hwlat::HwlatConfig;
pub(crate) use tracer::{EventHook, TraceOption};
pub use tracer::{Record, TraceConfig, TraceError, Tracer};

// Control and output (filters, triggers, the tracefs-style interface, writers).
pub mod control;
pub(crate) mod filter;
pub(crate) mod glob;
pub mod output;
pub(crate) mod trigger;

/// What the fuzz targets and property tests check the real code against:
/// not part of the API, and free to change with the code it checks. Only
/// with the `internals` feature, which this crate's tests, its fuzz targets
/// and the `hotkern` CLI's benchmarks turn on; a kernel links without it.
#[cfg(feature = "internals")]
#[doc(hidden)]
pub mod internals {
    /// The tree-walking filter evaluator the compiled filter programs and
    /// the glob matcher are compared with.
    pub mod filter_reference {
        pub use crate::filter::reference::{evaluate, evaluate_task, glob_matches};
    }
    /// Event filters (`filter` files): the parser, the expression tree
    /// and the compiled program the property tests and fuzzers drive.
    pub mod filter {
        pub use crate::filter::{
            parse, CompareOp, Expr, FieldKind, FieldSpec, Filter, FilterError, FilterErrorKind,
            Operand, Predicate,
        };
    }
    /// The call sites' patcher: the planted bug of the torn-patch test, a
    /// hook between the protocol's steps, the breakpoints handled.
    pub mod site {
        pub use crate::site::{between_steps, plant_torn_patching, traps};
    }
    /// Who a patched function or event site calls: the list-only switch,
    /// the direct handlers, the gate an uninstall closes, and its planted
    /// bug.
    pub mod dispatch {
        pub use crate::event::direct::event_handler;
        pub use crate::function::dispatch::{
            direct_handler, is_direct, plant_unwaited_close, set_list_only, Doorway, Gate, Passage,
        };
    }
    /// The glob matcher behind `set_event`, `set_ftrace_filter` and filters.
    pub mod glob {
        pub use crate::glob::{glob_match, has_wildcard, Glob, GlobKind};
    }
    /// Event triggers (`trigger` files), fired without the tracer.
    pub mod trigger {
        pub use crate::trigger::{TriggerActions, TriggerError, TriggerSet};
    }
    /// Orders records from several CPUs by time, as a reader merging
    /// per-CPU buffers does.
    pub use crate::tracer::record::merge as merge_records;
    /// Decodes the records of one ring page (what `Tracer::drain_records`
    /// does page by page).
    pub fn records_from_page(
        cpu: usize,
        page: &[u8; crate::ring::PAGE_SIZE],
    ) -> alloc::vec::Vec<crate::Record> {
        crate::Record::from_page(cpu, page)
    }
    /// The name of the `#[function]` at `address` (a `function` or
    /// `funcgraph_*` record's `ip`/`func`).
    pub fn function_name(address: u64) -> Option<&'static str> {
        crate::function::site_at(address).map(|site| site.name())
    }
    /// The recorder's `trace_printk` format table: (address, C format).
    pub fn printk_formats() -> alloc::vec::Vec<(u64, alloc::string::String)> {
        crate::printk::formats()
    }
    /// ftrace's own event formats (`function`, `funcgraph_*`, `print`, ...).
    pub use crate::event::format::builtin_formats;
    /// The parts of ftrace's text layout the `trace` file's tests check
    /// one by one, and the page decoder checked against the ring's.
    pub mod output {
        pub use crate::output::graph::write_graph_duration;
        pub use crate::output::line::split_timestamp;
        pub use crate::output::pages::{decode_pages, PageError};
        pub use crate::output::stack::stack_frames;
        pub use crate::output::text::{flag, latency_flags};
        /// Merges per-CPU streams (from [`decode_pages`]) into `data`'s
        /// entries, ordered by time stamp, ties by CPU.
        pub fn merge(
            data: &mut crate::output::TraceData,
            per_cpu: alloc::vec::Vec<alloc::vec::Vec<crate::output::Entry>>,
        ) {
            data.merge(per_cpu);
        }
    }
}
