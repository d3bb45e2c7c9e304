//! The function_graph layout of the `trace` file:
//!
//! ```text
//! # tracer: function_graph
//! #
//! # CPU  DURATION                  FUNCTION CALLS
//! # |     |   |                     |   |   |   |
//!  0)               |  outer() {
//!  0)   0.374 us    |    leaf();
//!  0) + 12.250 us   |  }
//! ```
//!
//! An entry directly followed (on its CPU) by its own return is printed as
//! one `leaf();` line; other events appear as `/* … */` comments; a task
//! change on a CPU prints ftrace's separator block.

use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write;

use super::data::{Entry, RawRecord, TraceData};
use super::line::{split_timestamp, write_event_body, write_lost_line, TextOptions};
use crate::function::MAX_DEPTH;

const INDENT: usize = 2;
const PROCINFO_WIDTH: usize = 14;

/// ftrace's duration marker: `$` > 1 s, `@` > 100 ms, `*` > 10 ms,
/// `#` > 1 ms, `!` > 100 µs, `+` > 10 µs, else a blank.
pub(crate) fn duration_mark(ns: u64) -> char {
    const MARKS: [(u64, char); 6] = [
        (1_000_000_000, '$'),
        (100_000_000, '@'),
        (10_000_000, '*'),
        (1_000_000, '#'),
        (100_000, '!'),
        (10_000, '+'),
    ];
    MARKS
        .iter()
        .find(|(limit, _)| ns > *limit)
        .map_or(' ', |(_, mark)| *mark)
}

/// The duration column: `mark`, blank, the duration, then `|  `.
pub(crate) fn write_duration(ns: u64, out: &mut String) {
    out.push(duration_mark(ns));
    out.push(' ');
    write_graph_duration(ns, out);
    out.push_str("|  ");
}

/// A duration as ftrace prints it in function_graph and `trace_stat`:
/// microseconds with up to 3 decimals so that the number takes at most 7
/// digits, then ` us `, padded to 12 columns.
///
/// ```
/// use hotkern_trace::internals::output::write_graph_duration;
/// let mut out = String::new();
/// write_graph_duration(374, &mut out);
/// assert_eq!(out, "0.374 us    ");
/// ```
pub fn write_graph_duration(ns: u64, out: &mut String) {
    let micros = alloc::format!("{}", ns / 1000);
    out.push_str(&micros);
    let mut len = micros.len();
    if len < 7 {
        let decimals = (7 - len).min(3);
        let nanos = alloc::format!("{:03}", ns % 1000);
        out.push('.');
        out.push_str(&nanos[..decimals]);
        len += decimals + 1;
    }
    out.push_str(" us ");
    for _ in len..8 {
        out.push(' ');
    }
}

const FILL_FULL: &str = "              |  ";

#[derive(Default)]
struct CpuState {
    last_pid: Option<i32>,
    depth: i64,
    entered: BTreeMap<u64, u64>,
}

/// The two header lines, per the `funcgraph-*` options.
fn write_graph_header(options: &TextOptions, out: &mut String) {
    // (shown, title, the bars under it), in column order.
    let columns = [
        (
            options.graph_abstime,
            "     TIME       ",
            "      |         ",
        ),
        (options.graph_cpu, " CPU", " |  "),
        (options.graph_proc, "  TASK/PID       ", "   |    |        "),
        (options.graph_duration, "  DURATION   ", "   |   |      "),
    ];
    out.push('#');
    for (_, title, _) in columns.iter().filter(|column| column.0) {
        out.push_str(title);
    }
    out.push_str("               FUNCTION CALLS\n#");
    for (_, _, bars) in columns.iter().filter(|column| column.0) {
        out.push_str(bars);
    }
    out.push_str("               |   |   |   |\n");
}

/// The duration column: a duration, or blanks (`None`), unless disabled.
fn duration_column(ns: Option<u64>, options: &TextOptions, out: &mut String) {
    if !options.graph_duration {
        return;
    }
    match ns {
        None => out.push_str(FILL_FULL),
        Some(ns) if options.graph_overhead => write_duration(ns, out),
        Some(ns) => {
            out.push_str("  ");
            write_graph_duration(ns, out);
            out.push_str("|  ");
        }
    }
}

/// Writes the whole function_graph `trace` file, with the columns
/// `options` (the `funcgraph-*` options) show.
pub(crate) fn write_graph_trace(data: &TraceData, options: &TextOptions, out: &mut String) {
    out.push_str("# tracer: function_graph\n#\n");
    write_graph_header(options, out);
    let cpu_width = alloc::format!("{}", data.cpus.max(1) - 1).len();
    let entry_id = data.event_named("funcgraph_entry").map(|e| e.id);
    let exit_id = data.event_named("funcgraph_exit").map(|e| e.id);
    let mut cpus: BTreeMap<u32, CpuState> = BTreeMap::new();
    // Per CPU, the index in `entries` of each event, to find the next
    // event of the same CPU (the leaf check looks only there).
    let mut next_on_cpu: Vec<Option<usize>> = alloc::vec![None; data.entries.len()];
    let mut last_seen: BTreeMap<u32, usize> = BTreeMap::new();
    for (index, entry) in data.entries.iter().enumerate() {
        if let Entry::Event(record) = entry {
            if let Some(previous) = last_seen.insert(record.cpu, index) {
                next_on_cpu[previous] = Some(index);
            }
        }
    }
    let tables = data.print_tables();
    let mut skip = alloc::vec![false; data.entries.len()];
    for (index, entry) in data.entries.iter().enumerate() {
        if skip[index] {
            continue;
        }
        let record = match entry {
            Entry::Event(record) => record,
            Entry::Lost { cpu, count } => {
                write_lost_line(*cpu, *count, out);
                continue;
            }
        };
        let state = cpus.entry(record.cpu).or_default();
        write_pid_change(data, record, state, cpu_width, out);
        if options.graph_abstime {
            let (secs, micros) = split_timestamp(record.timestamp_ns);
            let _ = write!(out, "{secs:5}.{micros:06} |  ");
        }
        if options.graph_cpu {
            let _ = write!(out, " {:>cpu_width$}) ", record.cpu);
        }
        if options.graph_proc {
            write_proc(data, record.pid(), out);
            out.push_str(" | ");
        }
        let id = Some(u32::from(record.event_id()));
        let func = data.field_value(record, "func").unwrap_or(0);
        let depth = data.field_value(record, "depth").unwrap_or(0) as i64;
        let name = data.symbols.offset_name(func);
        if id == entry_id {
            let leaf = next_on_cpu[index].and_then(|n| match &data.entries[n] {
                Entry::Event(next)
                    if Some(u32::from(next.event_id())) == exit_id
                        && next.pid() == record.pid()
                        && data.field_value(next, "func") == Some(func) =>
                {
                    Some((n, next))
                }
                _ => None,
            });
            match leaf {
                Some((n, exit)) => {
                    skip[n] = true;
                    state.depth = depth.saturating_sub(1);
                    duration_column(Some(call_duration(data, exit)), options, out);
                    indent(depth, out);
                    let _ = writeln!(out, "{name}();");
                }
                None => {
                    state.depth = depth;
                    state.entered.insert(depth as u64, func);
                    duration_column(None, options, out);
                    indent(depth, out);
                    let _ = writeln!(out, "{name}() {{");
                }
            }
        } else if id == exit_id {
            let matched = state.entered.remove(&(depth as u64)) == Some(func);
            state.depth = depth.saturating_sub(1);
            duration_column(Some(call_duration(data, record)), options, out);
            indent(depth, out);
            if matched && !options.graph_tail {
                out.push_str("}\n");
            } else {
                let _ = writeln!(out, "}} /* {name} */");
            }
        } else {
            duration_column(None, options, out);
            if state.depth > 0 {
                indent(state.depth.saturating_add(1), out);
            }
            out.push_str("/* ");
            let mut body = String::new();
            write_event_body(data, &tables, record, options, &mut body);
            out.push_str(body.trim_end_matches('\n'));
            out.push_str(" */\n");
        }
    }
}

fn call_duration(data: &TraceData, exit: &RawRecord) -> u64 {
    let start = data.field_value(exit, "calltime").unwrap_or(0);
    let end = data.field_value(exit, "rettime").unwrap_or(start);
    end.saturating_sub(start)
}

/// Indents for call depth `depth`. A file may claim any depth; recorders
/// (ours, and ftrace's return stack) never go past [`MAX_DEPTH`], so the
/// indentation stops there rather than growing without bound.
fn indent(depth: i64, out: &mut String) {
    let levels = depth.clamp(0, MAX_DEPTH as i64) as usize;
    for _ in 0..levels * INDENT {
        out.push(' ');
    }
}

fn write_pid_change(
    data: &TraceData,
    record: &RawRecord,
    state: &mut CpuState,
    cpu_width: usize,
    out: &mut String,
) {
    let pid = record.pid();
    let previous = state.last_pid.replace(pid);
    match previous {
        Some(previous) if previous != pid => {
            out.push_str(" ------------------------------------------\n");
            let _ = write!(out, " {:>cpu_width$}) ", record.cpu);
            write_proc(data, previous, out);
            out.push_str(" => ");
            write_proc(data, pid, out);
            out.push_str("\n ------------------------------------------\n\n");
        }
        _ => {}
    }
}

/// `comm-pid` centred in 14 columns, the comm cut to 7 characters.
fn write_proc(data: &TraceData, pid: i32, out: &mut String) {
    let comm: String = data.comms.get(pid).chars().take(7).collect();
    let text = alloc::format!("{comm}-{pid}");
    let spaces = PROCINFO_WIDTH.saturating_sub(text.len());
    for _ in 0..spaces / 2 {
        out.push(' ');
    }
    out.push_str(&text);
    for _ in 0..spaces - spaces / 2 {
        out.push(' ');
    }
}

#[cfg(test)]
mod tests {
    use super::duration_mark;

    #[test]
    fn duration_marks_start_above_each_threshold() {
        let cases = [
            (5_000, ' '),
            (10_000, ' '),
            (10_001, '+'),
            (100_001, '!'),
            (1_000_001, '#'),
            (10_000_001, '*'),
            (100_000_001, '@'),
            (1_000_000_001, '$'),
        ];
        for (ns, mark) in cases {
            assert_eq!(duration_mark(ns), mark, "{ns} ns");
        }
    }
}
