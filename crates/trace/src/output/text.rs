//! The `trace` file in ftrace's text format: the default layout
//! (`comm-pid [cpu] flags timestamp: event: body`), and the whole file for
//! any tracer (function_graph's layout is `graph.rs`).

use alloc::string::String;
use core::fmt::Write;

use super::data::{Entry, RawRecord, TraceData};
use super::graph::write_graph_trace;
use hotkern_tracedat::print::Tables;

use super::line::{split_timestamp, write_event_body, write_lost_line, TextOptions};

/// `common_flags` bits, as ftrace defines them.
pub mod flag {
    /// Interrupts were off.
    pub const IRQS_OFF: u8 = 0x01;
    /// The platform cannot tell whether interrupts were off.
    pub const IRQS_NOSUPPORT: u8 = 0x02;
    /// A reschedule was pending.
    pub const NEED_RESCHED: u8 = 0x04;
    /// In a hard interrupt.
    pub const HARDIRQ: u8 = 0x08;
    /// In a soft interrupt.
    pub const SOFTIRQ: u8 = 0x10;
    /// A preemption reschedule was pending.
    pub const PREEMPT_RESCHED: u8 = 0x20;
    /// In an NMI.
    pub const NMI: u8 = 0x40;
    /// Bottom halves were off.
    pub const BH_OFF: u8 = 0x80;
}

/// The five latency columns (`irqs-off`, `need-resched`, `hardirq/softirq`,
/// `preempt-depth`, `migrate-disable`).
///
/// ```
/// use hotkern_trace::internals::output::{flag, latency_flags};
///
/// assert_eq!(latency_flags(0, 0), ".....");
/// assert_eq!(latency_flags(flag::IRQS_OFF | flag::HARDIRQ, 0x12), "d.h21");
/// ```
pub fn latency_flags(flags: u8, preempt_count: u8) -> String {
    let irqs_off = if flags & flag::IRQS_OFF != 0 && flags & flag::BH_OFF != 0 {
        'D'
    } else if flags & flag::IRQS_OFF != 0 {
        'd'
    } else if flags & flag::BH_OFF != 0 {
        'b'
    } else if flags & flag::IRQS_NOSUPPORT != 0 {
        'X'
    } else {
        '.'
    };
    let need_resched = match (
        flags & flag::NEED_RESCHED != 0,
        flags & flag::PREEMPT_RESCHED != 0,
    ) {
        (true, true) => 'N',
        (true, false) => 'n',
        (false, true) => 'p',
        (false, false) => '.',
    };
    let (nmi, hard, soft) = (
        flags & flag::NMI != 0,
        flags & flag::HARDIRQ != 0,
        flags & flag::SOFTIRQ != 0,
    );
    let irq = match (nmi, hard, soft) {
        (true, true, _) => 'Z',
        (true, false, _) => 'z',
        (false, true, true) => 'H',
        (false, true, false) => 'h',
        (false, false, true) => 's',
        _ => '.',
    };
    let digit = |v: u8| {
        if v == 0 {
            '.'
        } else {
            char::from_digit(u32::from(v), 16).unwrap_or('?')
        }
    };
    let mut out = String::with_capacity(5);
    out.push(irqs_off);
    out.push(need_resched);
    out.push(irq);
    out.push(digit(preempt_count & 0xf));
    out.push(digit(preempt_count >> 4));
    out
}

/// Writes one line of the default layout, as `options` show it.
pub(crate) fn write_event_line(
    data: &TraceData,
    tables: &Tables,
    record: &RawRecord,
    options: &TextOptions,
    out: &mut String,
) {
    let (secs, micros) = split_timestamp(record.timestamp_ns);
    let _ = write!(
        out,
        "{:>16}-{:<7} [{:03}] ",
        data.comms.get(record.pid()),
        record.pid(),
        record.cpu
    );
    if options.irq_info {
        out.push_str(&latency_flags(record.flags(), record.preempt_count()));
    }
    let _ = write!(out, " {secs:5}.{micros:06}: ");
    write_event_body(data, tables, record, options, out);
    if !out.ends_with('\n') {
        out.push('\n');
    }
}

/// The header of the default layout (with the `irq-info` columns where
/// `options` show them).
pub(crate) fn write_default_header(
    data: &TraceData,
    tracer: &str,
    options: &TextOptions,
    out: &mut String,
) {
    let _ = write!(
        out,
        "# tracer: {tracer}\n#\n# entries-in-buffer/entries-written: {}/{}   #P:{}\n#\n",
        data.event_count(),
        data.entries_written.max(data.event_count() as u64),
        data.cpus
    );
    if !options.irq_info {
        out.push_str(
            "#           TASK-PID     CPU#     TIMESTAMP  FUNCTION\n\
#              | |         |         |         |\n",
        );
        return;
    }
    out.push_str(
        "#                                _-----=> irqs-off/BH-disabled\n\
#                               / _----=> need-resched\n\
#                              | / _---=> hardirq/softirq\n\
#                              || / _--=> preempt-depth\n\
#                              ||| / _-=> migrate-disable\n\
#                              |||| /     delay\n\
#           TASK-PID     CPU#  |||||  TIMESTAMP  FUNCTION\n\
#              | |         |   |||||     |         |\n",
    );
}

/// Writes the whole `trace` file for `tracer`, as `options` (the tracefs
/// `trace_options`) show it; `TextOptions::default()` is ftrace's default.
pub fn write_trace(data: &TraceData, tracer: &str, options: &TextOptions, out: &mut String) {
    if tracer == "function_graph" {
        write_graph_trace(data, options, out);
        return;
    }
    write_default_header(data, tracer, options, out);
    write_lines(data, options, out);
}

/// The lines of the default layout without the header (`trace_pipe`).
pub(crate) fn write_lines(data: &TraceData, options: &TextOptions, out: &mut String) {
    let tables = data.print_tables();
    for entry in &data.entries {
        match entry {
            Entry::Event(record) => write_event_line(data, &tables, record, options, out),
            Entry::Lost { cpu, count } => write_lost_line(*cpu, *count, out),
        }
    }
}
