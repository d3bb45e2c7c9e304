//! `trace_printk!`: debug prints into the trace that store their arguments
//! in binary (an `ftrace/bprint` event) and format only when read.
//!
//! The format uses Rust's `{}` syntax (also `{:x}`, `{:#x}`, `{:X}`,
//! `{:?}`, `{{`, `}}`), checked at compile time against the argument
//! count. Arguments are integers, `bool`, `char` and strings. Each call site
//! also gets a C `printf` translation (`%lld`, `%llu`, `%llx`, `%s`) for
//! trace.dat's printk-format table, and its binary layout follows the
//! kernel's `vbin_printf` (4-byte aligned slots, 8-byte integers, strings
//! inline and NUL-terminated), so `trace-cmd report` can print it too.
//!
//! ```
//! use hotkern_trace::{trace_printk, TraceConfig, Tracer};
//! let tracer = Tracer::with_threads(TraceConfig::small(), 1).unwrap().install().unwrap();
//! trace_printk!("block {} of {:#x}: {}", 7u32, 255u64, "ok");
//! let records = tracer.drain_records();
//! let text = hotkern_trace::printk::format_bprint(&records[0].payload).unwrap();
//! assert_eq!(text, "block 7 of 0xff: ok");
//! tracer.uninstall();
//! ```

use alloc::string::String;
use alloc::vec::Vec;
use core::fmt::Write;
use core::sync::atomic::{AtomicBool, Ordering};

use crate::function::FunctionSite;

mod args;

pub(crate) use args::ArgKind;
pub(crate) use args::{args_len, store_args};
use args::{list_len, store_list};
pub use args::{Arg, ArgList, PrintkArg};

/// Counts the placeholders of a format, or returns `usize::MAX` if it is
/// malformed or uses an unsupported spec (compile-time check of
/// `trace_printk!`).
#[doc(hidden)]
pub const fn placeholders(format: &str) -> usize {
    let bytes = format.as_bytes();
    let mut i = 0;
    let mut count = 0;
    while i < bytes.len() {
        if bytes[i] == b'{' {
            if i + 1 < bytes.len() && bytes[i + 1] == b'{' {
                i += 2;
                continue;
            }
            let mut end = i + 1;
            while end < bytes.len() && bytes[end] != b'}' {
                end += 1;
            }
            if end >= bytes.len() || spec_of(bytes, i + 1, end).is_none() {
                return usize::MAX;
            }
            count += 1;
            i = end + 1;
        } else if bytes[i] == b'}' {
            if i + 1 < bytes.len() && bytes[i + 1] == b'}' {
                i += 2;
                continue;
            }
            return usize::MAX;
        } else {
            i += 1;
        }
    }
    count
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Spec {
    Plain,
    Hex,
    AltHex,
    UpperHex,
}

const fn spec_of(bytes: &[u8], start: usize, end: usize) -> Option<Spec> {
    let len = end - start;
    if len == 0 {
        return Some(Spec::Plain);
    }
    if bytes[start] != b':' {
        return None;
    }
    if len == 2 {
        return match bytes[start + 1] {
            b'x' => Some(Spec::Hex),
            b'X' => Some(Spec::UpperHex),
            b'?' => Some(Spec::Plain),
            _ => None,
        };
    }
    if len == 3 && bytes[start + 1] == b'#' && bytes[start + 2] == b'x' {
        return Some(Spec::AltHex);
    }
    None
}

enum Piece<'a> {
    Text(&'a str),
    Arg(Spec),
}

fn pieces(format: &str) -> Vec<Piece<'_>> {
    let bytes = format.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    let mut text_start = 0;
    while i < bytes.len() {
        let doubled = i + 1 < bytes.len() && bytes[i + 1] == bytes[i];
        match bytes[i] {
            b'{' | b'}' if doubled => {
                out.push(Piece::Text(&format[text_start..=i]));
                i += 2;
                text_start = i;
            }
            b'{' => {
                out.push(Piece::Text(&format[text_start..i]));
                let end = format[i..].find('}').map_or(bytes.len(), |p| i + p);
                out.push(Piece::Arg(
                    spec_of(bytes, i + 1, end).unwrap_or(Spec::Plain),
                ));
                i = end + 1;
                text_start = i;
            }
            _ => i += 1,
        }
    }
    out.push(Piece::Text(&format[text_start.min(format.len())..]));
    out
}

/// One `trace_printk!` call site: what the macro expands to.
#[doc(hidden)]
#[derive(Debug)]
pub struct PrintkSite {
    format: &'static str,
    symbol: FunctionSite,
    registered: AtomicBool,
}

struct Entry {
    site: &'static PrintkSite,
    kinds: Vec<ArgKind>,
    c_format: String,
}

static SITES: spin::Mutex<Vec<Entry>> = spin::Mutex::new(Vec::new());

impl PrintkSite {
    /// Used by [`trace_printk!`](crate::trace_printk).
    pub const fn new(
        format: &'static str,
        module: &'static str,
        file: &'static str,
        line: u32,
    ) -> Self {
        PrintkSite {
            format,
            symbol: FunctionSite::symbol(module, module, file, line),
            registered: AtomicBool::new(false),
        }
    }

    /// The Rust format string.
    pub fn format(&self) -> &'static str {
        self.format
    }

    /// The address stored in the event's `fmt` field.
    pub fn address(&'static self) -> u64 {
        self as *const PrintkSite as u64
    }

    fn register(&'static self, kinds: Vec<ArgKind>) {
        let mut sites = SITES.lock();
        if self.registered.load(Ordering::Acquire) {
            return;
        }
        let c_format = c_format(self.format, &kinds);
        sites.push(Entry {
            site: self,
            kinds,
            c_format,
        });
        self.registered.store(true, Ordering::Release);
    }

    /// Records the call in every installed tracer.
    #[cold]
    pub fn emit(&'static self, args: &[Arg<'_>]) {
        if !self.registered.load(Ordering::Acquire) {
            self.register(args.iter().map(Arg::kind).collect());
        }
        let ip = self.symbol_address();
        let len = args_len(args);
        if len > crate::ring::page::MAX_PAYLOAD - 24 {
            return;
        }
        let mut bits = crate::tracer::installed_mask();
        while bits != 0 {
            let slot = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            if let Some(tracer) = crate::tracer::instance(slot) {
                tracer.record_bprint(ip, self.address(), len, |out| store_args(args, out));
            }
        }
    }

    /// [`PrintkSite::emit`] for the argument list `trace_printk!` builds:
    /// compiled once per list of argument types, with the layout worked
    /// out at compile time for integers.
    #[doc(hidden)]
    #[cold]
    #[inline(never)]
    pub fn emit_list(&'static self, args: impl ArgList) {
        if !self.registered.load(Ordering::Acquire) {
            let mut kinds = Vec::new();
            args.for_each_arg(&mut |arg| kinds.push(arg.kind()));
            self.register(kinds);
        }
        let ip = self.symbol_address();
        let len = list_len(&args);
        if len > crate::ring::page::MAX_PAYLOAD - 24 {
            return;
        }
        let mut bits = crate::tracer::installed_mask();
        while bits != 0 {
            let slot = bits.trailing_zeros() as usize;
            bits &= bits - 1;
            if let Some(tracer) = crate::tracer::instance(slot) {
                tracer.record_bprint(ip, self.address(), len, |out| store_list(&args, out));
            }
        }
    }

    #[inline]
    fn symbol_address(&'static self) -> u64 {
        self.symbol.address()
    }
}

/// True when some tracer is installed (`trace_printk!`'s only cost otherwise).
#[inline(always)]
#[doc(hidden)]
pub fn is_hot() -> bool {
    crate::tracer::installed_mask() != 0
}

fn c_format(format: &str, kinds: &[ArgKind]) -> String {
    let mut out = String::new();
    let mut kinds = kinds.iter();
    for piece in pieces(format) {
        match piece {
            Piece::Text(text) => {
                for c in text.chars() {
                    if c == '%' {
                        out.push_str("%%");
                    } else {
                        out.push(c);
                    }
                }
            }
            Piece::Arg(spec) => {
                let kind = kinds.next().copied().unwrap_or(ArgKind::Str);
                let conversion = match (kind, spec) {
                    (ArgKind::Str, _) => "%s",
                    (ArgKind::Signed, Spec::Plain) => "%lld",
                    (ArgKind::Unsigned, Spec::Plain) => "%llu",
                    (_, Spec::Hex) => "%llx",
                    (_, Spec::AltHex) => "%#llx",
                    (_, Spec::UpperHex) => "%llX",
                };
                out.push_str(conversion);
            }
        }
    }
    out
}

/// The printk-format table of trace.dat: (format address, C format).
pub(crate) fn formats() -> Vec<(u64, String)> {
    SITES
        .lock()
        .iter()
        .map(|e| (e.site.address(), e.c_format.clone()))
        .collect()
}

/// Formats a `bprint` payload (common header included) the Rust way.
/// `None` if the format address is unknown or the arguments are truncated.
pub fn format_bprint(payload: &[u8]) -> Option<String> {
    let address = u64::from_ne_bytes(payload.get(16..24)?.try_into().ok()?);
    let args = payload.get(24..)?;
    let sites = SITES.lock();
    let entry = sites.iter().find(|e| e.site.address() == address)?;
    let mut out = String::new();
    let mut at = 0usize;
    let mut kinds = entry.kinds.iter();
    for piece in pieces(entry.site.format) {
        match piece {
            Piece::Text(text) => out.push_str(text),
            Piece::Arg(spec) => {
                let kind = *kinds.next()?;
                match kind {
                    ArgKind::Str => {
                        let bytes = args.get(at..)?;
                        let end = bytes.iter().position(|&b| b == 0)?;
                        out.push_str(core::str::from_utf8(&bytes[..end]).ok()?);
                        at += end + 1;
                    }
                    ArgKind::Signed | ArgKind::Unsigned => {
                        at = at.next_multiple_of(4);
                        let raw = u64::from_ne_bytes(args.get(at..at + 8)?.try_into().ok()?);
                        at += 8;
                        let _ = match (kind, spec) {
                            (ArgKind::Signed, Spec::Plain) => write!(out, "{}", raw as i64),
                            (_, Spec::Plain) => write!(out, "{raw}"),
                            (_, Spec::Hex) => write!(out, "{raw:x}"),
                            (_, Spec::AltHex) => write!(out, "{raw:#x}"),
                            (_, Spec::UpperHex) => write!(out, "{raw:X}"),
                        };
                    }
                }
            }
        }
    }
    Some(out)
}

/// Records a formatted debug message in every installed tracer, storing
/// the arguments and formatting only when the trace is read.
#[macro_export]
macro_rules! trace_printk {
    ($format:literal $(, $arg:expr)* $(,)?) => {{
        const _: () = ::core::assert!(
            $crate::printk::placeholders($format) == [$(::core::stringify!($arg)),*].len(),
            "trace_printk!: the format's placeholders do not match the arguments"
        );
        static __HOTKERN_PRINTK: $crate::printk::PrintkSite = $crate::printk::PrintkSite::new(
            $format,
            ::core::module_path!(),
            ::core::file!(),
            ::core::line!(),
        );
        if $crate::printk::is_hot() {
            __HOTKERN_PRINTK.emit_list($crate::__printk_args!($($arg),*));
        }
    }};
}

/// Builds `trace_printk!`'s argument list `(&a, (&b, ()))`.
#[doc(hidden)]
#[macro_export]
macro_rules! __printk_args {
    () => { () };
    ($head:expr $(, $tail:expr)*) => {
        (&$head, $crate::__printk_args!($($tail),*))
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_counted_and_bad_specs_rejected() {
        assert_eq!(placeholders("a {} b {:x} {{}} {:#x} {:X} {:?}"), 5);
        assert_eq!(placeholders("none"), 0);
        assert_eq!(placeholders("{:>5}"), usize::MAX);
        assert_eq!(placeholders("open {"), usize::MAX);
        assert_eq!(placeholders("close }"), usize::MAX);
    }

    #[test]
    fn argument_lists_store_exactly_like_slices() {
        let owned = String::from("owned");
        let list = crate::__printk_args!(-3i32, "hey", 9u8, 'é', true, owned, 7usize);
        let slice = [
            (-3i32).to_arg(),
            "hey".to_arg(),
            9u8.to_arg(),
            'é'.to_arg(),
            true.to_arg(),
            owned.to_arg(),
            7usize.to_arg(),
        ];
        let mut seen = Vec::new();
        list.for_each_arg(&mut |arg| seen.push(arg.stored_len()));
        assert_eq!(seen, slice.iter().map(Arg::stored_len).collect::<Vec<_>>());
        assert_eq!(list_len(&list), args_len(&slice));
        let mut from_list = [0xaau8; 64];
        let mut from_slice = [0x55u8; 64];
        let n = args_len(&slice);
        store_list(&list, &mut from_list[..n]);
        store_args(&slice, &mut from_slice[..n]);
        assert_eq!(from_list[..n], from_slice[..n]);
        let mut kinds = Vec::new();
        list.for_each_arg(&mut |arg| kinds.push(arg.kind()));
        assert_eq!(kinds, slice.iter().map(Arg::kind).collect::<Vec<_>>());
        assert_eq!(list_len(&crate::__printk_args!()), 0);
    }

    #[test]
    fn c_translation_and_layout_follow_vbin_printf() {
        let kinds = [
            ArgKind::Signed,
            ArgKind::Str,
            ArgKind::Unsigned,
            ArgKind::Unsigned,
        ];
        assert_eq!(
            c_format("{} 100% {} {:x} {{{:#x}}}", &kinds),
            "%lld 100%% %s %llx {%#llx}"
        );
        let args = [(-3i32).to_arg(), "hey".to_arg(), 9u8.to_arg()];
        // 8 bytes, "hey\0" at 8, next slot aligned to 12.
        assert_eq!(args_len(&args), 20);
        let mut out = [0xffu8; 24];
        store_args(&args, &mut out);
        assert_eq!(&out[0..8], &(-3i64).to_ne_bytes());
        assert_eq!(&out[8..12], b"hey\0");
        assert_eq!(&out[12..20], &9u64.to_ne_bytes());
        assert_eq!(&out[20..], &[0, 0, 0, 0]);
    }

    #[test]
    fn strings_in_a_row_are_packed_and_integers_realigned() {
        let args = [
            5u32.to_arg(),
            "xy".to_arg(),
            "hello".to_arg(),
            9u64.to_arg(),
        ];
        // 8 bytes, "xy\0" at 8, "hello\0" right after at 11, then the
        // integer realigned from 17 to 20.
        assert_eq!(args_len(&args), 28);
        let mut out = [0xffu8; 32];
        store_args(&args, &mut out);
        assert_eq!(&out[8..11], b"xy\0");
        assert_eq!(&out[11..17], b"hello\0");
        assert_eq!(&out[17..20], &[0, 0, 0]);
        assert_eq!(&out[20..28], &9u64.to_ne_bytes());
    }
}
