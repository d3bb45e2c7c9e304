//! `trace-cmd report` output: what `hotkern trace report` prints for a
//! saved `trace.dat`, line for line as `trace-cmd report -N` (no plugins)
//! prints it, so the two can be compared directly.
//!
//! ```text
//! cpus=2
//!         worker-a-100   [000]     1.000000: demo_tick:            comm=worker value=0
//! ```

use alloc::string::String;
use core::fmt::Write;

use super::data::{Entry, TraceData};
use super::line::{split_timestamp, write_event_body};
use super::printf::write_raw_fields;

/// Writes `data` as `trace-cmd report -N` does; `full_ns` prints
/// nanosecond time stamps as `-t` does.
pub fn write_report(data: &TraceData, full_ns: bool, out: &mut String) {
    let _ = writeln!(out, "cpus={}", data.cpus);
    for entry in &data.entries {
        match entry {
            Entry::Lost { cpu, count: 0 } => {
                let _ = writeln!(out, "CPU:{cpu} [EVENTS DROPPED]");
            }
            Entry::Lost { cpu, count } => {
                let _ = writeln!(out, "CPU:{cpu} [{count} EVENTS DROPPED]");
            }
            Entry::Event(record) => {
                let _ = write!(
                    out,
                    "{:>16}-{:<5} [{:03}] ",
                    data.comms.get(record.pid()),
                    record.pid(),
                    record.cpu
                );
                if full_ns {
                    let _ = write!(
                        out,
                        "{:5}.{:09}: ",
                        record.timestamp_ns / 1_000_000_000,
                        record.timestamp_ns % 1_000_000_000
                    );
                } else {
                    let (secs, micros) = split_timestamp(record.timestamp_ns);
                    let _ = write!(out, "{secs:5}.{micros:06}: ");
                }
                match data.event(record.event_id()) {
                    Some(event) => {
                        let _ = write!(out, "{}:", event.name);
                        for _ in event.name.len()..20 {
                            out.push(' ');
                        }
                        out.push(' ');
                        let mut body = String::new();
                        if event.system == "ftrace" && event.name == "bprint" {
                            // trace-cmd formats trace_printk records with
                            // the printk-format table, not the print fmt.
                            write_event_body(data, record, &mut body);
                        } else {
                            match data.print_format(event.id) {
                                Some(format) => {
                                    format.render(&record.payload, &data.symbols, &mut body)
                                }
                                None => write_raw_fields(event, &record.payload, &mut body),
                            }
                        }
                        out.push_str(body.trim_end_matches('\n'));
                    }
                    None => {
                        let _ = write!(out, "[UNKNOWN TYPE {}]", record.event_id());
                    }
                }
                out.push('\n');
            }
        }
    }
}
