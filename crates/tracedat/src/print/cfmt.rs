//! C `printf` conversions, enough for the kernel's print formats: flags
//! `-0+ #`, width and precision (literal or `*`), and `d i u x X o c s p`.

#[allow(unused_imports)]
use crate::prelude::*;

use core::fmt::Write;

/// Widths and precisions beyond this are cut: a format or a record (`%*s`)
/// could otherwise ask for gigabytes of padding.
const MAX_WIDTH: usize = 4096;

/// A parsed conversion such as `%-08.3lx`.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct Spec {
    pub(crate) left: bool,
    pub(crate) zero: bool,
    pub(crate) plus: bool,
    pub(crate) space: bool,
    pub(crate) alt: bool,
    pub(crate) width: Option<usize>,
    pub(crate) precision: Option<usize>,
    /// Width given as `*` (taken from an argument).
    pub(crate) star_width: bool,
    /// Length modifier: -2 `hh`, -1 `h`, 0 none, 1 `l`/`z`, 2 `ll`/`L`.
    pub(crate) length: i32,
    pub(crate) conv: u8,
}

impl Spec {
    /// Parses the text after `%` up to and including the conversion
    /// letter; returns the spec and the bytes consumed.
    pub(crate) fn parse(text: &[u8]) -> Option<(Spec, usize)> {
        let mut s = Spec::default();
        let mut i = 0;
        while let Some(&c) = text.get(i) {
            match c {
                b'-' => s.left = true,
                b'0' => s.zero = true,
                b'+' => s.plus = true,
                b' ' => s.space = true,
                b'#' => s.alt = true,
                _ => break,
            }
            i += 1;
        }
        if text.get(i) == Some(&b'*') {
            s.star_width = true;
            i += 1;
        } else {
            let (n, used) = number(&text[i..]);
            s.width = n;
            i += used;
        }
        if text.get(i) == Some(&b'.') {
            i += 1;
            let (n, used) = number(&text[i..]);
            s.precision = Some(n.unwrap_or(0));
            i += used;
        }
        loop {
            match text.get(i)? {
                b'h' => s.length -= 1,
                b'l' => s.length += 1,
                b'L' | b'q' => s.length = 2,
                b'z' | b'Z' | b'j' | b't' => s.length = 1,
                _ => break,
            }
            i += 1;
        }
        s.conv = *text.get(i)?;
        Some((s, i + 1))
    }

    fn pad(&self, out: &mut String, body: &str, numeric: bool) {
        let width = self.width.unwrap_or(0).min(MAX_WIDTH);
        let len = if body.is_ascii() {
            body.len()
        } else {
            body.chars().count()
        };
        if len >= width {
            out.push_str(body);
        } else if self.left {
            out.push_str(body);
            out.extend(core::iter::repeat_n(' ', width - len));
        } else if self.zero && numeric && self.precision.is_none() {
            // Zeros go after the sign and the 0x prefix.
            let mut split = usize::from(body.starts_with(['-', '+', ' ']));
            if body[split..].starts_with("0x") || body[split..].starts_with("0X") {
                split += 2;
            }
            out.push_str(&body[..split]);
            out.extend(core::iter::repeat_n('0', width - len));
            out.push_str(&body[split..]);
        } else {
            out.extend(core::iter::repeat_n(' ', width - len));
            out.push_str(body);
        }
    }

    /// Prints `value` (already truncated and sign-extended to the
    /// argument's C type) with an integer conversion.
    pub(crate) fn int(&self, out: &mut String, value: i128) {
        if self.is_plain() {
            // Most kernel conversions are a bare `%d`, `%lu` or `%llx`.
            let _ = match self.conv {
                b'x' => write!(out, "{value:x}"),
                b'X' => write!(out, "{value:X}"),
                b'o' => write!(out, "{value:o}"),
                _ => write!(out, "{value}"),
            };
            return;
        }
        let mut body = String::new();
        let (neg, mag) = (value < 0, value.unsigned_abs());
        let mut digits = match self.conv {
            b'x' => format!("{mag:x}"),
            b'X' => format!("{mag:X}"),
            b'o' => format!("{mag:o}"),
            _ => mag.to_string(),
        };
        if let Some(p) = self.precision {
            let p = p.min(MAX_WIDTH);
            if p == 0 && mag == 0 {
                digits.clear();
            }
            while digits.len() < p {
                digits.insert(0, '0');
            }
        }
        if neg {
            body.push('-');
        } else if matches!(self.conv, b'd' | b'i') {
            if self.plus {
                body.push('+');
            } else if self.space {
                body.push(' ');
            }
        }
        if self.alt && mag != 0 {
            match self.conv {
                b'x' => body.push_str("0x"),
                b'X' => body.push_str("0X"),
                b'o' if !digits.starts_with('0') => body.push('0'),
                _ => {}
            }
        }
        body.push_str(&digits);
        self.pad(out, &body, true);
    }

    /// No flags, width or precision.
    pub(crate) fn is_plain(&self) -> bool {
        !(self.left || self.zero || self.plus || self.space || self.alt)
            && self.width.is_none()
            && self.precision.is_none()
    }

    /// Prints text with `%s`: precision cuts, width pads.
    pub(crate) fn str(&self, out: &mut String, text: &str) {
        let cut: String = match self.precision {
            Some(p) => text.chars().take(p).collect(),
            None => text.to_string(),
        };
        self.pad(out, &cut, false);
    }

    /// Prints a character with `%c`.
    pub(crate) fn char(&self, out: &mut String, c: u8) {
        let s = char::from(c).to_string();
        self.pad(out, &s, false);
    }

    /// Prints a pointer as glibc's `%p` does: `(nil)` or `0x...`.
    pub(crate) fn pointer(&self, out: &mut String, value: u64) {
        let body = if value == 0 {
            "(nil)".to_string()
        } else {
            let mut b = String::new();
            let _ = write!(b, "0x{value:x}");
            b
        };
        self.pad(out, &body, false);
    }

    /// Truncates `value` to the C type the length modifier names, signed
    /// for `d`/`i`/`c`, unsigned otherwise, as libtraceevent's casts do.
    pub(crate) fn as_c_type(&self, value: u64) -> i128 {
        let signed = matches!(self.conv, b'd' | b'i');
        match (self.length, signed) {
            (-2, true) => i128::from(value as i8),
            (-2, false) => i128::from(value as u8),
            (-1, true) => i128::from(value as i16),
            (-1, false) => i128::from(value as u16),
            (0, true) => i128::from(value as i32),
            (0, false) => i128::from(value as u32),
            (_, true) => i128::from(value as i64),
            (_, false) => i128::from(value),
        }
    }
}

fn number(text: &[u8]) -> (Option<usize>, usize) {
    let end = text
        .iter()
        .position(|c| !c.is_ascii_digit())
        .unwrap_or(text.len());
    if end == 0 {
        return (None, 0);
    }
    let n = core::str::from_utf8(&text[..end])
        .ok()
        .and_then(|s| s.parse().ok());
    (n, end)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fmt(spec: &str, v: u64) -> String {
        let (s, _) = Spec::parse(spec.as_bytes()).unwrap();
        let mut out = String::new();
        s.int(&mut out, s.as_c_type(v));
        out
    }

    #[test]
    fn ints_like_glibc() {
        assert_eq!(fmt("d", u64::MAX), "-1");
        assert_eq!(fmt("u", u64::MAX), "4294967295");
        assert_eq!(fmt("lu", u64::MAX), "18446744073709551615");
        assert_eq!(fmt("03d", 1), "001");
        assert_eq!(fmt("-5d|", 7), "7    ");
        assert_eq!(fmt("#x", 255), "0xff");
        assert_eq!(fmt("08llx", 0xabc), "00000abc");
        assert_eq!(fmt(".3d", 5), "005");
        assert_eq!(fmt("5d", (-3i64) as u64), "   -3");
        assert_eq!(fmt("05d", (-3i64) as u64), "-0003");
    }
}
