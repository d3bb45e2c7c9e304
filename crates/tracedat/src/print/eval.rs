//! Evaluating print arguments against one record, with libtraceevent's
//! rules: fields read as unsigned, casts truncate and sign-extend, the
//! conversion's length modifier picks the C type printed, and helpers
//! that cannot yield a number evaluate to 0.

#[allow(unused_imports)]
use crate::prelude::*;

use core::fmt::Write;

use super::expr::{parse_c_number, Arg};
use super::{Spec, Tables};
use crate::format::read_uint;
use crate::format::{EventFormat, Field, FieldKind};

/// One record being printed.
pub(crate) struct Context<'a> {
    pub(crate) event: &'a EventFormat,
    pub(crate) data: &'a [u8],
    pub(crate) tables: &'a Tables,
}

/// Symbol values libtraceevent knows by name when a format leaves them
/// unconverted (softirq vectors and hrtimer restart codes).
const KNOWN_FLAGS: [(&str, i64); 12] = [
    ("HI_SOFTIRQ", 0),
    ("TIMER_SOFTIRQ", 1),
    ("NET_TX_SOFTIRQ", 2),
    ("NET_RX_SOFTIRQ", 3),
    ("BLOCK_SOFTIRQ", 4),
    ("IRQ_POLL_SOFTIRQ", 5),
    ("TASKLET_SOFTIRQ", 6),
    ("SCHED_SOFTIRQ", 7),
    ("HRTIMER_SOFTIRQ", 8),
    ("RCU_SOFTIRQ", 9),
    ("HRTIMER_NORESTART", 0),
    ("HRTIMER_RESTART", 1),
];

/// A `{ value, "name" }` table entry's value; -1 when it is neither a
/// number nor a known name.
pub(crate) fn flag_value(text: &str) -> i64 {
    if text.starts_with(|c: char| c.is_ascii_digit()) {
        return parse_c_number(text).unwrap_or(0) as i64;
    }
    KNOWN_FLAGS
        .iter()
        .find(|(n, _)| *n == text)
        .map_or(-1, |(_, v)| *v)
}

/// libtraceevent's casts: a sized type truncates, a signed one also
/// sign-extends; pointers and 64-bit types pass through.
pub(crate) fn cast(ty: &str, v: u64) -> u64 {
    if ty.ends_with('*') {
        return v;
    }
    let ty = ty.trim_start_matches("const ").trim();
    match ty {
        "u8" | "unsigned char" | "bool" | "_Bool" => v & 0xff,
        "u16" | "unsigned short" => v & 0xffff,
        "u32" | "unsigned int" | "unsigned" => v & 0xffff_ffff,
        "s8" | "char" | "signed char" => v as i8 as i64 as u64,
        "s16" | "short" | "signed short" => v as i16 as i64 as u64,
        "s32" | "int" | "signed int" | "signed" => v as i32 as i64 as u64,
        _ => v,
    }
}

/// A binary operator on unsigned 64-bit values, as libtraceevent computes
/// it (division by zero yields 0 rather than a crash).
pub(crate) fn binary(op: &str, l: u64, r: u64) -> u64 {
    match op {
        "+" => l.wrapping_add(r),
        "-" => l.wrapping_sub(r),
        "*" => l.wrapping_mul(r),
        "/" => l.checked_div(r).unwrap_or(0),
        "%" => l.checked_rem(r).unwrap_or(0),
        "<<" => l.wrapping_shl(r as u32),
        ">>" => l.wrapping_shr(r as u32),
        "&" => l & r,
        "|" => l | r,
        "^" => l ^ r,
        "&&" => u64::from(l != 0 && r != 0),
        "||" => u64::from(l != 0 || r != 0),
        "==" => u64::from(l == r),
        "!=" => u64::from(l != r),
        "<" => u64::from(l < r),
        ">" => u64::from(l > r),
        "<=" => u64::from(l <= r),
        _ => u64::from(l >= r),
    }
}

impl Context<'_> {
    fn field(&self, name: &str) -> Option<&Field> {
        self.event.field(name)
    }

    fn read(&self, offset: usize, size: usize) -> u64 {
        match offset.checked_add(size) {
            Some(end) if end <= self.data.len() => {
                read_uint(&self.data[offset..], self.tables.big_endian, size).unwrap_or(0)
            }
            _ => 0,
        }
    }

    fn dynamic(&self, name: &str) -> (usize, usize) {
        match self.field(name) {
            Some(f) if f.offset.saturating_add(f.size) <= self.data.len() => {
                f.dynamic_range(self.data, self.tables.big_endian)
            }
            _ => (0, 0),
        }
    }

    /// The numeric value of `arg`, as libtraceevent's `eval_num_arg`.
    pub(crate) fn eval(&self, arg: &Arg) -> u64 {
        match arg {
            // A number, or else (as libtraceevent does) a kernel symbol's
            // address by name.
            Arg::Num(v, _) => *v,
            Arg::Atom(a) => self.tables.kallsyms.address_of(a).unwrap_or(0),
            Arg::Str(_) => 0,
            Arg::Field(name) => match self.field(name) {
                Some(f) => self.read(f.offset, f.size),
                None => 0,
            },
            Arg::Cast(ty, inner) => cast(ty, self.eval(inner)),
            Arg::Unary(op, inner) => {
                let v = self.eval(inner);
                match *op {
                    "-" => v.wrapping_neg(),
                    "!" => u64::from(v == 0),
                    _ => !v,
                }
            }
            Arg::Binary(op, l, r) => binary(op, self.eval(l), self.eval(r)),
            Arg::Ternary(c, a, b) => {
                if self.eval(c) != 0 {
                    self.eval(a)
                } else {
                    self.eval(b)
                }
            }
            Arg::Index(base, index) => self.eval_index(base, index),
            Arg::DynArrayLen(name) => self.dynamic(name).1 as u64,
            Arg::DynArray(name) => self.dynamic(name).0 as u64,
            _ => 0,
        }
    }

    fn eval_index(&self, base: &Arg, index: &Arg) -> u64 {
        let i = self.eval(index) as usize;
        let mut base = base;
        let mut casts = Vec::new();
        while let Arg::Cast(ty, inner) = base {
            casts.push(ty);
            base = inner;
        }
        let (offset, size) = match base {
            Arg::Field(name) => match self.field(name) {
                Some(f) => {
                    let size = f.element_size(self.tables.long_size);
                    (f.offset.saturating_add(i.saturating_mul(size)), size)
                }
                None => return 0,
            },
            Arg::DynArray(name) => {
                // libtraceevent reads a long where the element size is unknown.
                let size = match self
                    .field(name)
                    .map(|f| f.element_size(self.tables.long_size))
                {
                    Some(0) | None => self.tables.long_size,
                    Some(size) => size,
                };
                (self.dynamic(name).0.saturating_add(i), size)
            }
            _ => return 0,
        };
        let v = self.read(offset, size);
        match casts.first() {
            Some(ty) => cast(ty, v),
            None => v,
        }
    }

    /// Prints one conversion of `arg`.
    pub(crate) fn convert(&self, spec: &Spec, ext: &str, arg: &Arg, out: &mut String) {
        match spec.conv {
            b's' if spec.is_plain() => self.string(arg, out),
            b's' => {
                let mut s = String::new();
                self.string(arg, &mut s);
                spec.str(out, &s);
            }
            b'p' => self.pointer(spec, ext, arg, out),
            b'c' => spec.char(out, self.eval(arg) as u8),
            _ => spec.int(out, spec.as_c_type(self.eval(arg))),
        }
    }

    /// `%s` of `arg`, as libtraceevent's `print_str_arg`.
    fn string(&self, arg: &Arg, out: &mut String) {
        match arg {
            Arg::Atom(a) | Arg::Str(a) | Arg::Num(_, a) => out.push_str(a),
            Arg::Field(name) => {
                let Some(f) = self.field(name) else { return };
                if f.kind != FieldKind::Array && f.size == self.tables.long_size {
                    let addr = self.read(f.offset, f.size);
                    match self.tables.printk.get(&addr) {
                        Some(s) => out.push_str(s),
                        None => {
                            let _ = write!(out, "{addr:x}");
                        }
                    }
                    return;
                }
                let len = if f.size == 0 {
                    self.data.len().saturating_sub(f.offset)
                } else {
                    f.size
                };
                out.push_str(&self.cstr(f.offset, len));
            }
            Arg::Flags(value, delim, table) => {
                let mut v = self.eval(value);
                let mut printed = false;
                for &(fv, ref name) in table {
                    if v == 0 && fv < 0 {
                        out.push_str(name);
                        break;
                    }
                    if fv > 0 && v & fv as u64 == fv as u64 {
                        if printed {
                            out.push_str(delim);
                        }
                        out.push_str(name);
                        printed = true;
                        v &= !(fv as u64);
                    }
                }
                if v != 0 {
                    if printed {
                        out.push_str(delim);
                    }
                    let _ = write!(out, "0x{v:x}");
                }
            }
            Arg::Symbolic(value, table) => {
                let v = self.eval(value);
                match table.iter().find(|(fv, _)| *fv as u64 == v) {
                    Some((_, name)) => out.push_str(name),
                    None => {
                        let _ = write!(out, "0x{v:x}");
                    }
                }
            }
            Arg::Hex(buf, len, no_spaces) => {
                let Some(start) = self.buffer_start(buf) else {
                    return;
                };
                let len = self.eval(len) as usize;
                for i in 0..len {
                    let Some(b) = self.data.get(start.saturating_add(i)) else {
                        break;
                    };
                    if i > 0 && !no_spaces {
                        out.push(' ');
                    }
                    let _ = write!(out, "{b:02x}");
                }
            }
            Arg::IntArray(array, count, size) => {
                let Some(start) = self.buffer_start(array) else {
                    return;
                };
                let count = self.eval(count) as usize;
                let mut size = self.eval(size) as usize;
                out.push('{');
                let mut at = start;
                for i in 0..count {
                    if at >= self.data.len() {
                        break;
                    }
                    if i > 0 {
                        out.push(',');
                    }
                    if matches!(size, 1 | 2 | 4 | 8) {
                        let _ = write!(out, "0x{:x}", self.read(at, size));
                    } else {
                        let _ = write!(out, "BAD SIZE:{size} 0x{:x}", self.data[at]);
                        size = 1;
                    }
                    at += size;
                }
                out.push('}');
            }
            Arg::GetStr(name) => {
                let (offset, len) = self.dynamic(name);
                if len > 0 {
                    out.push_str(&self.cstr(offset, self.data.len() - offset));
                }
            }
            Arg::Bitmask(name) => {
                let (offset, len) = self.dynamic(name);
                out.push_str(&self.bitmask(offset, len));
            }
            Arg::Cpumask(name) => {
                let (offset, len) = self.dynamic(name);
                out.push_str(&self.cpumask(offset, len));
            }
            Arg::Ternary(c, a, b) => {
                if self.eval(c) != 0 {
                    self.string(a, out)
                } else {
                    self.string(b, out)
                }
            }
            _ => {}
        }
    }

    fn buffer_start(&self, arg: &Arg) -> Option<usize> {
        match arg {
            Arg::DynArray(name) => Some(self.dynamic(name).0),
            Arg::Field(name) => self.field(name).map(|f| f.offset),
            Arg::Cast(_, inner) => self.buffer_start(inner),
            _ => None,
        }
    }

    /// The text at `offset`, up to a NUL or `len` bytes.
    fn cstr(&self, offset: usize, len: usize) -> String {
        let Some(bytes) = self.data.get(offset..) else {
            return String::new();
        };
        let bytes = &bytes[..len.min(bytes.len())];
        let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        String::from_utf8_lossy(&bytes[..end]).into_owned()
    }

    /// Hex words, most significant first, a comma every 32 bits.
    fn bitmask(&self, offset: usize, len: usize) -> String {
        let Some(bytes) = self.data.get(offset..offset + len) else {
            return String::new();
        };
        let mut out = String::new();
        for (i, idx) in (0..len).rev().enumerate() {
            let b = if self.tables.big_endian {
                bytes[len - 1 - idx]
            } else {
                bytes[idx]
            };
            if i > 0 && (idx + 1) % 4 == 0 {
                out.push(',');
            }
            let _ = write!(out, "{b:02x}");
        }
        out
    }

    /// CPU ranges: `0-3,8`.
    fn cpumask(&self, offset: usize, len: usize) -> String {
        let Some(bytes) = self.data.get(offset..offset + len) else {
            return String::new();
        };
        let bit = |n: usize| {
            let idx = if self.tables.big_endian {
                len - 1 - n / 8
            } else {
                n / 8
            };
            bytes[idx] >> (n % 8) & 1 == 1
        };
        let mut parts = Vec::new();
        let mut n = 0;
        while n < len * 8 {
            if bit(n) {
                let start = n;
                while n < len * 8 && bit(n) {
                    n += 1;
                }
                parts.push(if n - 1 > start {
                    format!("{start}-{}", n - 1)
                } else {
                    start.to_string()
                });
            }
            n += 1;
        }
        parts.join(",")
    }

    fn pointer(&self, spec: &Spec, ext: &str, arg: &Arg, out: &mut String) {
        if let Arg::Str(s) = arg {
            // What a trace_printk() `%p*` pointed at, stored as text.
            out.push_str(s);
            return;
        }
        match ext.as_bytes().first() {
            Some(b'S' | b's' | b'F' | b'f') => {
                let v = self.eval(arg);
                match self.tables.kallsyms.lookup(v) {
                    Some((name, start)) => {
                        out.push_str(name);
                        if matches!(ext, "S" | "F") {
                            let _ = write!(out, "+0x{:x}", v - start);
                        }
                    }
                    None => {
                        let _ = write!(out, "0x{v:x}");
                    }
                }
            }
            Some(b'M' | b'm') => self.mac(ext, arg, out),
            Some(b'I' | b'i') => super::net::ip(self, ext, arg, out),
            _ => spec.pointer(out, self.eval(arg)),
        }
    }

    /// The field an address-printing conversion reads, past any casts.
    pub(crate) fn field_bytes(&self, arg: &Arg) -> Option<&[u8]> {
        match arg {
            Arg::Cast(_, inner) => self.field_bytes(inner),
            Arg::Field(name) => {
                let f = self.field(name)?;
                self.data.get(f.offset..f.offset.checked_add(f.size)?)
            }
            Arg::DynArray(name) => {
                let (offset, len) = self.dynamic(name);
                self.data.get(offset..offset + len)
            }
            _ => None,
        }
    }

    fn mac(&self, ext: &str, arg: &Arg, out: &mut String) {
        let Some(b) = self.field_bytes(arg).filter(|b| b.len() == 6) else {
            out.push_str("INVALIDMAC");
            return;
        };
        let mut b = b.to_vec();
        if ext.ends_with('R') {
            b.reverse();
        }
        let sep = match ext {
            "m" => "",
            "MF" => "-",
            _ => ":",
        };
        let parts: Vec<String> = b.iter().map(|x| format!("{x:02x}")).collect();
        out.push_str(&parts.join(sep));
    }

    /// A field printed without a print format (after `[FAILED TO PARSE]`).
    pub(crate) fn raw_field(&self, f: &Field, out: &mut String) {
        if f.is_array() {
            let (offset, len) = match f.kind {
                FieldKind::DataLoc | FieldKind::RelLoc => self.dynamic(&f.name),
                _ => (f.offset, f.size),
            };
            let bytes = self
                .data
                .get(offset..offset.saturating_add(len))
                .unwrap_or(&[]);
            let text_end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
            let printable = bytes[..text_end]
                .iter()
                .all(|b| b.is_ascii_graphic() || b.is_ascii_whitespace());
            if f.is_string() && printable {
                out.push_str(&String::from_utf8_lossy(&bytes[..text_end]));
            } else {
                out.push_str("ARRAY[");
                let parts: Vec<String> = bytes.iter().map(|b| format!("{b:02x}")).collect();
                out.push_str(&parts.join(", "));
                out.push(']');
            }
            return;
        }
        let v = self.read(f.offset, f.size);
        let _ = match (f.kind == FieldKind::Pointer, f.signed, f.size) {
            (true, _, _) => write!(out, "0x{v:x}"),
            (false, true, 4) if f.is_long() => write!(out, "0x{:x}", v as u32),
            (false, true, 4) => write!(out, "{}", v as i32),
            (false, true, 2) => write!(out, "{:2}", v as i16),
            (false, true, 1) => write!(out, "{}", v as i8),
            (false, true, _) => write!(out, "{}", v as i64),
            (false, false, _) if f.is_long() => write!(out, "0x{v:x}"),
            (false, false, _) => write!(out, "{v}"),
        };
    }
}
