//! ftrace's event `format` text, parsed back into fields and a print
//! format. Everything the output side knows about an event comes from this
//! text — the same text `trace.dat` carries — so a live trace and a saved
//! one are printed by the same code.

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;

use crate::filter::FieldSpec;

/// One `field:` line of a format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormatField {
    /// The field's name (`prev_comm`).
    pub name: String,
    /// Its C type, array suffix included (`char[16]`, `__data_loc char[]`).
    pub c_type: String,
    /// Byte offset in the payload.
    pub offset: usize,
    /// Size in bytes.
    pub size: usize,
    /// Whether the type is signed.
    pub signed: bool,
}

impl FormatField {
    /// The field as the filter language sees it.
    pub fn spec(&self) -> FieldSpec {
        FieldSpec::from_format(
            &self.name,
            &self.c_type,
            self.offset,
            self.size,
            self.signed,
        )
    }
}

/// A parsed event format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventDescription {
    /// The event's system (`sched`, `ftrace`).
    pub system: String,
    /// The event's name.
    pub name: String,
    /// The id stored in `common_type`.
    pub id: u16,
    /// Every field, common ones first.
    pub fields: Vec<FormatField>,
    /// The text after `print fmt: `.
    pub print_fmt: String,
}

/// A format text that does not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormatError {
    /// 1-based line of the problem.
    pub line: usize,
    /// What is wrong.
    pub message: &'static str,
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "event format, line {}: {}", self.line, self.message)
    }
}

impl core::error::Error for FormatError {}

impl EventDescription {
    /// Parses the text of an `events/<system>/<event>/format` file.
    ///
    /// ```
    /// use hotkern_trace::output::EventDescription;
    ///
    /// let text = "name: demo\nID: 500\nformat:\n\
    ///     \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
    ///     \tfield:char comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\n\
    ///     print fmt: \"comm=%s\", REC->comm\n";
    /// let event = EventDescription::parse("demo_sys", text).unwrap();
    /// assert_eq!((event.id, event.name.as_str()), (500, "demo"));
    /// assert_eq!(event.fields[1].c_type, "char[16]");
    /// ```
    pub fn parse(system: &str, text: &str) -> Result<EventDescription, FormatError> {
        let mut name = None;
        let mut id = None;
        let mut fields = Vec::new();
        let mut print_fmt = None;
        for (index, line) in text.lines().enumerate() {
            let error = |message| FormatError {
                line: index + 1,
                message,
            };
            let trimmed = line.trim();
            if let Some(value) = trimmed.strip_prefix("name:") {
                name = Some(value.trim().to_string());
            } else if let Some(value) = trimmed.strip_prefix("ID:") {
                id = Some(value.trim().parse::<u16>().map_err(|_| error("bad ID"))?);
            } else if let Some(value) = trimmed.strip_prefix("print fmt:") {
                print_fmt = Some(value.trim().to_string());
            } else if let Some(rest) = trimmed.strip_prefix("field:") {
                fields.push(parse_field(rest).ok_or(error("bad field line"))?);
            } else if trimmed.is_empty() || trimmed == "format:" {
                continue;
            } else {
                return Err(error("unexpected line"));
            }
        }
        Ok(EventDescription {
            system: system.to_string(),
            name: name.ok_or(FormatError {
                line: 1,
                message: "no name",
            })?,
            id: id.ok_or(FormatError {
                line: 2,
                message: "no ID",
            })?,
            fields,
            print_fmt: print_fmt.unwrap_or_default(),
        })
    }

    /// The field called `name`, if any.
    pub fn field(&self, name: &str) -> Option<&FormatField> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// The first field whose name is `name` or ends in `.name` (ftrace's
    /// graph events call them `graph_ent.func`, `ret.func`).
    pub(crate) fn field_like(&self, name: &str) -> Option<&FormatField> {
        self.fields.iter().find(|f| {
            f.name == name
                || f.name
                    .strip_suffix(name)
                    .is_some_and(|head| head.ends_with('.'))
        })
    }

    /// The fields as the filter language sees them.
    pub(crate) fn field_specs(&self) -> Vec<FieldSpec> {
        self.fields.iter().map(FormatField::spec).collect()
    }
}

/// Reads `field` from `payload` as an integer, sign-extending signed ones.
pub(crate) fn read_int(field: &FormatField, payload: &[u8]) -> Option<u64> {
    let bytes = payload.get(field.offset..field.offset.checked_add(field.size)?)?;
    let mut raw = [0u8; 8];
    let size = field.size.min(8);
    raw[..size].copy_from_slice(&bytes[..size]);
    let value = u64::from_le_bytes(raw);
    if field.signed && size < 8 && size > 0 {
        let shift = 64 - 8 * size as u32;
        Some((((value << shift) as i64) >> shift) as u64)
    } else {
        Some(value)
    }
}

/// Reads a string field (`char[N]` or `__data_loc char[]`), without its NUL.
pub(crate) fn read_str<'p>(field: &FormatField, payload: &'p [u8]) -> Option<&'p [u8]> {
    let raw = if field.c_type.starts_with("__data_loc") {
        let locator = read_int(
            &FormatField {
                size: 4,
                signed: false,
                ..field.clone()
            },
            payload,
        )? as u32;
        let start = (locator & 0xffff) as usize;
        payload.get(start..start + (locator >> 16) as usize)?
    } else if field.c_type.ends_with("[]") {
        // A trailing dynamic array (`char buf[]`) runs to the end of the payload.
        payload.get(field.offset..)?
    } else {
        payload.get(field.offset..field.offset.checked_add(field.size)?)?
    };
    Some(raw.split(|&b| b == 0).next().unwrap_or(raw))
}

/// `char prev_comm[16]` → (`prev_comm`, `char[16]`).
fn parse_declaration(declaration: &str) -> Option<(String, String)> {
    let declaration = declaration.trim();
    let (head, array) = match declaration.find('[') {
        Some(open) if declaration.ends_with(']') && !declaration.starts_with("__data_loc") => {
            (&declaration[..open], &declaration[open..])
        }
        _ => (declaration, ""),
    };
    let head = head.trim_end();
    let split = head.rfind(|c: char| c.is_whitespace() || c == '*')?;
    let name = head[split + 1..].trim();
    let c_type = head[..split + 1].trim();
    if name.is_empty() || c_type.is_empty() {
        return None;
    }
    Some((name.to_string(), [c_type, array].concat()))
}

fn parse_field(rest: &str) -> Option<FormatField> {
    let mut parts = rest.split(';');
    let (name, c_type) = parse_declaration(parts.next()?)?;
    let mut offset = None;
    let mut size = None;
    let mut signed = None;
    for part in parts {
        let part = part.trim();
        if let Some(v) = part.strip_prefix("offset:") {
            offset = v.trim().parse().ok();
        } else if let Some(v) = part.strip_prefix("size:") {
            size = v.trim().parse().ok();
        } else if let Some(v) = part.strip_prefix("signed:") {
            signed = Some(v.trim() == "1");
        }
    }
    Some(FormatField {
        name,
        c_type,
        offset: offset?,
        size: size?,
        signed: signed.unwrap_or(false),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString;

    #[test]
    fn format_errors_name_the_line() {
        let error = EventDescription::parse("demo", "name: x\nID: many\n").unwrap_err();
        let error: &dyn core::error::Error = &error;
        assert_eq!(error.to_string(), "event format, line 2: bad ID");
    }
}
