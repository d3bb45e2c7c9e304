//! `trace_printk()` records (ftrace's `bprint`): the format lives in the
//! file's printk table, found by address, and the arguments are packed in
//! the record's `buf`, each aligned to 4 bytes, strings inline.

#[allow(unused_imports)]
use crate::prelude::*;

use super::expr::Arg;
use super::{PrintFmt, Tables};
use crate::format::read_uint;
use crate::format::EventFormat;

/// The format and arguments of one `bprint` record, as libtraceevent
/// rebuilds them; `None` if the event lacks its `ip`, `fmt` or `buf` field.
pub(crate) fn bprint_format(event: &EventFormat, data: &[u8], t: &Tables) -> Option<PrintFmt> {
    let ip = event.field("ip")?.read_u64(data, t.big_endian)?;
    let fmt_addr = event.field("fmt")?.read_u64(data, t.big_endian)?;
    let buf = event.field("buf")?.offset;
    let format = match t.printk.get(&fmt_addr) {
        Some(f) => format!("%ps: {f}"),
        None => format!("%ps: (NO FORMAT FOUND at {fmt_addr:x})\\n"),
    };
    let mut args = vec![Arg::Num(ip, ip.to_string())];
    // The arguments are the message's, after the `%ps: ` of the address.
    args.extend(binary_args(&format.as_bytes()[5..], data, buf, t));
    PrintFmt::bind(&format, args)
}

/// A `trace_printk` message alone: `format` applied to `args` packed as
/// the kernel's `vbin_printf` packs them (see [`binary_args`]).
pub(crate) fn message_format(format: &str, args: &[u8], t: &Tables) -> Option<PrintFmt> {
    PrintFmt::bind(format, binary_args(format.as_bytes(), args, 0, t))
}

/// The arguments of `f`'s conversions, read from `data` at `at`: numbers
/// aligned to 4 bytes (`long` and pointers `long_size` wide), strings
/// inline with their NUL.
fn binary_args(f: &[u8], data: &[u8], mut at: usize, t: &Tables) -> Vec<Arg> {
    let mut args = Vec::new();
    let mut i = 0;
    while i < f.len() && at < data.len() {
        if f[i] != b'%' {
            i += 1;
            continue;
        }
        let mut ls = 0;
        i += 1;
        while i < f.len() {
            let c = f[i];
            let size = match c {
                b'%' => break,
                b'l' => {
                    ls += 1;
                    i += 1;
                    continue;
                }
                b'L' => {
                    ls = 2;
                    i += 1;
                    continue;
                }
                b'z' | b'Z' => {
                    ls = 1;
                    i += 1;
                    continue;
                }
                b'0'..=b'9' | b'.' | b'#' | b'+' => {
                    i += 1;
                    continue;
                }
                b's' => {
                    let s = cstr(data, at);
                    at += s.len() + 1;
                    args.push(Arg::Str(s));
                    break;
                }
                b'p' if f.get(i + 1).is_some_and(|c| c.is_ascii_alphanumeric())
                    && !matches!(f[i + 1], b's' | b'S' | b'x')
                    && !(matches!(f[i + 1], b'f' | b'F') && f.get(i + 2) != Some(&b'w'))
                    && data
                        .get(at)
                        .is_some_and(|b| b.is_ascii_graphic() || *b == b' ') =>
                {
                    // Newer kernels store what %p* points at as a string.
                    let s = cstr(data, at);
                    at += s.len() + 1;
                    args.push(Arg::Str(s));
                    break;
                }
                b'p' => t.long_size,
                b'd' | b'u' | b'i' | b'x' | b'X' | b'o' => match ls {
                    0 => 4,
                    1 => t.long_size,
                    _ => 8,
                },
                b'*' => 4,
                _ => break,
            };
            at = (at + 3) & !3;
            let v = read_uint(data.get(at..).unwrap_or(&[]), t.big_endian, size).unwrap_or(0);
            at += size;
            args.push(Arg::Num(v, (v as i64).to_string()));
            if c != b'*' {
                break;
            }
            i += 1;
        }
        i += 1;
    }
    args
}

fn cstr(data: &[u8], at: usize) -> String {
    let bytes = data.get(at..).unwrap_or(&[]);
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}
