//! Event formats: the layout of each event's payload, rendered as ftrace's
//! `events/<system>/<event>/format` file, and the built-in `ftrace/*`
//! events with the ids and layouts trace-cmd knows.

use alloc::format;
use alloc::string::String;
use alloc::vec;
use alloc::vec::Vec;
use core::fmt::Write;

/// Bytes of ftrace's common header at the start of every payload.
pub const COMMON_HEADER_SIZE: usize = 8;

/// `common_flags` bit: interrupts were off.
pub const FLAG_IRQS_OFF: u8 = 0x01;
/// `common_flags` bit: recorded from (hard) interrupt context — in user
/// space, from a signal handler nested on a traced thread.
pub const FLAG_HARDIRQ: u8 = 0x08;
/// `common_flags` bit: recorded from soft-interrupt context.
pub const FLAG_SOFTIRQ: u8 = 0x10;
/// `common_flags` bit: recorded from NMI context.
pub const FLAG_NMI: u8 = 0x40;

/// ftrace's id of `ftrace/function`.
pub const FUNCTION_ID: u16 = 1;
/// ftrace's id of `ftrace/kernel_stack` (the `stacktrace` trigger).
pub const KERNEL_STACK_ID: u16 = 4;
/// Return addresses a `kernel_stack` event's format declares (`caller[8]`).
/// A recorded event holds `size` of them, which may be more or fewer: the
/// payload ends after the last one, as in the kernel since it made the
/// stack dynamic.
pub const KERNEL_STACK_ENTRIES: usize = 8;
/// Offset of the first return address in a `kernel_stack` payload.
pub const KERNEL_STACK_CALLER_OFFSET: usize = 16;
/// ftrace's id of `ftrace/print` (`trace_marker`).
pub const PRINT_ID: u16 = 5;
/// ftrace's id of `ftrace/bprint` (`trace_printk`).
pub const BPRINT_ID: u16 = 6;
/// ftrace's id of `ftrace/funcgraph_exit`.
pub const FUNCGRAPH_EXIT_ID: u16 = 10;
/// ftrace's id of `ftrace/funcgraph_entry`.
pub const FUNCGRAPH_ENTRY_ID: u16 = 11;
/// ftrace's id of `ftrace/hwlat`.
pub const HWLAT_ID: u16 = 15;
/// First id given to events defined with [`define_event!`](crate::define_event).
pub const FIRST_DYNAMIC_ID: u16 = 100;

/// One field of an event's payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Field {
    /// The field name (for arrays without the `[N]`).
    pub(crate) name: String,
    /// The C type as ftrace prints it, e.g. `unsigned long`, `int`, `char`.
    pub(crate) c_type: String,
    /// `Some(n)` for a fixed array of `n` elements (`char comm[16]`),
    /// `Some(0)` for a trailing dynamic array (`char buf[]`).
    pub(crate) array: Option<usize>,
    /// Byte offset in the payload (the common header is at 0..8).
    pub(crate) offset: usize,
    /// Size in bytes (0 for a trailing dynamic array).
    pub(crate) size: usize,
    /// Whether the value is signed.
    pub(crate) signed: bool,
}

impl Field {
    /// A scalar field.
    pub(crate) fn scalar(
        name: &str,
        c_type: &str,
        offset: usize,
        size: usize,
        signed: bool,
    ) -> Self {
        Field {
            name: name.into(),
            c_type: c_type.into(),
            array: None,
            offset,
            size,
            signed,
        }
    }

    /// An array field (`len` elements; 0 = trailing dynamic array).
    pub(crate) fn array(name: &str, c_type: &str, len: usize, offset: usize, size: usize) -> Self {
        Field {
            name: name.into(),
            c_type: c_type.into(),
            array: Some(len),
            offset,
            size,
            signed: c_type == "char",
        }
    }

    /// The declaration as in a format file, e.g. `char comm[16]`.
    pub(crate) fn declaration(&self) -> String {
        match self.array {
            None => format!("{} {}", self.c_type, self.name),
            Some(0) => format!("{} {}[]", self.c_type, self.name),
            Some(n) => format!("{} {}[{}]", self.c_type, self.name, n),
        }
    }
}

/// The layout and print format of one event, as the recorder generates
/// it: [`to_format_file`](EventFormat::to_format_file) gives the text of its
/// `format` file, which [`hotkern_tracedat::EventFormat::parse`] reads back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventFormat {
    /// The event id (`common_type`).
    pub(crate) id: u16,
    /// The system (directory under `events/`), e.g. `ftrace`, `sched`.
    pub(crate) system: String,
    /// The event's name within its system (`events/<system>/<name>`).
    pub(crate) name: String,
    /// The event's own fields (after the common header), in offset order.
    pub(crate) fields: Vec<Field>,
    /// ftrace's `print fmt:` text: a quoted format then `REC->field` args.
    pub(crate) print_fmt: String,
}

impl EventFormat {
    /// The event id (`common_type`).
    pub fn id(&self) -> u16 {
        self.id
    }

    /// The system (directory under `events/`), e.g. `ftrace`, `sched`.
    pub fn system(&self) -> &str {
        &self.system
    }

    /// The event's name within its system (`events/<system>/<name>`).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The four common fields every event starts with.
    pub(crate) fn common_fields() -> Vec<Field> {
        vec![
            Field::scalar("common_type", "unsigned short", 0, 2, false),
            Field::scalar("common_flags", "unsigned char", 2, 1, false),
            Field::scalar("common_preempt_count", "unsigned char", 3, 1, false),
            Field::scalar("common_pid", "int", 4, 4, true),
        ]
    }

    /// The field called `name`, common fields included.
    #[cfg(test)]
    pub(crate) fn field(&self, name: &str) -> Option<Field> {
        Self::common_fields()
            .into_iter()
            .chain(self.fields.iter().cloned())
            .find(|f| f.name == name)
    }

    /// The text of ftrace's `format` file for this event.
    ///
    /// ```
    /// hotkern_trace::define_event! {
    ///     /// A block was read.
    ///     pub block_read in demo { sector: u64, len: u32 }
    ///     print "sector=%llu len=%u", sector, len
    /// }
    ///
    /// let text = block_read::EVENT.format().to_format_file();
    /// assert!(text.starts_with("name: block_read\nID: "));
    /// assert!(text.contains("\tfield:u64 sector;\toffset:8;\tsize:8;\tsigned:0;\n"));
    /// assert!(text.ends_with("print fmt: \"sector=%llu len=%u\", REC->sector, REC->len\n"));
    /// ```
    pub fn to_format_file(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "name: {}", self.name);
        let _ = writeln!(out, "ID: {}", self.id);
        out.push_str("format:\n");
        for field in Self::common_fields() {
            write_field(&mut out, &field);
        }
        out.push('\n');
        for field in &self.fields {
            write_field(&mut out, field);
        }
        let _ = writeln!(out, "\nprint fmt: {}", self.print_fmt);
        out
    }

    /// Bytes of a payload with every fixed field (no dynamic tail).
    #[cfg(test)]
    pub(crate) fn fixed_size(&self) -> usize {
        self.fields
            .iter()
            .map(|f| f.offset + f.size)
            .max()
            .unwrap_or(COMMON_HEADER_SIZE)
            .max(COMMON_HEADER_SIZE)
    }
}

fn write_field(out: &mut String, field: &Field) {
    let _ = writeln!(
        out,
        "\tfield:{};\toffset:{};\tsize:{};\tsigned:{};",
        field.declaration(),
        field.offset,
        field.size,
        u8::from(field.signed)
    );
}

/// `ftrace/function`: `ip`, `parent_ip`.
pub(crate) fn function_format() -> EventFormat {
    EventFormat {
        id: FUNCTION_ID,
        system: "ftrace".into(),
        name: "function".into(),
        fields: vec![
            Field::scalar("ip", "unsigned long", 8, 8, false),
            Field::scalar("parent_ip", "unsigned long", 16, 8, false),
        ],
        print_fmt: "\" %ps <-- %ps\", (void *)REC->ip, (void *)REC->parent_ip".into(),
    }
}

/// `ftrace/funcgraph_entry`: `func`, `depth`.
pub(crate) fn funcgraph_entry_format() -> EventFormat {
    EventFormat {
        id: FUNCGRAPH_ENTRY_ID,
        system: "ftrace".into(),
        name: "funcgraph_entry".into(),
        fields: vec![
            Field::scalar("func", "unsigned long", 8, 8, false),
            Field::scalar("depth", "int", 16, 4, true),
        ],
        print_fmt: "\"--> %ps (%d)\", (void *)REC->func, REC->depth".into(),
    }
}

/// `ftrace/funcgraph_exit`: `func`, `depth`, `overrun`, `calltime`, `rettime`.
pub(crate) fn funcgraph_exit_format() -> EventFormat {
    EventFormat {
        id: FUNCGRAPH_EXIT_ID,
        system: "ftrace".into(),
        name: "funcgraph_exit".into(),
        fields: vec![
            Field::scalar("func", "unsigned long", 8, 8, false),
            Field::scalar("depth", "int", 16, 4, true),
            Field::scalar("overrun", "unsigned int", 20, 4, false),
            Field::scalar("calltime", "unsigned long long", 24, 8, false),
            Field::scalar("rettime", "unsigned long long", 32, 8, false),
        ],
        print_fmt: "\"<-- %ps (%d) (start: %llx  end: %llx) over: %d\", (void *)REC->func, REC->depth, REC->calltime, REC->rettime, REC->depth".into(),
    }
}

/// `ftrace/kernel_stack`: `size` return addresses (`caller`), innermost
/// first, after a 4-byte hole that keeps them 8-byte aligned.
///
/// ```
/// let format = hotkern_trace::internals::builtin_formats().into_iter().find(|f| f.name() == "kernel_stack").unwrap();
/// let text = format.to_format_file();
/// assert!(text.starts_with("name: kernel_stack\nID: 4\n"));
/// assert!(text.contains("\tfield:unsigned long caller[8];\toffset:16;\tsize:64;\tsigned:0;\n"));
/// ```
pub(crate) fn kernel_stack_format() -> EventFormat {
    let mut print_fmt = String::from("\"");
    for _ in 0..KERNEL_STACK_ENTRIES {
        print_fmt.push_str("\\t=> %ps\\n");
    }
    print_fmt.push('"');
    for index in 0..KERNEL_STACK_ENTRIES {
        let _ = write!(print_fmt, ", (void *)REC->caller[{index}]");
    }
    EventFormat {
        id: KERNEL_STACK_ID,
        system: "ftrace".into(),
        name: "kernel_stack".into(),
        fields: vec![
            Field::scalar("size", "int", 8, 4, true),
            Field::array(
                "caller",
                "unsigned long",
                KERNEL_STACK_ENTRIES,
                KERNEL_STACK_CALLER_OFFSET,
                8 * KERNEL_STACK_ENTRIES,
            ),
        ],
        print_fmt,
    }
}

/// `ftrace/print` (`trace_marker` writes): `ip`, then the NUL-terminated text.
pub(crate) fn print_format() -> EventFormat {
    EventFormat {
        id: PRINT_ID,
        system: "ftrace".into(),
        name: "print".into(),
        fields: vec![
            Field::scalar("ip", "unsigned long", 8, 8, false),
            Field::array("buf", "char", 0, 16, 0),
        ],
        print_fmt: "\"%ps: %s\", (void *)REC->ip, REC->buf".into(),
    }
}

/// `ftrace/bprint` (`trace_printk`): `ip`, the format's address, then the
/// binary arguments (see [`crate::printk`]).
pub(crate) fn bprint_format() -> EventFormat {
    EventFormat {
        id: BPRINT_ID,
        system: "ftrace".into(),
        name: "bprint".into(),
        fields: vec![
            Field::scalar("ip", "unsigned long", 8, 8, false),
            Field::scalar("fmt", "const char *", 16, 8, false),
            Field::array("buf", "u32", 0, 24, 0),
        ],
        print_fmt: "\"%ps: %s\", (void *)REC->ip, REC->fmt".into(),
    }
}

/// `ftrace/hwlat`: one latency sample of the hwlat detector.
pub(crate) fn hwlat_format() -> EventFormat {
    EventFormat {
        id: HWLAT_ID,
        system: "ftrace".into(),
        name: "hwlat".into(),
        fields: vec![
            Field::scalar("duration", "u64", 8, 8, false),
            Field::scalar("outer_duration", "u64", 16, 8, false),
            Field::scalar("nmi_total_ts", "u64", 24, 8, false),
            Field::scalar("timestamp", "u64", 32, 8, false),
            Field::scalar("nmi_count", "unsigned int", 40, 4, false),
            Field::scalar("seqnum", "unsigned int", 44, 4, false),
            Field::scalar("count", "unsigned int", 48, 4, false),
        ],
        print_fmt: "\"cnt:%u\\tts:%010llu.%010lu\\tinner:%llu\\touter:%llu\\tcount:%d\\tnmi-ts:%llu\\tnmi-count:%u\\n\", REC->seqnum, REC->timestamp / 1000000000, REC->timestamp % 1000000000, REC->duration, REC->outer_duration, REC->count, REC->nmi_total_ts, REC->nmi_count".into(),
    }
}

/// Every built-in `ftrace/*` event format.
pub fn builtin_formats() -> Vec<EventFormat> {
    vec![
        function_format(),
        kernel_stack_format(),
        print_format(),
        bprint_format(),
        funcgraph_exit_format(),
        funcgraph_entry_format(),
        hwlat_format(),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_ids_are_distinct_and_layouts_do_not_overlap() {
        let formats = builtin_formats();
        let mut ids: Vec<u16> = formats.iter().map(|f| f.id).collect();
        ids.sort_unstable();
        ids.dedup();
        assert_eq!(ids.len(), formats.len());
        for format in &formats {
            let mut end = COMMON_HEADER_SIZE;
            for field in &format.fields {
                assert!(
                    field.offset >= end,
                    "{}.{} overlaps",
                    format.name,
                    field.name
                );
                end = field.offset + field.size;
            }
        }
    }

    #[test]
    fn format_file_matches_ftrace_layout() {
        let text = funcgraph_exit_format().to_format_file();
        let expected = "name: funcgraph_exit\nID: 10\nformat:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\
\tfield:unsigned long func;\toffset:8;\tsize:8;\tsigned:0;\n\
\tfield:int depth;\toffset:16;\tsize:4;\tsigned:1;\n\
\tfield:unsigned int overrun;\toffset:20;\tsize:4;\tsigned:0;\n\
\tfield:unsigned long long calltime;\toffset:24;\tsize:8;\tsigned:0;\n\
\tfield:unsigned long long rettime;\toffset:32;\tsize:8;\tsigned:0;\n\n\
print fmt: \"<-- %ps (%d) (start: %llx  end: %llx) over: %d\", (void *)REC->func, REC->depth, REC->calltime, REC->rettime, REC->depth\n";
        assert_eq!(text, expected);
        assert!(print_format()
            .to_format_file()
            .contains("\tfield:char buf[];\toffset:16;\tsize:0;\tsigned:1;\n"));
        assert_eq!(function_format().field("common_pid").unwrap().offset, 4);
        assert_eq!(function_format().fixed_size(), 24);
    }
}
