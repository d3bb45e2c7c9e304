//! `print fmt:` evaluation, as libtraceevent does it without plugins: the
//! format string is split into literal text and conversions, each
//! conversion bound to the next argument expression.

#[allow(unused_imports)]
use crate::prelude::*;

mod bprint;
mod cfmt;
mod eval;
mod expr;
mod net;

use crate::prelude::Map;

pub(crate) use cfmt::Spec;
pub(crate) use eval::Context;
#[cfg(feature = "std")]
pub(crate) use expr::parse_c_number;
use expr::Arg;

use crate::format::EventFormat;

/// A piece of a parsed print format.
#[derive(Clone, Debug)]
enum Piece {
    Text(String),
    /// A conversion, its argument and (for `*`) the width argument.
    Conv {
        spec: Spec,
        /// `%p` extension letters (`S`, `I4`, `pISpc`...), empty for plain.
        ext: String,
        arg: Arg,
        width: Option<Arg>,
    },
}

/// A parsed `print fmt:`.
#[derive(Clone, Debug)]
pub(crate) struct PrintFmt {
    pieces: Vec<Piece>,
}

impl PrintFmt {
    /// Parses `"format", args...`; `None` when libtraceevent would mark
    /// the event as failed to parse.
    pub(crate) fn parse(text: &str) -> Option<PrintFmt> {
        let text = text.trim();
        if !text.starts_with('"') {
            return None;
        }
        // Adjacent string literals form the format.
        let mut format = String::new();
        let mut at = 0;
        while text[at..].trim_start().starts_with('"') {
            at += text[at..].len() - text[at..].trim_start().len();
            let (s, next) = expr::read_quoted(text, at)?;
            format.push_str(&s);
            at = next;
        }
        let rest = text[at..].trim_start();
        let args = match rest.strip_prefix(',') {
            Some(list) => expr::parse_args(list)?,
            None if rest.is_empty() => Vec::new(),
            None => return None,
        };
        Self::bind(&format, args)
    }

    fn bind(format: &str, args: Vec<Arg>) -> Option<PrintFmt> {
        let mut args = args.into_iter();
        let mut pieces = Vec::new();
        let mut text = String::new();
        let b = format.as_bytes();
        let mut i = 0;
        while i < b.len() {
            match b[i] {
                b'\\' if i + 1 < b.len() => {
                    text.push(match b[i + 1] {
                        b'n' => '\n',
                        b't' => '\t',
                        b'r' => '\r',
                        c => char::from(c),
                    });
                    i += 2;
                }
                b'%' if b.get(i + 1) == Some(&b'%') => {
                    text.push('%');
                    i += 2;
                }
                b'%' => {
                    let Some((spec, used)) = Spec::parse(&b[i + 1..]) else {
                        // A conversion libtraceevent does not know prints
                        // as `>c<`.
                        text.push_str(&format!(">{}<", char::from(*b.get(i + 1)?)));
                        i += 2;
                        continue;
                    };
                    i += 1 + used;
                    if !matches!(
                        spec.conv,
                        b'c' | b'd' | b'u' | b'i' | b'x' | b'X' | b'o' | b's' | b'p'
                    ) {
                        text.push_str(&format!(">{}<", char::from(spec.conv)));
                        continue;
                    }
                    let width = if spec.star_width {
                        Some(args.next()?)
                    } else {
                        None
                    };
                    let mut ext = String::new();
                    if spec.conv == b'p' {
                        let n = pointer_ext_len(&b[i..]);
                        ext = format[i..i + n].to_string();
                        i += n;
                    }
                    if !text.is_empty() {
                        pieces.push(Piece::Text(core::mem::take(&mut text)));
                    }
                    pieces.push(Piece::Conv {
                        spec,
                        ext,
                        arg: args.next()?,
                        width,
                    });
                }
                c => {
                    text.push(char::from(c));
                    i += 1;
                }
            }
        }
        if !text.is_empty() {
            pieces.push(Piece::Text(text));
        }
        Some(PrintFmt { pieces })
    }

    /// Writes the event's text for one record's payload.
    pub(crate) fn render(&self, cx: &Context<'_>, out: &mut String) {
        for piece in &self.pieces {
            match piece {
                Piece::Text(t) => out.push_str(t),
                Piece::Conv {
                    spec,
                    ext,
                    arg,
                    width,
                } => {
                    let mut spec = spec.clone();
                    if let Some(w) = width {
                        let w = cx.eval(w) as i32;
                        spec.left |= w < 0;
                        spec.width = Some(w.unsigned_abs() as usize);
                    }
                    cx.convert(&spec, ext, arg, out);
                }
            }
        }
    }
}

/// How many letters after `%p` libtraceevent reads as the pointer's kind.
fn pointer_ext_len(b: &[u8]) -> usize {
    let at = |i: usize| b.get(i).copied().unwrap_or(0);
    match at(0) {
        b'F' | b'S' | b'f' | b's' => 1,
        b'M' | b'm' => 1 + usize::from(matches!(at(1), b'R' | b'F')),
        b'I' | b'i' => {
            let mut n = 1;
            match at(1) {
                b'4' => {
                    n += 1;
                    if matches!(at(2), b'h' | b'n' | b'l' | b'b') {
                        n += 1;
                    }
                }
                b'6' => {
                    n += 1;
                    if at(2) == b'c' {
                        n += 1;
                    }
                }
                b'S' => {
                    n += 1;
                    while matches!(at(n), b'p' | b'f' | b's' | b'c') {
                        n += 1;
                    }
                    if matches!(at(n), b'h' | b'n' | b'l' | b'b') {
                        n += 1;
                    }
                }
                _ => {}
            }
            n
        }
        b'U' => 1 + usize::from(matches!(at(1), b'L' | b'l' | b'B' | b'b')),
        b'h' => 1 + usize::from(matches!(at(1), b'C' | b'D' | b'N')),
        _ => 0,
    }
}

/// Writes `event`'s text for a record's `data` (the event's bytes from
/// its common fields on) as libtraceevent does without plugins: its print
/// format evaluated, a `trace_printk` record's message with its format
/// from `tables`, or `[FAILED TO PARSE]` and the raw fields when the
/// format could not be parsed. Works without `std`, so a live tracer
/// prints with the same rules as a saved file's reader.
///
/// ```
/// use hotkern_tracedat::print::{write_event, Tables};
/// use hotkern_tracedat::{EventFormat, Kallsyms};
///
/// let format = "name: wake\nID: 7\nformat:\n\
///     \tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
///     \tfield:int pid;\toffset:8;\tsize:4;\tsigned:1;\n\
///     \tfield:unsigned long func;\toffset:16;\tsize:8;\tsigned:0;\n\n\
///     print fmt: \"pid=%d (%s) %ps\", REC->pid, REC->pid > 0 ? \"task\" : \"idle\", (void *)REC->func\n";
/// let event = EventFormat::parse("demo", format).unwrap();
/// let tables = Tables::new(false, 8, Kallsyms::parse("1000 T worker\n2000 T end\n"), []);
/// let mut data = vec![0u8; 24];
/// data[8..12].copy_from_slice(&42i32.to_le_bytes());
/// data[16..24].copy_from_slice(&0x1000u64.to_le_bytes());
/// let mut out = String::new();
/// write_event(&event, &data, &tables, &mut out);
/// assert_eq!(out, "pid=42 (task) worker");
/// ```
pub fn write_event(event: &EventFormat, data: &[u8], tables: &Tables, out: &mut String) {
    let cx = Context {
        event,
        data,
        tables,
    };
    if event.system == "ftrace" && event.name == "bprint" {
        if let Some(print) = bprint::bprint_format(event, data, tables) {
            print.render(&cx, out);
            return;
        }
    }
    match &event.print {
        Some(print) => print.render(&cx, out),
        None => {
            out.push_str("[FAILED TO PARSE]");
            for field in &event.fields {
                out.push(' ');
                out.push_str(&field.name);
                out.push('=');
                cx.raw_field(field, out);
            }
        }
    }
}

/// Writes a `trace_printk` message: `format` (a printk format as the
/// `printk_formats` file lists it) applied to `args`, packed as the
/// kernel's `vbin_printf` packs them (numbers 4-byte aligned, `long` and
/// pointers `long_size` wide, strings inline with their NUL) — what a
/// `bprint` record's `buf` holds. The format is written as is when its
/// conversions and the arguments do not match.
///
/// ```
/// use hotkern_tracedat::print::{write_binary_message, Tables};
///
/// let tables = Tables::new(false, 8, Default::default(), []);
/// let mut args = 7u32.to_le_bytes().to_vec();
/// args.extend_from_slice(b"disk\0");
/// let mut out = String::new();
/// write_binary_message("%03d on %s\n", &args, &tables, &mut out);
/// assert_eq!(out, "007 on disk\n");
/// ```
pub fn write_binary_message(format: &str, args: &[u8], tables: &Tables, out: &mut String) {
    let event = EventFormat::default();
    let cx = Context {
        event: &event,
        data: args,
        tables,
    };
    match bprint::message_format(format, args, tables) {
        Some(print) => print.render(&cx, out),
        None => out.push_str(format),
    }
}

/// What printing needs beyond the record: the recording machine's byte
/// order and `long` size, its kernel symbols (for `%pS` and symbolic
/// arguments) and its `trace_printk` formats by address.
#[derive(Clone, Debug, Default)]
pub struct Tables {
    pub(crate) big_endian: bool,
    pub(crate) long_size: usize,
    pub(crate) kallsyms: crate::Kallsyms,
    pub(crate) printk: Map<u64, String>,
}

impl Tables {
    /// Tables for records of a machine with this byte order and `long`
    /// size (4 or 8 bytes), `kallsyms` and the `trace_printk` formats.
    pub fn new(
        big_endian: bool,
        long_size: usize,
        kallsyms: crate::Kallsyms,
        printk_formats: impl IntoIterator<Item = (u64, String)>,
    ) -> Tables {
        Tables {
            big_endian,
            long_size,
            kallsyms,
            printk: printk_formats.into_iter().collect(),
        }
    }
}
