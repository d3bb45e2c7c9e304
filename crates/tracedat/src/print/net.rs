//! `%pI4`, `%pI6`, `%pI6c` and `%pISpc`: network addresses as
//! libtraceevent prints them.

#[allow(unused_imports)]
use crate::prelude::*;

use core::fmt::Write;

use super::expr::Arg;
use super::Context;

pub(crate) fn ip(cx: &Context<'_>, ext: &str, arg: &Arg, out: &mut String) {
    let leading_zeros = ext.starts_with('i');
    let Some(bytes) = cx.field_bytes(arg) else {
        out.push_str("INVALIDIP");
        return;
    };
    match ext.as_bytes().get(1) {
        Some(b'4') => {
            if bytes.len() != 4 {
                out.push_str("INVALIDIPv4");
                return;
            }
            let reverse = matches!(ext.as_bytes().get(2), Some(b'l'))
                || (matches!(ext.as_bytes().get(2), Some(b'h')) && !cx.tables.big_endian);
            ip4(bytes, leading_zeros, reverse, out);
        }
        Some(b'6') => {
            if bytes.len() != 16 {
                out.push_str("INVALIDIPv6");
                return;
            }
            if ext.ends_with('c') && !leading_zeros {
                ip6_compressed(bytes, out);
            } else {
                ip6(bytes, !leading_zeros, out);
            }
        }
        Some(b'S') => sockaddr(cx, ext, bytes, out),
        _ => {}
    }
}

fn ip4(b: &[u8], leading_zeros: bool, reverse: bool, out: &mut String) {
    let mut b = [b[0], b[1], b[2], b[3]];
    if reverse {
        b.reverse();
    }
    let _ = if leading_zeros {
        write!(out, "{:03}.{:03}.{:03}.{:03}", b[0], b[1], b[2], b[3])
    } else {
        write!(out, "{}.{}.{}.{}", b[0], b[1], b[2], b[3])
    };
}

fn ip6(b: &[u8], colons: bool, out: &mut String) {
    for j in (0..16).step_by(2) {
        let _ = write!(out, "{:02x}{:02x}", b[j], b[j + 1]);
        if colons && j < 14 {
            out.push(':');
        }
    }
}

/// RFC 5952 style: the longest run of zero words becomes `::`, and
/// IPv4-mapped and ISATAP addresses end in dotted quads.
fn ip6_compressed(b: &[u8], out: &mut String) {
    let word = |i: usize| u16::from_be_bytes([b[2 * i], b[2 * i + 1]]);
    let v4mapped = (0..5).all(|i| word(i) == 0) && word(5) == 0xffff;
    let isatap = (word(4) | 0x0200) == 0x0200 && word(5) == 0x5efe;
    let use_v4 = v4mapped || isatap;
    let range = if use_v4 { 6 } else { 8 };
    let mut longest = 1;
    let mut colonpos: Option<usize> = None;
    for i in 0..range {
        let run = (i..range).take_while(|&j| word(j) == 0).count();
        if run > longest {
            longest = run;
            colonpos = Some(i);
        }
    }
    let mut needcolon = false;
    let mut i = 0;
    while i < range {
        if Some(i) == colonpos {
            if needcolon || i == 0 {
                out.push(':');
            }
            out.push(':');
            needcolon = false;
            i += longest;
            continue;
        }
        if needcolon {
            out.push(':');
        }
        let _ = write!(out, "{:x}", word(i));
        needcolon = true;
        i += 1;
    }
    if use_v4 {
        if needcolon {
            out.push(':');
        }
        ip4(&b[12..16], false, false, out);
    }
}

fn sockaddr(cx: &Context<'_>, ext: &str, b: &[u8], out: &mut String) {
    let flags = &ext[2..];
    let port = flags.contains('p');
    let compressed = flags.contains('c');
    let leading_zeros = ext.starts_with('i');
    let family = if cx.tables.big_endian {
        b.get(..2).map(|f| u16::from_be_bytes([f[0], f[1]]))
    } else {
        b.get(..2).map(|f| u16::from_le_bytes([f[0], f[1]]))
    };
    match family {
        Some(2) => {
            if b.len() < 16 {
                out.push_str("INVALIDIPv4");
                return;
            }
            ip4(&b[4..8], leading_zeros, false, out);
            if port {
                let _ = write!(out, ":{}", u16::from_be_bytes([b[2], b[3]]));
            }
        }
        Some(10) => {
            if b.len() < 28 {
                out.push_str("INVALIDIPv6");
                return;
            }
            if port {
                out.push('[');
            }
            if compressed {
                ip6_compressed(&b[8..24], out);
            } else {
                ip6(&b[8..24], !leading_zeros, out);
            }
            if port {
                let _ = write!(out, "]:{}", u16::from_be_bytes([b[2], b[3]]));
            }
        }
        _ => {}
    }
}
