//! A decoded trace: the events in time order plus everything needed to
//! print them. Built from a live tracer or read from `trace.dat`.

use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write;

use hotkern_tracedat::print::Tables;
use hotkern_tracedat::{EventFormat, Kallsyms};

use super::format::{read_int, EventDescription};
use super::symbols::{Comms, Symbols};

/// One recorded event as the output side keeps it: the payload stays raw
/// and its fields are read through the event's format (the tracer's
/// [`Record`](crate::Record) has the common fields decoded instead).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawRecord {
    /// The CPU whose buffer held it.
    pub cpu: u32,
    /// Its time stamp in nanoseconds.
    pub timestamp_ns: u64,
    /// The payload, starting with ftrace's common header.
    pub payload: Vec<u8>,
}

impl RawRecord {
    /// `common_type`: the event id.
    pub fn event_id(&self) -> u16 {
        u16::from_le_bytes([self.payload_byte(0), self.payload_byte(1)])
    }

    /// `common_flags`.
    pub fn flags(&self) -> u8 {
        self.payload_byte(2)
    }

    /// `common_preempt_count`.
    pub(crate) fn preempt_count(&self) -> u8 {
        self.payload_byte(3)
    }

    /// `common_pid`.
    pub fn pid(&self) -> i32 {
        i32::from_le_bytes([
            self.payload_byte(4),
            self.payload_byte(5),
            self.payload_byte(6),
            self.payload_byte(7),
        ])
    }

    fn payload_byte(&self, index: usize) -> u8 {
        self.payload.get(index).copied().unwrap_or(0)
    }
}

/// An item of the merged stream.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Entry {
    /// An event.
    Event(RawRecord),
    /// `count` events of `cpu` were lost just before its next event.
    Lost {
        /// The CPU that lost them.
        cpu: u32,
        /// How many (0: lost, count unknown).
        count: u64,
    },
}

/// Everything needed to print a trace.
#[derive(Debug, Clone, Default)]
pub struct TraceData {
    /// Event descriptions by id.
    pub events: BTreeMap<u16, EventDescription>,
    /// Function symbols.
    pub symbols: Symbols,
    /// Task names.
    pub comms: Comms,
    /// `trace_printk` format strings by address.
    pub printk_formats: BTreeMap<u64, String>,
    /// Number of CPUs (`#P:`).
    pub cpus: u32,
    /// Events and losses, in time order.
    pub entries: Vec<Entry>,
    /// Every event ever written, including those lost (`entries-written`).
    pub entries_written: u64,
    /// hotkern-tracedat's view of each event, whose printer renders the
    /// print formats (the one evaluator, shared with trace.dat reports).
    printable: BTreeMap<u16, Option<EventFormat>>,
}

impl TraceData {
    /// An empty trace for `cpus` CPUs.
    pub fn new(cpus: u32) -> TraceData {
        TraceData {
            cpus,
            ..TraceData::default()
        }
    }

    /// Adds an event description.
    pub fn add_event(&mut self, event: EventDescription) {
        let printable = EventFormat::parse(&event.system, &format_text(&event)).ok();
        self.printable.insert(event.id, printable);
        self.events.insert(event.id, event);
    }

    /// The description of event `id`.
    pub fn event(&self, id: u16) -> Option<&EventDescription> {
        self.events.get(&id)
    }

    /// Event `id` as hotkern-tracedat's printer takes it
    /// (`hotkern_tracedat::print::write_event`).
    pub(crate) fn printable_event(&self, id: u16) -> Option<&EventFormat> {
        self.printable.get(&id)?.as_ref()
    }

    /// What hotkern-tracedat's printer needs besides the events: this
    /// machine's byte order and word size, the symbols (for `%pS`) and
    /// the `trace_printk` formats. Built from `symbols` and
    /// `printk_formats` as they are now; the layouts build it once per
    /// print.
    pub fn print_tables(&self) -> Tables {
        Tables::new(
            cfg!(target_endian = "big"),
            core::mem::size_of::<usize>(),
            Kallsyms::parse(&self.symbols.to_kallsyms()),
            self.printk_formats.iter().map(|(a, f)| (*a, f.clone())),
        )
    }

    /// The description of the event called `name`.
    pub fn event_named(&self, name: &str) -> Option<&EventDescription> {
        self.events.values().find(|e| e.name == name)
    }

    /// Merges per-CPU streams into `entries`, ordered by time stamp (ties
    /// by CPU, as ftrace's iterator does). Each stream is in its own order.
    pub fn merge(&mut self, per_cpu: Vec<Vec<Entry>>) {
        let mut next = alloc::vec![0usize; per_cpu.len()];
        // A loss sorts with the event that follows it in its own stream.
        let time_at = |stream: &[Entry], mut index: usize| loop {
            match stream.get(index) {
                Some(Entry::Event(record)) => return Some(record.timestamp_ns),
                Some(Entry::Lost { .. }) => index += 1,
                None if index > 0 => return Some(u64::MAX),
                None => return None,
            }
        };
        loop {
            let mut best: Option<(usize, u64)> = None;
            for (cpu, stream) in per_cpu.iter().enumerate() {
                if next[cpu] >= stream.len() {
                    continue;
                }
                let time = time_at(stream, next[cpu]).unwrap_or(u64::MAX);
                if best.is_none_or(|(_, t)| time < t) {
                    best = Some((cpu, time));
                }
            }
            let Some((cpu, _)) = best else { break };
            self.entries.push(per_cpu[cpu][next[cpu]].clone());
            next[cpu] += 1;
        }
    }

    /// Number of events (not losses) in `entries`.
    pub fn event_count(&self) -> usize {
        self.entries
            .iter()
            .filter(|e| matches!(e, Entry::Event(_)))
            .count()
    }

    /// The integer field `name` (or `x.name`) of `record`.
    pub(crate) fn field_value(&self, record: &RawRecord, name: &str) -> Option<u64> {
        let event = self.event(record.event_id())?;
        read_int(event.field_like(name)?, &record.payload)
    }
}

/// `event`'s format text again (the `format` file's layout), for
/// hotkern-tracedat's parser: a field's C type carries its array suffix,
/// which the declaration puts after the name (`char comm[16]`), except
/// for dynamic fields (`__data_loc char[] name`).
fn format_text(event: &EventDescription) -> String {
    let mut text = alloc::format!("name: {}\nID: {}\nformat:\n", event.name, event.id);
    for f in &event.fields {
        let dynamic = f.c_type.starts_with("__data_loc") || f.c_type.starts_with("__rel_loc");
        let _ = match f.c_type.find('[') {
            Some(at) if !dynamic => write!(
                text,
                "\tfield:{} {}{};",
                f.c_type[..at].trim_end(),
                f.name,
                &f.c_type[at..]
            ),
            _ => write!(text, "\tfield:{} {};", f.c_type, f.name),
        };
        let _ = writeln!(
            text,
            "\toffset:{};\tsize:{};\tsigned:{};",
            f.offset,
            f.size,
            u8::from(f.signed)
        );
    }
    let _ = writeln!(text, "\nprint fmt: {}", event.print_fmt);
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The text given to hotkern-tracedat is the format file's own, field
    /// declarations and all.
    #[test]
    fn format_text_gives_back_the_format_file() {
        let text = "name: demo\nID: 500\nformat:\n\
            \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
            \tfield:char comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\
            \tfield:__data_loc char[] name;\toffset:24;\tsize:4;\tsigned:0;\n\
            \tfield:unsigned long caller[8];\toffset:32;\tsize:64;\tsigned:0;\n\
            \tfield:int delta;\toffset:96;\tsize:4;\tsigned:1;\n\
            \nprint fmt: \"comm=%s name=%s\", REC->comm, __get_str(name)\n";
        let event = EventDescription::parse("demo", text).unwrap();
        assert_eq!(format_text(&event), text);
    }
}
