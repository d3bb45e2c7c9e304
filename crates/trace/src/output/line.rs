//! The pieces of a `trace` line that the default layout (`text.rs`) and
//! the function_graph layout (`graph.rs`) both print: the display options,
//! the time stamp, the event body and the lost-events line.

use alloc::string::String;
use core::fmt::Write;

use hotkern_tracedat::print::{write_binary_message, write_event, Tables};

use super::data::{RawRecord, TraceData};

/// ftrace's display options (`options/<name>`) that change the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TextOptions {
    /// `irq-info`: the five latency columns of the default layout.
    pub irq_info: bool,
    /// `print-parent`: `func <-parent` for the function tracer.
    pub print_parent: bool,
    /// `funcgraph-cpu`: the `N)` CPU column.
    pub graph_cpu: bool,
    /// `funcgraph-overhead`: the duration markers (`+`, `!`, `#` …).
    pub graph_overhead: bool,
    /// `funcgraph-duration`: the duration column.
    pub graph_duration: bool,
    /// `funcgraph-proc`: the task column.
    pub graph_proc: bool,
    /// `funcgraph-abstime`: the time stamp column.
    pub graph_abstime: bool,
    /// `funcgraph-tail`: name the function at every closing brace.
    pub graph_tail: bool,
}

impl Default for TextOptions {
    /// ftrace's defaults.
    fn default() -> Self {
        TextOptions {
            irq_info: true,
            print_parent: true,
            graph_cpu: true,
            graph_overhead: true,
            graph_duration: true,
            graph_proc: false,
            graph_abstime: false,
            graph_tail: false,
        }
    }
}

/// Seconds and microseconds as ftrace prints them (rounded to the
/// nearest microsecond).
pub fn split_timestamp(ns: u64) -> (u64, u64) {
    let micros = ns.saturating_add(500) / 1000;
    (micros / 1_000_000, micros % 1_000_000)
}

/// Writes the text of an event after the context columns: `func <-parent`
/// for the function tracer (as `options` show it), `name: body` for
/// everything else, its print format evaluated by [`hotkern_tracedat`]'s
/// printer with `tables` ([`TraceData::print_tables`]).
pub(crate) fn write_event_body(
    data: &TraceData,
    tables: &Tables,
    record: &RawRecord,
    options: &TextOptions,
    out: &mut String,
) {
    let Some(event) = data.event(record.event_id()) else {
        let _ = write!(out, "Unknown event id {}", record.event_id());
        return;
    };
    let symbol = |address| data.symbols.offset_name(address);
    let field = |name: &str| data.field_value(record, name);
    match (event.system.as_str(), event.name.as_str()) {
        ("ftrace", "function") => {
            out.push_str(&symbol(field("ip").unwrap_or(0)));
            if let Some(parent) = field("parent_ip").filter(|&p| p != 0 && options.print_parent) {
                out.push_str(" <-");
                out.push_str(&symbol(parent));
            }
        }
        ("ftrace", "print") => {
            out.push_str(&symbol(field("ip").unwrap_or(0)));
            out.push_str(": ");
            // `char buf[]` runs to the end of the payload; the text ends
            // at its NUL.
            if let Some(buf) = event.field("buf") {
                let text = record.payload.get(buf.offset..).unwrap_or_default();
                let text = text.split(|&b| b == 0).next().unwrap_or_default();
                out.push_str(&String::from_utf8_lossy(text));
            }
        }
        ("ftrace", "kernel_stack") => {
            super::stack::write_stack_body(data, event, record, out);
        }
        ("ftrace", "bprint") => {
            out.push_str(&symbol(field("ip").unwrap_or(0)));
            out.push_str(": ");
            let format = field("fmt").and_then(|address| data.printk_formats.get(&address));
            match (format, event.field("buf")) {
                (Some(format), Some(buf)) => {
                    let args = record.payload.get(buf.offset..).unwrap_or_default();
                    write_binary_message(format, args, tables, out);
                }
                _ => out.push_str("<unknown format>"),
            }
        }
        _ => {
            out.push_str(&event.name);
            out.push_str(": ");
            write_event(event, &record.payload, tables, out);
        }
    }
}

/// `CPU:N [LOST M EVENTS]`.
pub(crate) fn write_lost_line(cpu: u32, count: u64, out: &mut String) {
    if count == 0 {
        let _ = writeln!(out, "CPU:{cpu} [LOST EVENTS]");
    } else {
        let _ = writeln!(out, "CPU:{cpu} [LOST {count} EVENTS]");
    }
}
