//! Chrome trace-event JSON (the format the Perfetto UI and
//! `chrome://tracing` open): function calls become complete (`"X"`)
//! slices on their task's track, other events instant (`"i"`) events with
//! their rendered text, and each task gets a `thread_name`.

use alloc::collections::BTreeSet;
use alloc::string::String;
use core::fmt::Write;

use super::data::{Entry, TraceData};
use super::line::{write_event_body, TextOptions};

/// The process id all tasks are shown under.
const PROCESS: u32 = 1;

/// Writes `data` as a Chrome trace-event JSON document.
///
/// ```
/// use hotkern_trace::output::{write_chrome_json, TraceData};
///
/// let mut json = String::new();
/// write_chrome_json(&TraceData::new(1), &mut json);
/// assert!(json.starts_with("{\"traceEvents\":["));
/// assert!(json.ends_with("\"displayTimeUnit\":\"ns\"}\n"));
/// ```
pub fn write_chrome_json(data: &TraceData, out: &mut String) {
    out.push_str("{\"traceEvents\":[");
    let mut first = true;
    let mut separator = |out: &mut String| {
        if !first {
            out.push_str(",\n");
        }
        first = false;
    };
    let exit_id = data.event_named("funcgraph_exit").map(|e| e.id);
    let entry_id = data.event_named("funcgraph_entry").map(|e| e.id);
    let mut tasks = BTreeSet::new();
    let mut last_ts = 0;
    for (index, entry) in data.entries.iter().enumerate() {
        match entry {
            Entry::Event(record) => {
                last_ts = record.timestamp_ns;
                let id = Some(record.event_id());
                tasks.insert(record.pid());
                if id == entry_id {
                    // The matching exit carries both times; it makes the slice.
                    continue;
                }
                separator(out);
                if id == exit_id {
                    let start = data
                        .field_value(record, "calltime")
                        .unwrap_or(record.timestamp_ns);
                    let end = data.field_value(record, "rettime").unwrap_or(start);
                    let func = data.field_value(record, "func").unwrap_or(0);
                    let name = match data.symbols.lookup(func) {
                        Some((name, _)) => String::from(name),
                        None => alloc::format!("0x{func:x}"),
                    };
                    out.push_str("{\"ph\":\"X\",\"cat\":\"function\",\"name\":");
                    write_json_string(&name, out);
                    let _ = write!(
                        out,
                        ",\"ts\":{},\"dur\":{},\"pid\":{PROCESS},\"tid\":{},\"args\":{{\"cpu\":{}}}}}",
                        Micros(start),
                        Micros(end.saturating_sub(start)),
                        record.pid(),
                        record.cpu
                    );
                } else {
                    let event = data.event(record.event_id());
                    let name = event.map_or("unknown", |e| e.name.as_str());
                    let category = event.map_or("unknown", |e| e.system.as_str());
                    let mut body = String::new();
                    write_event_body(data, record, &TextOptions::default(), &mut body);
                    out.push_str("{\"ph\":\"i\",\"s\":\"t\",\"name\":");
                    write_json_string(name, out);
                    out.push_str(",\"cat\":");
                    write_json_string(category, out);
                    let _ = write!(
                        out,
                        ",\"ts\":{},\"pid\":{PROCESS},\"tid\":{},\"args\":{{\"cpu\":{},\"text\":",
                        Micros(record.timestamp_ns),
                        record.pid(),
                        record.cpu
                    );
                    write_json_string(body.trim_end(), out);
                    if let Some(event) =
                        event.filter(|e| e.system == "ftrace" && e.name == "kernel_stack")
                    {
                        // The frames as a list too, so a viewer need not
                        // parse the text.
                        out.push_str(",\"frames\":[");
                        for (index, name) in super::stack::frame_names(data, event, record)
                            .iter()
                            .enumerate()
                        {
                            if index > 0 {
                                out.push(',');
                            }
                            write_json_string(name, out);
                        }
                        out.push(']');
                    }
                    out.push_str("}}");
                }
            }
            Entry::Lost { cpu, count } => {
                // Shown where the CPU's stream resumes (or at the last
                // event if it never does).
                let resume = data.entries[index..].iter().find_map(|e| match e {
                    Entry::Event(r) if r.cpu == *cpu => Some(r.timestamp_ns),
                    _ => None,
                });
                separator(out);
                let _ = write!(
                    out,
                    "{{\"ph\":\"i\",\"s\":\"g\",\"name\":\"lost events\",\"ts\":{},\"pid\":{PROCESS},\"tid\":0,\"args\":{{\"cpu\":{cpu},\"count\":{count}}}}}",
                    Micros(resume.unwrap_or(last_ts))
                );
            }
        }
    }
    separator(out);
    let _ = write!(
        out,
        "{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{PROCESS},\"tid\":0,\"args\":{{\"name\":\"hotkern\"}}}}"
    );
    for pid in tasks {
        separator(out);
        let _ = write!(
            out,
            "{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":{PROCESS},\"tid\":{pid},\"args\":{{\"name\":"
        );
        write_json_string(data.comms.get(pid), out);
        out.push_str("}}");
    }
    out.push_str("],\"displayTimeUnit\":\"ns\"}\n");
}

/// Nanoseconds printed as microseconds with three decimals (the unit of `ts`).
struct Micros(u64);

impl core::fmt::Display for Micros {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}.{:03}", self.0 / 1000, self.0 % 1000)
    }
}

/// Writes `text` as a JSON string literal.
pub fn write_json_string(text: &str, out: &mut String) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}
