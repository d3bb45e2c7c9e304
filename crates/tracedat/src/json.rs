//! Chrome's Trace Event Format (the JSON that Perfetto's UI and
//! `chrome://tracing` open), written from any trace.dat while it is read.
//!
//! Each record becomes one event on its task's track (`pid` and `tid` are
//! the record's `common_pid`: trace.dat keeps no thread-group ids for
//! events): an instant (`"ph":"i"`) named after the event, its fields as
//! `args`, plus `common_cpu`; function_graph's `funcgraph_entry` and
//! `funcgraph_exit` open and close a slice (`"B"`, `"E"`) named after the
//! function. `sched_switch` also draws what each CPU ran as complete
//! slices (`"X"`) on a process named `CPUs`, one thread per CPU, and lost
//! events show there as instants. A stack trace (`kernel_stack`) also
//! lists its frames by name (`frames`), from the file's kallsyms. Task
//! names come last, as metadata (`"M"`) events.
//!
//! This is hotkern's one Chrome JSON exporter: `hotkern trace demo` writes
//! its `trace.json` by exporting the trace.dat it has just written.
//!
//! The format is Google's "Trace Event Format" document (the JSON Object
//! Format): `ts` and `dur` in microseconds, here with three decimals so no
//! nanosecond is lost.
//!
//! ```no_run
//! use hotkern_tracedat::{json, ReportOptions, TraceFile};
//!
//! let mut file = TraceFile::open("trace.dat")?;
//! let out = std::fs::File::create("trace.json")?;
//! let mut out = std::io::BufWriter::new(out);
//! let summary = json::write_chrome_json(&mut file, &ReportOptions::default(), &mut out)?;
//! eprintln!("{} events", summary.records);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;
use std::io::Write;

use crate::error::Result;
use crate::format::{EventFormat, Field, FieldKind};
use crate::input::read_uint;
use crate::report::{ReportOptions, ReportSummary};
use crate::stream::{Lost, Record};
use crate::symbols::Kallsyms;
use crate::{Printer, TraceFile};

/// The `pid` of the per-CPU tracks: above Linux's `PID_MAX_LIMIT` (2^22),
/// so no task shares it.
pub const CPUS_PID: i64 = 1 << 30;

/// Numbers beyond this lose precision as JavaScript doubles; they are
/// written as hexadecimal strings.
const EXACT_IN_JS: u64 = 1 << 53;

/// Writes `file` as Chrome trace JSON to `out`, one record at a time.
/// `opts.cpu` and `opts.events` select records as for
/// [`crate::write_report`] (so `records` in the summary is the number of
/// lines that report would print); `opts.nanoseconds` does not apply.
/// When a record cannot be read, the document is closed after the events
/// before it and the error returned.
///
/// ```
/// # let path = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/corpus/sched.v6.dat");
/// let mut file = hotkern_tracedat::TraceFile::open(path)?;
/// let opts = hotkern_tracedat::ReportOptions { events: Some("sched_switch".into()), ..Default::default() };
/// let mut out = Vec::new();
/// let summary = hotkern_tracedat::json::write_chrome_json(&mut file, &opts, &mut out)?;
/// let text = String::from_utf8(out).unwrap();
/// assert!(text.starts_with("{\"traceEvents\":["));
/// assert!(summary.records > 0);
/// # Ok::<(), hotkern_tracedat::Error>(())
/// ```
pub fn write_chrome_json(
    file: &mut TraceFile,
    opts: &ReportOptions,
    out: &mut dyn Write,
) -> Result<ReportSummary> {
    let (mut records, printer) = file.reader()?;
    let mut writer = JsonWriter {
        printer,
        out,
        line: String::new(),
        first: true,
        tasks: BTreeSet::new(),
        running: HashMap::new(),
    };
    writer.out.write_all(b"{\"traceEvents\":[")?;
    let mut summary = ReportSummary::default();
    // A record that cannot be read ends the export, but the document is
    // still closed: what was read stays a trace that opens.
    let mut failed = None;
    for record in records.by_ref() {
        let record = match record {
            Ok(record) => record,
            Err(e) => {
                failed = Some(e);
                break;
            }
        };
        let event = printer.event_of(&record);
        if !opts.selects(record.cpu, event) {
            continue;
        }
        writer.record(&record, event)?;
        summary.records += 1;
    }
    summary.corrupt_pages = records.corrupt_pages();
    writer.finish()?;
    match failed {
        Some(e) => Err(e),
        None => Ok(summary),
    }
}

struct JsonWriter<'a, 'o> {
    printer: Printer<'a>,
    out: &'o mut dyn Write,
    /// The event being built.
    line: String,
    first: bool,
    /// Tasks seen, named at the end.
    tasks: BTreeSet<i32>,
    /// Per CPU, since when and what it has run (from `sched_switch`).
    running: HashMap<u32, (u64, String, i64)>,
}

impl JsonWriter<'_, '_> {
    /// Ends the event in `line` and writes it.
    fn emit(&mut self) -> Result<()> {
        self.line.push('}');
        let sep: &[u8] = if self.first { b"\n" } else { b",\n" };
        self.first = false;
        self.out.write_all(sep)?;
        self.out.write_all(self.line.as_bytes())?;
        self.line.clear();
        Ok(())
    }

    fn record(&mut self, record: &Record, event: Option<&EventFormat>) -> Result<()> {
        if let Some(Lost::Events(count)) = record.lost_before {
            self.line.push_str("{\"name\":\"events dropped\",\"cat\":\"tracedat\",\"ph\":\"i\",\"s\":\"t\",\"ts\":");
            push_us(&mut self.line, record.timestamp);
            let _ = write!(
                self.line,
                ",\"pid\":{CPUS_PID},\"tid\":{},\"args\":{{\"count\":",
                record.cpu
            );
            match count {
                Some(n) => {
                    let _ = write!(self.line, "{n}}}");
                }
                None => self.line.push_str("null}"),
            }
            self.emit()?;
        }
        let pid = self.printer.pid_of(record);
        self.tasks.insert(pid);
        let data = &record.data[..];
        let big = self.printer.big_endian();
        let line = &mut self.line;
        line.push_str("{\"name\":");
        let Some(e) = event else {
            let id = read_uint(data, big, 2).unwrap_or(0);
            let _ = write!(
                line,
                "\"unknown event {id}\",\"cat\":\"unknown\",\"ph\":\"i\",\"s\":\"t\",\"ts\":"
            );
            push_us(line, record.timestamp);
            let _ = write!(
                line,
                ",\"pid\":{pid},\"tid\":{pid},\"args\":{{\"common_cpu\":{}}}",
                record.cpu
            );
            return self.emit();
        };
        let graph = match (e.system.as_str(), e.name.as_str()) {
            ("ftrace", "funcgraph_entry") => Some('B'),
            ("ftrace", "funcgraph_exit") => Some('E'),
            _ => None,
        };
        match graph.and_then(|_| e.field("func")?.read_u64(data, big)) {
            Some(func) => match self.printer.meta.kallsyms.lookup(func) {
                Some((sym, start)) if start == func => push_str(line, sym),
                _ => push_str(line, &format!("0x{func:x}")),
            },
            None => push_str(line, &e.name),
        }
        line.push_str(",\"cat\":");
        push_str(line, &e.system);
        match graph {
            Some(ph) => {
                let _ = write!(line, ",\"ph\":\"{ph}\",\"ts\":");
            }
            None => line.push_str(",\"ph\":\"i\",\"s\":\"t\",\"ts\":"),
        }
        push_us(line, record.timestamp);
        let _ = write!(
            line,
            ",\"pid\":{pid},\"tid\":{pid},\"args\":{{\"common_cpu\":{}",
            record.cpu
        );
        let buffer = self.printer.buffer_name(record.buffer);
        if !buffer.is_empty() {
            line.push_str(",\"common_buffer\":");
            push_str(line, buffer);
        }
        let long_size = usize::from(self.printer.meta.long_size);
        for field in &e.fields {
            line.push(',');
            push_str(line, &field.name);
            line.push(':');
            push_field(line, field, data, big, long_size);
        }
        if e.system == "ftrace" && e.name == "kernel_stack" {
            push_frames(line, e, data, (big, long_size), &self.printer.meta.kallsyms);
        }
        line.push('}');
        self.emit()?;
        if e.system == "sched" && e.name == "sched_switch" {
            self.switch(record, e)?;
        }
        Ok(())
    }

    /// Closes the slice of what the CPU ran until this switch and opens
    /// the next task's.
    fn switch(&mut self, record: &Record, e: &EventFormat) -> Result<()> {
        let big = self.printer.big_endian();
        let data = &record.data[..];
        let text = |name: &str| {
            e.field(name)
                .map_or(String::new(), |f| field_text(f, data, big))
        };
        let number = |name: &str| {
            e.field(name)
                .and_then(|f| f.read_u64(data, big))
                .map_or(0, |v| sign_extend(v, 4))
        };
        let next = (record.timestamp, text("next_comm"), number("next_pid"));
        let Some((start, comm, pid)) = self.running.insert(record.cpu, next) else {
            return Ok(());
        };
        // The idle task's time shows as a gap.
        if pid == 0 || record.timestamp < start {
            return Ok(());
        }
        let line = &mut self.line;
        line.push_str("{\"name\":");
        push_str(line, &comm);
        line.push_str(",\"cat\":\"sched\",\"ph\":\"X\",\"ts\":");
        push_us(line, start);
        line.push_str(",\"dur\":");
        push_us(line, record.timestamp - start);
        let _ = write!(
            line,
            ",\"pid\":{CPUS_PID},\"tid\":{},\"args\":{{\"pid\":{pid}}}",
            record.cpu
        );
        self.emit()
    }

    /// Names the tasks and the CPU tracks, and ends the document.
    fn finish(mut self) -> Result<()> {
        let tasks = std::mem::take(&mut self.tasks);
        for pid in tasks {
            let comm = self.printer.comm(pid);
            for kind in ["process_name", "thread_name"] {
                let _ = write!(
                    self.line,
                    "{{\"name\":\"{kind}\",\"ph\":\"M\",\"pid\":{pid},\"tid\":{pid},\"args\":{{\"name\":"
                );
                push_str(&mut self.line, comm);
                self.line.push('}');
                self.emit()?;
            }
        }
        let mut cpus: Vec<u32> = self.running.keys().copied().collect();
        cpus.sort_unstable();
        if !cpus.is_empty() {
            let _ = write!(self.line, "{{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":{CPUS_PID},\"tid\":0,\"args\":{{\"name\":\"CPUs\"}}");
            self.emit()?;
        }
        for cpu in cpus {
            let _ = write!(self.line, "{{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":{CPUS_PID},\"tid\":{cpu},\"args\":{{\"name\":\"CPU {cpu}\"}}");
            self.emit()?;
        }
        self.out.write_all(b"\n],\"displayTimeUnit\":\"ns\"}\n")?;
        self.out.flush()?;
        Ok(())
    }
}

/// A stack trace's frames by name, innermost first, as `"frames":[..]`,
/// so a viewer need not look the `caller` addresses up: `size` of them (as
/// Linux's `kernel_stack` counts them) as far as the record reaches, up to
/// the first 0 or `ULONG_MAX`
/// (ftrace's end markers), each named by the file's kallsyms as trace-cmd
/// names a `%pS` frame (the symbol at or below, no offset), in hexadecimal
/// where none is.
fn push_frames(
    line: &mut String,
    e: &EventFormat,
    data: &[u8],
    (big, long_size): (bool, usize),
    syms: &Kallsyms,
) {
    let Some(caller) = e.field("caller") else {
        return;
    };
    let each = caller.element_size(long_size);
    if !matches!(each, 4 | 8) {
        return;
    }
    let count = e
        .field("size")
        .and_then(|f| f.read_u64(data, big))
        .map_or(usize::MAX, |n| n as u32 as usize);
    let end_marker = if each == 4 {
        u64::from(u32::MAX)
    } else {
        u64::MAX
    };
    line.push_str(",\"frames\":[");
    // Linux sizes the record to the frames (`__stack_array`): they may run
    // past the declared `caller[8]`, to the record's end.
    let frames = data
        .get(caller.offset..)
        .unwrap_or_default()
        .chunks_exact(each)
        .take(count)
        .map_while(|chunk| read_uint(chunk, big, each))
        .take_while(|&address| address != 0 && address != end_marker);
    for (i, address) in frames.enumerate() {
        if i > 0 {
            line.push(',');
        }
        match syms.lookup(address) {
            Some((name, _)) => push_str(line, name),
            None => push_str(line, &format!("0x{address:x}")),
        }
    }
    line.push(']');
}

/// A time in nanoseconds as microseconds with three decimals.
fn push_us(line: &mut String, ns: u64) {
    let _ = write!(line, "{}.{:03}", ns / 1000, ns % 1000);
}

/// A JSON string: quotes, backslashes and control characters escaped
/// (RFC 8259, section 7).
fn push_str(line: &mut String, s: &str) {
    line.push('"');
    for c in s.chars() {
        match c {
            '"' => line.push_str("\\\""),
            '\\' => line.push_str("\\\\"),
            '\n' => line.push_str("\\n"),
            '\r' => line.push_str("\\r"),
            '\t' => line.push_str("\\t"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(line, "\\u{:04x}", u32::from(c));
            }
            c => line.push(c),
        }
    }
    line.push('"');
}

/// `value`, `size` bytes wide, as a signed number.
fn sign_extend(value: u64, size: usize) -> i64 {
    match size {
        1 => value as u8 as i8 as i64,
        2 => value as u16 as i16 as i64,
        4 => value as u32 as i32 as i64,
        _ => value as i64,
    }
}

/// A text field's bytes up to the first NUL, invalid UTF-8 replaced.
fn field_text(field: &Field, data: &[u8], big: bool) -> String {
    let bytes = match field.kind {
        FieldKind::DataLoc | FieldKind::RelLoc => {
            let (offset, len) = field.dynamic_range(data, big);
            data.get(offset..offset + len).unwrap_or(&[])
        }
        _ => fixed_bytes(field, data),
    };
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// A fixed field's bytes; for a flexible array (`char buf[]`, size 0, as
/// ftrace's `print` event declares), the rest of the record.
fn fixed_bytes<'d>(field: &Field, data: &'d [u8]) -> &'d [u8] {
    let end = if field.size == 0 {
        data.len()
    } else {
        field.offset.saturating_add(field.size)
    };
    data.get(field.offset..end).unwrap_or(&[])
}

/// One number: a JSON number when a double holds it exactly, otherwise
/// (kernel addresses, mostly) a hexadecimal string.
fn push_number(line: &mut String, value: u64, size: usize, signed: bool) {
    if signed {
        let v = sign_extend(value, size);
        if v.unsigned_abs() <= EXACT_IN_JS {
            let _ = write!(line, "{v}");
            return;
        }
    } else if value <= EXACT_IN_JS {
        let _ = write!(line, "{value}");
        return;
    }
    let _ = write!(line, "\"0x{value:x}\"");
}

/// A field's value: text for `char` arrays, a list for other arrays, a
/// hexadecimal string for pointers, a number otherwise; `null` when the
/// record is too short to hold it.
fn push_field(line: &mut String, field: &Field, data: &[u8], big: bool, long_size: usize) {
    if field.is_string() {
        return push_str(line, &field_text(field, data, big));
    }
    if field.is_array() {
        let bytes = match field.kind {
            FieldKind::DataLoc | FieldKind::RelLoc => {
                let (offset, len) = field.dynamic_range(data, big);
                data.get(offset..offset + len).unwrap_or(&[])
            }
            _ => fixed_bytes(field, data),
        };
        let each = field.element_size(long_size);
        if !matches!(each, 1 | 2 | 4 | 8) {
            // Elements of no known size: the bytes, in hexadecimal.
            line.push('"');
            for b in bytes {
                let _ = write!(line, "{b:02x}");
            }
            line.push('"');
            return;
        }
        line.push('[');
        for (i, chunk) in bytes.chunks_exact(each).enumerate() {
            if i > 0 {
                line.push(',');
            }
            let value = read_uint(chunk, big, each).unwrap_or(0);
            push_number(line, value, each, field.signed);
        }
        line.push(']');
        return;
    }
    match field.read_u64(data, big) {
        None => line.push_str("null"),
        Some(value) if field.kind == FieldKind::Pointer => {
            let _ = write!(line, "\"0x{value:x}\"");
        }
        Some(value) => push_number(line, value, field.size, field.signed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_escaped() {
        let mut s = String::new();
        push_str(&mut s, "a\"b\\c\nd\u{1}é");
        assert_eq!(s, r#""a\"b\\c\nd\u0001é""#);
    }

    #[test]
    fn large_numbers_become_hex_strings() {
        let mut s = String::new();
        push_number(&mut s, 0xffff_ffff_8100_0000, 8, false);
        push_number(&mut s, u64::MAX, 8, true);
        push_number(&mut s, 0xfe, 1, true);
        assert_eq!(s, "\"0xffffffff81000000\"-1-2");
    }

    /// Linux's `kernel_stack` layout: `size` frames named from kallsyms,
    /// ending at the count or at the `ULONG_MAX` marker, hex when unknown.
    #[test]
    fn stack_frames_are_named() {
        let format = "name: kernel_stack\nID: 4\nformat:\n\
            \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
            \tfield:int size;\toffset:8;\tsize:4;\tsigned:1;\n\
            \tfield:unsigned long caller[8];\toffset:16;\tsize:64;\tsigned:0;\n\n\
            print fmt: \"\\t=> %ps\\n\", (void *)REC->caller[0]\n";
        let e = EventFormat::parse("ftrace", format).unwrap();
        let syms = Kallsyms::parse("1000 T outer\n2000 T inner\n3000 T end\n");
        let frames = |size: i32, callers: &[u64]| {
            let mut data = vec![0u8; 16];
            data[8..12].copy_from_slice(&size.to_le_bytes());
            for slot in 0..callers.len().max(8) {
                let address = callers.get(slot).copied().unwrap_or(u64::MAX);
                data.extend_from_slice(&address.to_le_bytes());
            }
            let mut line = String::new();
            push_frames(&mut line, &e, &data, (false, 8), &syms);
            line
        };
        assert_eq!(
            frames(3, &[0x2010, 0x1004, 0x10]),
            r#","frames":["inner","outer","0x10"]"#
        );
        assert_eq!(frames(1, &[0x2010, 0x1004]), r#","frames":["inner"]"#);
        assert_eq!(frames(8, &[0x3000]), r#","frames":["end"]"#);
        // Past `caller[8]`: as many as `size` says and the record holds.
        let many: Vec<u64> = (0..10).map(|i| 0x1000 + i).collect();
        assert_eq!(frames(9, &many).matches("outer").count(), 9);
    }

    #[test]
    fn times_keep_their_nanoseconds() {
        let mut s = String::new();
        push_us(&mut s, 22_199_313_902_042);
        assert_eq!(s, "22199313902.042");
    }
}
