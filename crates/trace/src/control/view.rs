//! Turning a live [`Tracer`]'s buffers into the output side's
//! [`TraceData`] (for `trace`, `trace_pipe`, JSON) and into the plain
//! inputs of [`hotkern_tracedat`]'s writer, [`TraceDat`] (for `trace.dat`).
//!
//! ```
//! use hotkern_trace::control::view;
//! use hotkern_trace::{TraceConfig, Tracer};
//! use hotkern_tracedat::write::write_trace_dat;
//!
//! let tracer = Tracer::with_threads(TraceConfig::small(), 1).unwrap().install().unwrap();
//! tracer.write_marker("hello").unwrap();
//! let pages = view::drain_pages(tracer);
//! assert_eq!(view::trace_data_from_pages(tracer, &pages).event_count(), 1);
//! let bytes = write_trace_dat(&view::trace_dat(tracer, pages), &Default::default()).unwrap();
//! assert_eq!(&bytes[..3], b"\x17\x08\x44"); // trace.dat's magic
//! tracer.uninstall();
//! ```

use alloc::collections::{BTreeMap, BTreeSet};
use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt::Write;

use hotkern_tracedat::write::TraceDat;

use hotkern_tracedat::EventFormat;

use crate::output::{decode_pages, Comms, Entry, Symbols, TraceData};
use crate::ring::page::{HEADER_EVENT_FORMAT, HEADER_PAGE_FORMAT};
use crate::ring::PAGE_SIZE;
use crate::Tracer;

/// Every event the tracer knows, parsed from its `format` text (so live
/// output and trace.dat agree).
pub(crate) fn parsed_formats(tracer: &Tracer) -> Vec<EventFormat> {
    tracer
        .event_formats()
        .iter()
        .filter_map(|format| EventFormat::parse(&format.system, &format.to_format_file()).ok())
        .collect()
}

/// The symbol table: instrumented functions, the `trace_marker` writer and
/// `trace_printk` call sites.
pub(crate) fn symbols() -> Symbols {
    let mut symbols = Symbols::new();
    for (address, name) in crate::function::symbols() {
        symbols.insert(address, name);
    }
    symbols.insert(crate::marker::MARKER_SYMBOL.address(), "tracing_mark_write");
    symbols
}

/// An empty [`TraceData`] with everything but the events filled in.
pub(crate) fn skeleton(tracer: &Tracer) -> TraceData {
    let mut data = TraceData::new(tracer.cpus() as u32);
    for event in parsed_formats(tracer) {
        data.add_event(event);
    }
    data.symbols = symbols();
    data.printk_formats = crate::printk::formats().into_iter().collect();
    data
}

fn fill_comms(tracer: &Tracer, data: &mut TraceData) {
    let pids: BTreeSet<i32> = data
        .entries
        .iter()
        .filter_map(|e| match e {
            Entry::Event(r) => Some(r.pid()),
            Entry::Lost { .. } => None,
        })
        .collect();
    let mut comms = Comms::new();
    for pid in pids {
        if let Some(comm) = tracer.comm(pid) {
            comms.insert(pid, &comm);
        }
    }
    data.comms = comms;
}

/// The unread events, not consumed (the `trace` file), decoded from the
/// raw pages so that loss markers show. `entries_written` counts what was
/// lost too.
pub fn peek(tracer: &Tracer) -> TraceData {
    let mut data = trace_data_from_pages(tracer, &peek_pages(tracer));
    let lost: u64 = (0..tracer.cpus()).map(|cpu| tracer.lost(cpu)).sum();
    data.entries_written = data.event_count() as u64 + lost;
    data
}

/// The snapshot buffer's events (the `snapshot` file), if allocated.
pub(crate) fn snapshot(tracer: &Tracer) -> Option<TraceData> {
    let mut pages = Vec::new();
    for cpu in 0..tracer.cpus() {
        pages.push(concat(tracer.snapshot_pages(cpu).ok()?));
    }
    Some(trace_data_from_pages(tracer, &pages))
}

/// Copies every unread page, per CPU, without consuming (a `trace.dat` of
/// a running trace).
pub fn peek_pages(tracer: &Tracer) -> Vec<Vec<u8>> {
    (0..tracer.cpus())
        .map(|cpu| concat(tracer.peek_pages(cpu)))
        .collect()
}

fn concat(pages: Vec<alloc::boxed::Box<[u8; PAGE_SIZE]>>) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(pages.len() * PAGE_SIZE);
    for page in pages {
        bytes.extend_from_slice(&page[..]);
    }
    bytes
}

/// Reads (consumes) every unread page, per CPU.
pub fn drain_pages(tracer: &Tracer) -> Vec<Vec<u8>> {
    (0..tracer.cpus())
        .map(|cpu| concat(tracer.drain_pages(cpu)))
        .collect()
}

/// Consumes the unread events (the `trace_pipe` file), with a loss marker
/// wherever a page says events were lost before it.
pub(crate) fn consume(tracer: &Tracer) -> TraceData {
    let pages = drain_pages(tracer);
    trace_data_from_pages(tracer, &pages)
}

/// Consumes the unread events of one CPU (`per_cpu/cpu<N>/trace_pipe`).
pub(crate) fn consume_cpu(tracer: &Tracer, cpu: usize) -> TraceData {
    let mut pages = alloc::vec![Vec::new(); tracer.cpus()];
    if let Some(slot) = pages.get_mut(cpu) {
        *slot = concat(tracer.drain_pages(cpu));
    }
    trace_data_from_pages(tracer, &pages)
}

/// The unread events of one CPU, not consumed (`per_cpu/cpu<N>/trace`).
pub(crate) fn peek_cpu(tracer: &Tracer, cpu: usize) -> TraceData {
    let mut data = peek(tracer);
    data.entries.retain(|e| match e {
        Entry::Event(r) => r.cpu as usize == cpu,
        Entry::Lost { cpu: c, .. } => *c as usize == cpu,
    });
    data.entries_written = data.event_count() as u64 + tracer.lost(cpu);
    data
}

/// A [`TraceData`] from raw per-CPU pages taken from `tracer`.
pub fn trace_data_from_pages(tracer: &Tracer, pages: &[Vec<u8>]) -> TraceData {
    let mut data = skeleton(tracer);
    let streams = pages
        .iter()
        .enumerate()
        .map(|(cpu, bytes)| decode_pages(cpu as u32, bytes, PAGE_SIZE).unwrap_or_default())
        .collect();
    data.merge(streams);
    data.entries_written = data.event_count() as u64;
    fill_comms(tracer, &mut data);
    data
}

/// What a `trace.dat` of `pages` (raw, per CPU) recorded by `tracer`
/// holds: the pages, the event formats, symbols, `trace_printk` formats and
/// task names. Write it with
/// [`write_trace_dat`](hotkern_tracedat::write::write_trace_dat), version 6
/// or 7.
pub fn trace_dat(tracer: &Tracer, pages: Vec<Vec<u8>>) -> TraceDat {
    let data = trace_data_from_pages(tracer, &pages);
    let mut ftrace_formats = Vec::new();
    let mut systems: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for format in tracer.event_formats() {
        let text = format.to_format_file();
        if format.system == "ftrace" {
            ftrace_formats.push(text);
        } else {
            systems.entry(format.system.clone()).or_default().push(text);
        }
    }
    let mut printk_formats = String::new();
    for (address, format) in crate::printk::formats() {
        let _ = writeln!(printk_formats, "0x{address:x} : \"{}\"", escape(&format));
    }
    #[cfg_attr(not(feature = "std"), allow(unused_mut))]
    let mut file = TraceDat {
        page_size: PAGE_SIZE as u32,
        header_page: HEADER_PAGE_FORMAT.to_string(),
        header_event: HEADER_EVENT_FORMAT.to_string(),
        ftrace_formats,
        systems: systems.into_iter().collect(),
        kallsyms: symbols().to_kallsyms(),
        printk_formats,
        cmdlines: data.comms.to_saved_cmdlines(),
        cpu_data: pages,
        ..TraceDat::default()
    };
    // Stack frames are addresses in this process: name them while it runs,
    // so trace-cmd prints `=> name` for them too.
    #[cfg(feature = "std")]
    crate::output::add_stack_symbols(&mut file, crate::output::resolve_in_process);
    file
}

fn escape(format: &str) -> String {
    let mut out = String::new();
    for c in format.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c => out.push(c),
        }
    }
    out
}
