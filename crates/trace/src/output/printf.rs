//! Rendering an event's `print fmt` — the C format string and its
//! `REC->field` arguments — the way the kernel and libtraceevent do.
//! Arguments other than plain fields, `(cast)REC->field` and
//! `__get_str(field)` are shown as `?`.

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write;

use super::format::{read_int, read_str, EventDescription, FormatField};
use super::symbols::Symbols;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Spec {
    left: bool,
    zero: bool,
    plus: bool,
    space: bool,
    alternate: bool,
    width: Option<usize>,
    precision: Option<usize>,
    /// Integer width in bytes implied by the length modifier (4 for none).
    bytes: u8,
    conversion: u8,
    /// The letter after `%p` (`s`, `S`, `F`, `f`), if any.
    pointer: Option<u8>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Piece {
    Literal(String),
    Spec(Spec),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Arg {
    Field(FormatField),
    Unsupported,
}

/// A compiled print format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrintFormat {
    pieces: Vec<Piece>,
    args: Vec<Arg>,
}

impl PrintFormat {
    /// Compiles `event.print_fmt`; `None` if it is not a quoted format
    /// followed by arguments.
    pub fn compile(event: &EventDescription) -> Option<PrintFormat> {
        let text = event.print_fmt.trim();
        let (format, rest) = parse_c_string(text)?;
        let pieces = parse_pieces(&format);
        let mut args = Vec::new();
        for arg in split_args(rest) {
            args.push(resolve_arg(event, arg));
        }
        Some(PrintFormat { pieces, args })
    }

    /// Renders the payload of one event.
    pub fn render(&self, payload: &[u8], symbols: &Symbols, out: &mut String) {
        let mut args = self.args.iter();
        for piece in &self.pieces {
            match piece {
                Piece::Literal(text) => out.push_str(text),
                Piece::Spec(spec) if spec.conversion == b'%' => out.push('%'),
                Piece::Spec(spec) => match args.next() {
                    Some(Arg::Field(field)) => render_field(spec, field, payload, symbols, out),
                    _ => out.push('?'),
                },
            }
        }
    }
}

fn render_field(
    spec: &Spec,
    field: &FormatField,
    payload: &[u8],
    symbols: &Symbols,
    out: &mut String,
) {
    let is_string_field = field.c_type.contains("char")
        && (field.c_type.contains('[') || field.c_type.starts_with("__data_loc"));
    if spec.conversion == b's' {
        let text = if is_string_field {
            let bytes = read_str(field, payload).unwrap_or_default();
            String::from_utf8_lossy(bytes).into_owned()
        } else {
            String::from("?")
        };
        let text = match spec.precision {
            Some(p) => text.chars().take(p).collect(),
            None => text,
        };
        pad(spec, &text, out);
        return;
    }
    let Some(raw) = read_int(field, payload) else {
        out.push('?');
        return;
    };
    let text = match spec.conversion {
        b'p' => match spec.pointer {
            Some(b's' | b'f') => symbols
                .lookup(raw)
                .map(|(name, _)| String::from(name))
                .unwrap_or_else(|| alloc::format!("0x{raw:x}")),
            Some(b'S' | b'F') => symbols.offset_name(raw),
            _ => alloc::format!("0x{raw:x}"),
        },
        b'c' => String::from(char::from(raw as u8)),
        conversion => integer_text(spec, conversion, raw),
    };
    pad(spec, &text, out);
}

fn integer_text(spec: &Spec, conversion: u8, raw: u64) -> String {
    let bits = u32::from(spec.bytes) * 8;
    let mask = if bits >= 64 {
        u64::MAX
    } else {
        (1u64 << bits) - 1
    };
    let unsigned = raw & mask;
    let signed = if bits >= 64 {
        raw as i64
    } else {
        ((unsigned << (64 - bits)) as i64) >> (64 - bits)
    };
    let mut text = match conversion {
        b'd' | b'i' => {
            let sign = if signed >= 0 && spec.plus {
                "+"
            } else if signed >= 0 && spec.space {
                " "
            } else {
                ""
            };
            alloc::format!("{sign}{signed}")
        }
        b'x' if spec.alternate => alloc::format!("0x{unsigned:x}"),
        b'x' => alloc::format!("{unsigned:x}"),
        b'X' if spec.alternate => alloc::format!("0X{unsigned:X}"),
        b'X' => alloc::format!("{unsigned:X}"),
        b'o' => alloc::format!("{unsigned:o}"),
        _ => alloc::format!("{unsigned}"),
    };
    if let Some(precision) = spec.precision {
        let digits = text.trim_start_matches(['-', '+', ' ']).len();
        if digits < precision {
            let at = text.len() - digits;
            text.insert_str(at, &"0".repeat(precision - digits));
        }
    }
    text
}

fn pad(spec: &Spec, text: &str, out: &mut String) {
    let width = spec.width.unwrap_or(0);
    let len = text.chars().count();
    if len >= width {
        out.push_str(text);
    } else if spec.left {
        out.push_str(text);
        out.extend(core::iter::repeat_n(' ', width - len));
    } else if spec.zero && spec.precision.is_none() && spec.conversion != b's' {
        let sign_len = usize::from(text.starts_with(['-', '+', ' ']));
        out.push_str(&text[..sign_len]);
        out.extend(core::iter::repeat_n('0', width - len));
        out.push_str(&text[sign_len..]);
    } else {
        out.extend(core::iter::repeat_n(' ', width - len));
        out.push_str(text);
    }
}

/// Reads a C string literal at the start of `text`; returns it unescaped
/// and the rest of the text.
fn parse_c_string(text: &str) -> Option<(String, &str)> {
    let body = text.strip_prefix('"')?;
    let mut out = String::new();
    let mut chars = body.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Some((out, &body[i + 1..])),
            '\\' => match chars.next()?.1 {
                'n' => out.push('\n'),
                't' => out.push('\t'),
                '\\' => out.push('\\'),
                '"' => out.push('"'),
                other => {
                    out.push('\\');
                    out.push(other);
                }
            },
            c => out.push(c),
        }
    }
    None
}

fn parse_pieces(format: &str) -> Vec<Piece> {
    let bytes = format.as_bytes();
    let mut pieces = Vec::new();
    let mut literal = String::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'%' {
            let next = format[i..].find('%').map_or(bytes.len(), |n| i + n);
            literal.push_str(&format[i..next]);
            i = next;
            continue;
        }
        let start = i;
        i += 1;
        let mut spec = Spec {
            bytes: 4,
            ..Spec::default()
        };
        while let Some(&flag) = bytes.get(i) {
            match flag {
                b'-' => spec.left = true,
                b'0' => spec.zero = true,
                b'+' => spec.plus = true,
                b' ' => spec.space = true,
                b'#' => spec.alternate = true,
                _ => break,
            }
            i += 1;
        }
        let number = |i: &mut usize| {
            let begin = *i;
            while bytes.get(*i).is_some_and(u8::is_ascii_digit) {
                *i += 1;
            }
            format[begin..*i].parse::<usize>().ok()
        };
        spec.width = number(&mut i);
        if bytes.get(i) == Some(&b'.') {
            i += 1;
            spec.precision = Some(number(&mut i).unwrap_or(0));
        }
        loop {
            match bytes.get(i) {
                Some(b'l') => spec.bytes = 8,
                Some(b'z') => spec.bytes = 8,
                Some(b'h') => spec.bytes = if spec.bytes == 2 { 1 } else { 2 },
                _ => break,
            }
            i += 1;
        }
        match bytes.get(i) {
            Some(&conversion @ (b'd' | b'i' | b'u' | b'x' | b'X' | b'o' | b'c' | b's' | b'%')) => {
                spec.conversion = conversion;
                i += 1;
            }
            Some(b'p') => {
                spec.conversion = b'p';
                spec.bytes = 8;
                i += 1;
                if let Some(&letter @ (b's' | b'S' | b'f' | b'F')) = bytes.get(i) {
                    spec.pointer = Some(letter);
                    i += 1;
                }
            }
            _ => {
                // Not a conversion we know: keep it as text.
                literal.push_str(&format[start..i]);
                continue;
            }
        }
        if !literal.is_empty() {
            pieces.push(Piece::Literal(core::mem::take(&mut literal)));
        }
        pieces.push(Piece::Spec(spec));
    }
    if !literal.is_empty() {
        pieces.push(Piece::Literal(literal));
    }
    pieces
}

/// Splits `, a, f(b, c), d` at top-level commas.
fn split_args(rest: &str) -> Vec<&str> {
    let rest = rest.trim();
    let Some(rest) = rest.strip_prefix(',') else {
        return Vec::new();
    };
    let mut args = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    let mut in_string = false;
    for (i, c) in rest.char_indices() {
        match c {
            '"' => in_string = !in_string,
            '(' if !in_string => depth += 1,
            ')' if !in_string => depth -= 1,
            ',' if depth == 0 && !in_string => {
                args.push(rest[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    args.push(rest[start..].trim());
    args
}

fn resolve_arg(event: &EventDescription, arg: &str) -> Arg {
    let mut arg = arg.trim();
    // Drop casts: `(void *)REC->func`, `(unsigned long)REC->x`.
    while arg.starts_with('(') {
        match arg.find(')') {
            Some(close) if arg[close + 1..].trim_start().starts_with("REC->") => {
                arg = arg[close + 1..].trim_start()
            }
            _ => break,
        }
    }
    let name = if let Some(name) = arg.strip_prefix("REC->") {
        name
    } else if let Some(inner) = arg
        .strip_prefix("__get_str(")
        .and_then(|a| a.strip_suffix(')'))
    {
        inner.trim()
    } else {
        return Arg::Unsupported;
    };
    if !name
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.')
    {
        return Arg::Unsupported;
    }
    match event.field(name) {
        Some(field) => Arg::Field(field.clone()),
        None => Arg::Unsupported,
    }
}

/// Writes every non-common field as `name=value`, the fallback when an
/// event's print format cannot be rendered.
pub fn write_raw_fields(event: &EventDescription, payload: &[u8], out: &mut String) {
    let mut first = true;
    for field in event
        .fields
        .iter()
        .filter(|f| !f.name.starts_with("common_"))
    {
        if !first {
            out.push(' ');
        }
        first = false;
        let is_string = field.c_type.contains("char")
            && (field.c_type.contains('[') || field.c_type.starts_with("__data_loc"));
        if is_string {
            let text = read_str(field, payload).unwrap_or_default();
            let _ = write!(out, "{}={}", field.name, String::from_utf8_lossy(text));
        } else if field.size <= 8 {
            match read_int(field, payload) {
                Some(v) if field.signed => {
                    let _ = write!(out, "{}={}", field.name, v as i64);
                }
                Some(v) => {
                    let _ = write!(out, "{}={}", field.name, v);
                }
                None => {
                    let _ = write!(out, "{}=?", field.name);
                }
            }
        } else {
            let _ = write!(out, "{}=ARRAY[{}]", field.name, field.size);
        }
    }
}

/// Renders a `trace_printk` record: `format` applied to arguments packed
/// the way the kernel's `vbin_printf` packs them (4-byte aligned words,
/// 8-byte values as two words, strings inline with their NUL).
pub fn render_binary(format: &str, mut args: &[u8], symbols: &Symbols, out: &mut String) {
    let mut used = 0usize;
    for piece in parse_pieces(format) {
        let spec = match piece {
            Piece::Literal(text) => {
                out.push_str(&text);
                continue;
            }
            Piece::Spec(spec) if spec.conversion == b'%' => {
                out.push('%');
                continue;
            }
            Piece::Spec(spec) => spec,
        };
        if spec.conversion == b's' {
            let end = args.iter().position(|&b| b == 0).unwrap_or(args.len());
            let text = String::from_utf8_lossy(&args[..end]).into_owned();
            pad(&spec, &text, out);
            let taken = (end + 1).min(args.len());
            args = &args[taken..];
            used += taken;
            continue;
        }
        let size = usize::from(spec.bytes).max(if spec.conversion == b'p' { 8 } else { 4 });
        let align = size.min(4);
        let skip = (align - used % align) % align;
        if args.len() < skip + size {
            out.push('?');
            args = &[];
            continue;
        }
        let mut raw = [0u8; 8];
        raw[..size].copy_from_slice(&args[skip..skip + size]);
        args = &args[skip + size..];
        used += skip + size;
        let value = u64::from_le_bytes(raw);
        let field = FormatField {
            name: String::new(),
            c_type: String::from("u64"),
            offset: 0,
            size: 8,
            signed: false,
        };
        render_field(&spec, &field, &value.to_le_bytes(), symbols, out);
    }
}
