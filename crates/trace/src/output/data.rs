//! A decoded trace: the events in time order plus everything needed to
//! print them. Built from a live tracer or read from `trace.dat`.

use alloc::collections::BTreeMap;
use alloc::string::String;
use alloc::vec::Vec;

use hotkern_tracedat::print::Tables;
use hotkern_tracedat::{EventFormat, Kallsyms};

use super::format::{field_like, read_int};
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
    /// The events' formats by id, as [`hotkern_tracedat`] parses them.
    events: BTreeMap<u32, EventFormat>,
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
}

impl TraceData {
    /// An empty trace for `cpus` CPUs.
    pub fn new(cpus: u32) -> TraceData {
        TraceData {
            cpus,
            ..TraceData::default()
        }
    }

    /// Adds an event's format (its `format` text parsed by
    /// [`EventFormat::parse`]), which prints the records of its id.
    ///
    /// ```
    /// use hotkern_trace::output::TraceData;
    /// use hotkern_tracedat::EventFormat;
    ///
    /// let text = "name: wake\nID: 300\nformat:\n\
    ///     \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
    ///     \tfield:int pid;\toffset:8;\tsize:4;\tsigned:1;\n\n\
    ///     print fmt: \"pid=%d\", REC->pid\n";
    /// let mut data = TraceData::new(1);
    /// data.add_event(EventFormat::parse("sched", text).unwrap());
    /// assert_eq!(data.event(300).unwrap().name, "wake");
    /// assert_eq!(data.event_named("wake").unwrap().id, 300);
    /// ```
    pub fn add_event(&mut self, event: EventFormat) {
        self.events.insert(event.id, event);
    }

    /// The format of event `id`.
    pub fn event(&self, id: u16) -> Option<&EventFormat> {
        self.events.get(&u32::from(id))
    }

    /// What [`hotkern_tracedat`]'s printer needs besides the events: this
    /// machine's byte order and word size, the symbols (for `%pS`) and
    /// the `trace_printk` formats. Built from `symbols` and
    /// `printk_formats` as they are now; the layouts build it once per
    /// print.
    pub(crate) fn print_tables(&self) -> Tables {
        Tables::new(
            cfg!(target_endian = "big"),
            core::mem::size_of::<usize>(),
            Kallsyms::parse(&self.symbols.to_kallsyms()),
            self.printk_formats.iter().map(|(a, f)| (*a, f.clone())),
        )
    }

    /// The format of the event called `name`.
    pub fn event_named(&self, name: &str) -> Option<&EventFormat> {
        self.events.values().find(|e| e.name == name)
    }

    /// Merges per-CPU streams into `entries`, ordered by time stamp (ties
    /// by CPU, as ftrace's iterator does). Each stream is in its own order.
    pub(crate) fn merge(&mut self, per_cpu: Vec<Vec<Entry>>) {
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
        read_int(field_like(event, name)?, &record.payload)
    }
}
