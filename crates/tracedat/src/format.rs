//! Event formats: the `format` files of tracefs (`name:`, `ID:`, the field
//! lines and `print fmt:`), read as libtraceevent reads them.

#[allow(unused_imports)]
use crate::prelude::*;

use crate::print::PrintFmt;

/// One field of an event record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    /// The field's name (`prev_comm`).
    pub name: String,
    /// Its C type as declared, without the name (`char[16]`, `__data_loc char[]`).
    pub type_name: String,
    /// Byte offset in the record.
    pub offset: usize,
    /// Size in bytes (for `__data_loc`, the size of the offset/length word).
    pub size: usize,
    /// `signed:1`.
    pub signed: bool,
    /// Element count of a fixed array (`[16]`); 0 when not a fixed array.
    pub array_len: usize,
    /// What kind of field this is.
    pub kind: FieldKind,
}

/// How a field's bytes are to be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldKind {
    /// A plain number.
    Scalar,
    /// A pointer (the type ends in `*`).
    Pointer,
    /// A fixed-size array (`char comm[16]`, `unsigned long args[6]`).
    Array,
    /// A `__data_loc` field: a 32-bit word holding `len << 16 | offset`.
    DataLoc,
    /// A `__rel_loc` field: as `__data_loc`, the offset counted from the
    /// end of the field.
    RelLoc,
}

impl Field {
    /// Whether libtraceevent would treat this field as text: an array of
    /// `char`, `u8` or `s8`.
    pub fn is_string(&self) -> bool {
        self.is_array()
            && ["char", "u8", "s8"]
                .iter()
                .any(|t| self.type_name.contains(t))
    }

    /// Fixed or dynamic array.
    pub fn is_array(&self) -> bool {
        matches!(
            self.kind,
            FieldKind::Array | FieldKind::DataLoc | FieldKind::RelLoc
        ) || self.type_name.contains('[')
    }

    /// Whether the C type mentions `long` (libtraceevent prints raw longs in hex).
    pub fn is_long(&self) -> bool {
        self.type_name.contains("long")
    }

    /// Size of one element, as libtraceevent works it out: a fixed array's
    /// size over its length; for a dynamic array its element type's size
    /// if that is a `u8`..`s64` or `char` (0 otherwise); for `char x[]`, 1;
    /// for `long x[]`, `long_size`; for anything else the field's size.
    pub fn element_size(&self, long_size: usize) -> usize {
        if !self.is_array() {
            return self.size;
        }
        if let Some(each) = self.size.checked_div(self.array_len) {
            each
        } else if matches!(self.kind, FieldKind::DataLoc | FieldKind::RelLoc) {
            c_type_size(&self.type_name)
        } else if self.is_string() {
            1
        } else if self.is_long() {
            long_size
        } else {
            0
        }
    }

    /// The field as an unsigned number, if it lies within `data`.
    pub fn read_u64(&self, data: &[u8], big_endian: bool) -> Option<u64> {
        read_uint(data.get(self.offset..)?, big_endian, self.size)
    }

    /// Where a dynamic field's bytes are: `(offset, len)` within `data`,
    /// both 0 when they would fall outside it (as libtraceevent does).
    pub fn dynamic_range(&self, data: &[u8], big_endian: bool) -> (usize, usize) {
        let Some(word) = self.read_u64(data, big_endian) else {
            return (0, 0);
        };
        let stored = (word & 0xffff) as usize;
        let mut len = if self.size == 2 {
            data.len().saturating_sub(stored)
        } else {
            ((word >> 16) & 0xffff) as usize
        };
        // Both checks use the offset as stored, as libtraceevent's do: an
        // offset past the record yields offset 0 and length 0.
        if stored + len > data.len() {
            len = 0;
        }
        let mut offset = if stored > data.len() { 0 } else { stored };
        if self.kind == FieldKind::RelLoc {
            offset = offset.saturating_add(self.offset).saturating_add(self.size);
            if offset.saturating_add(len) > data.len() {
                return (0, 0);
            }
        }
        (offset, len)
    }
}

/// The size of a C scalar type, for elements of dynamic arrays.
fn c_type_size(type_name: &str) -> usize {
    let base = type_name.split('[').next().unwrap_or("");
    match base.split_whitespace().last().unwrap_or("") {
        "u8" | "s8" | "char" => 1,
        "u16" | "s16" => 2,
        "u32" | "s32" => 4,
        "u64" | "s64" => 8,
        _ => 0,
    }
}

/// An event's format: its identity, fields and print format.
#[derive(Clone, Debug, Default)]
pub struct EventFormat {
    /// The event's id (`ID:` line), which records carry in `common_type`.
    pub id: u32,
    /// The subsystem (`sched`), or `ftrace` for ftrace's own events.
    pub system: String,
    /// The event's name (`sched_switch`).
    pub name: String,
    /// The `common_*` fields every event starts with.
    pub common_fields: Vec<Field>,
    /// The event's own fields, in order.
    pub fields: Vec<Field>,
    /// The `print fmt:` text as written in the file.
    pub print_text: String,
    pub(crate) print: Option<PrintFmt>,
}

/// Why a `format` text gives no event: what is missing or, for a line
/// that is there but malformed, its 1-based line number.
///
/// ```
/// use hotkern_tracedat::{EventFormat, FormatError};
///
/// let error = EventFormat::parse("demo", "name: x\nID: many\n").unwrap_err();
/// assert_eq!(error, FormatError::BadId { line: 2 });
/// assert_eq!(error.to_string(), "event format, line 2: bad ID");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FormatError {
    /// No `name:` line.
    MissingName,
    /// No `ID:` line.
    MissingId,
    /// An `ID:` line whose value is not a number.
    BadId {
        /// 1-based line number.
        line: usize,
    },
    /// A `field:` line without a name, an `offset:` or a `size:`.
    BadField {
        /// 1-based line number.
        line: usize,
    },
}

impl core::fmt::Display for FormatError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            FormatError::MissingName => f.write_str("event format: no name line"),
            FormatError::MissingId => f.write_str("event format: no ID line"),
            FormatError::BadId { line } => write!(f, "event format, line {line}: bad ID"),
            FormatError::BadField { line } => {
                write!(f, "event format, line {line}: bad field line")
            }
        }
    }
}

impl core::error::Error for FormatError {}

impl EventFormat {
    /// Parses one `format` file's text. A malformed `ID:` or `field:` line,
    /// or a missing name or ID, is an error (libtraceevent fails such an
    /// event too); lines the parser does not know are skipped, as
    /// libtraceevent skips them. (Reading a file, `TraceFile`
    /// keeps an event with a bad `field:` line, as trace-cmd does: its
    /// records print as `[FAILED TO PARSE]` and the fields before that line.)
    ///
    /// ```
    /// let text = "name: demo\nID: 7\nformat:\n\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\n\tfield:int value;\toffset:8;\tsize:4;\tsigned:1;\n\nprint fmt: \"value=%d\", REC->value\n";
    /// let event = hotkern_tracedat::EventFormat::parse("demo", text).unwrap();
    /// assert_eq!(event.id, 7);
    /// assert_eq!(event.fields[0].name, "value");
    /// ```
    pub fn parse(system: &str, text: &str) -> Result<EventFormat, FormatError> {
        Self::parse_lines(system, text, false)
    }

    /// Parses a format as libtraceevent does when it loads a file: a
    /// malformed `field:` line ends the format there instead of failing
    /// it, and the event is kept without a print format, its own fields
    /// read so far printed after `[FAILED TO PARSE]` (libtraceevent's
    /// `TEP_EVENT_FL_FAILED` events, as `trace-cmd report` prints them).
    #[cfg(feature = "std")]
    pub(crate) fn parse_keeping_failed(
        system: &str,
        text: &str,
    ) -> Result<EventFormat, FormatError> {
        Self::parse_lines(system, text, true)
    }

    fn parse_lines(
        system: &str,
        text: &str,
        keep_failed: bool,
    ) -> Result<EventFormat, FormatError> {
        let mut name = None;
        let mut id = None;
        let mut common = Vec::new();
        let mut fields = Vec::new();
        let mut print_text = String::new();
        for (index, line) in text.lines().enumerate() {
            let line_number = index + 1;
            let trimmed = line.trim();
            if let Some(rest) = trimmed.strip_prefix("name:") {
                name = Some(rest.trim().to_string());
            } else if let Some(rest) = trimmed.strip_prefix("ID:") {
                let value = rest.trim().parse::<u32>();
                id = Some(value.map_err(|_| FormatError::BadId { line: line_number })?);
            } else if trimmed.starts_with("field:") {
                let Some(field) = parse_field(trimmed) else {
                    if keep_failed {
                        // libtraceevent's event_read_format stops at the
                        // line it cannot read; the print format after it
                        // is never parsed.
                        break;
                    }
                    return Err(FormatError::BadField { line: line_number });
                };
                if field.name.starts_with("common_") && fields.is_empty() {
                    common.push(field);
                } else {
                    fields.push(field);
                }
            } else if let Some(rest) = trimmed.strip_prefix("print fmt:") {
                print_text = rest.trim().to_string();
            }
        }
        let mut event = EventFormat {
            id: id.ok_or(FormatError::MissingId)?,
            system: system.to_string(),
            name: name.ok_or(FormatError::MissingName)?,
            common_fields: common,
            fields,
            print_text,
            print: None,
        };
        event.print = PrintFmt::parse(&event.print_text);
        Ok(event)
    }

    /// A field by name, the event's own first, then the common ones.
    pub fn field(&self, name: &str) -> Option<&Field> {
        self.fields
            .iter()
            .chain(&self.common_fields)
            .find(|f| f.name == name)
    }

    /// Every field in the order of the format file: the common ones, then
    /// the event's own.
    pub fn all_fields(&self) -> impl Iterator<Item = &Field> {
        self.common_fields.iter().chain(&self.fields)
    }
}

/// `field:TYPE NAME[N];\toffset:O;\tsize:S;\tsigned:G;`, also the
/// field lines of `header_page`.
pub(crate) fn parse_field(line: &str) -> Option<Field> {
    let mut parts = line.split(';').map(str::trim);
    let decl = parts.next()?.strip_prefix("field:")?.trim();
    let mut offset = None;
    let mut size = None;
    let mut signed = false;
    for part in parts {
        if let Some(v) = part.strip_prefix("offset:") {
            offset = v.trim().parse().ok();
        } else if let Some(v) = part.strip_prefix("size:") {
            size = v.trim().parse().ok();
        } else if let Some(v) = part.strip_prefix("signed:") {
            signed = v.trim() == "1";
        }
    }
    // The name is the last identifier; an array suffix may follow it.
    let (head, array) = match decl.rfind('[') {
        Some(open) if decl.ends_with(']') && !decl[..open].ends_with(' ') => {
            (&decl[..open], Some(&decl[open + 1..decl.len() - 1]))
        }
        _ => (decl, None),
    };
    let split = head.rfind([' ', '*'])?;
    let name = head[split + 1..].to_string();
    let mut type_name = head[..=split].trim().to_string();
    let mut array_len = 0;
    if let Some(len) = array {
        type_name.push('[');
        type_name.push_str(len);
        type_name.push(']');
        array_len = len.trim().parse().unwrap_or(0);
    }
    let kind = if type_name.starts_with("__data_loc") {
        FieldKind::DataLoc
    } else if type_name.starts_with("__rel_loc") {
        FieldKind::RelLoc
    } else if array.is_some() {
        FieldKind::Array
    } else if type_name.ends_with('*') {
        FieldKind::Pointer
    } else {
        FieldKind::Scalar
    };
    Some(Field {
        name,
        type_name,
        offset: offset?,
        size: size?,
        signed,
        array_len,
        kind,
    })
}

/// Reads an unsigned integer of `size` bytes (1, 2, 4 or 8) from `data`.
pub(crate) fn read_uint(data: &[u8], big_endian: bool, size: usize) -> Option<u64> {
    let bytes = data.get(..size)?;
    let mut v: u64 = 0;
    match size {
        1 | 2 | 4 | 8 => {}
        _ => return None,
    }
    if big_endian {
        for &b in bytes {
            v = (v << 8) | u64::from(b);
        }
    } else {
        for &b in bytes.iter().rev() {
            v = (v << 8) | u64::from(b);
        }
    }
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_kinds() {
        let f = parse_field("field:char prev_comm[16];\toffset:8;\tsize:16;\tsigned:0;").unwrap();
        assert_eq!(
            (f.name.as_str(), f.kind, f.array_len),
            ("prev_comm", FieldKind::Array, 16)
        );
        assert!(f.is_string());
        let f =
            parse_field("field:__data_loc char[] name;\toffset:8;\tsize:4;\tsigned:0;").unwrap();
        assert_eq!((f.name.as_str(), f.kind), ("name", FieldKind::DataLoc));
        let f = parse_field("field:const void * ptr;\toffset:8;\tsize:8;\tsigned:0;").unwrap();
        assert_eq!((f.name.as_str(), f.kind), ("ptr", FieldKind::Pointer));
        let f = parse_field("field:long state;\toffset:8;\tsize:8;\tsigned:1;").unwrap();
        assert!(f.signed && f.is_long());
    }

    #[test]
    fn malformed_formats_name_what_is_wrong() {
        let head = "name: demo\nID: 7\nformat:\n";
        let bad_field = format!("{head}\tfield:int value;\tsize:4;\tsigned:1;\n");
        assert_eq!(
            EventFormat::parse("demo", &bad_field).unwrap_err(),
            FormatError::BadField { line: 4 }
        );
        assert_eq!(
            EventFormat::parse("demo", "name: demo\nformat:\n").unwrap_err(),
            FormatError::MissingId
        );
        assert_eq!(
            EventFormat::parse("demo", "ID: 7\n").unwrap_err(),
            FormatError::MissingName
        );
        // Lines it does not know are skipped, as libtraceevent skips them.
        let event = EventFormat::parse("demo", &format!("{head}something else\n")).unwrap();
        assert_eq!((event.id, event.all_fields().count()), (7, 0));
    }

    #[cfg(feature = "std")]
    #[test]
    fn a_file_keeps_an_event_whose_field_line_is_bad() {
        let text = "name: demo\nID: 7\nformat:\n\
            \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\n\
            \tfield:int a;\toffset:8;\tsize:4;\tsigned:1;\n\
            \tfield:int b;\tsize:4;\tsigned:1;\n\
            \tfield:int c;\toffset:16;\tsize:4;\tsigned:1;\n\n\
            print fmt: \"a=%d\", REC->a\n";
        assert_eq!(
            EventFormat::parse("demo", text).unwrap_err(),
            FormatError::BadField { line: 7 }
        );
        // libtraceevent stops at the bad line: the fields before it stay,
        // the ones after it and the print format do not.
        let event = EventFormat::parse_keeping_failed("demo", text).unwrap();
        let names: Vec<_> = event.all_fields().map(|f| f.name.as_str()).collect();
        assert_eq!((event.id, names), (7, vec!["common_type", "a"]));
        assert!(event.print.is_none() && event.print_text.is_empty());
        // Without a name or an ID there is no event to keep.
        assert_eq!(
            EventFormat::parse_keeping_failed("demo", "ID: 7\n").unwrap_err(),
            FormatError::MissingName
        );
    }

    #[test]
    fn dynamic_offset_past_the_record_is_empty() {
        let f =
            parse_field("field:__data_loc char[] comm;\toffset:8;\tsize:4;\tsigned:0;").unwrap();
        let mut data = vec![0u8; 24];
        data[8..12].copy_from_slice(&((3u32 << 16) | 20).to_le_bytes());
        assert_eq!(f.dynamic_range(&data, false), (20, 3));
        // libtraceevent checks the length against the stored offset, not
        // against the 0 it replaces an out-of-range offset with.
        data[8..12].copy_from_slice(&((3u32 << 16) | 0xd614).to_le_bytes());
        assert_eq!(f.dynamic_range(&data, false), (0, 0));
    }
}
