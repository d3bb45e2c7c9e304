//! `trace_printk!` arguments: what each kind stores and how a list of them
//! is laid out in the event, slot by slot as the kernel's `vbin_printf`
//! does.

use alloc::string::String;

/// How an argument is stored (its C conversion in trace.dat).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArgKind {
    /// An `i64` (8 bytes).
    Signed,
    /// A `u64` (8 bytes).
    Unsigned,
    /// Bytes then a NUL.
    Str,
}

/// One stored argument (what [`PrintkArg::to_arg`] turns a value into).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arg<'a> {
    /// Any signed integer, widened.
    Signed(i64),
    /// Any unsigned integer, widened.
    Unsigned(u64),
    /// Text (cut at the first NUL, which would end it in the event).
    Str(&'a [u8]),
    /// One character, stored as UTF-8 text.
    Char(char),
}

impl Arg<'_> {
    /// How the argument is stored: chars and text both go in as strings.
    #[inline(always)]
    pub(crate) fn kind(&self) -> ArgKind {
        match self {
            Arg::Signed(_) => ArgKind::Signed,
            Arg::Unsigned(_) => ArgKind::Unsigned,
            Arg::Str(_) | Arg::Char(_) => ArgKind::Str,
        }
    }

    /// Where this argument's bytes start when the previous one ended at
    /// `at`: `vbin_printf` aligns integer slots to 4 bytes but packs
    /// strings right after what precedes them, and readers (trace-cmd's
    /// libtraceevent among them) decode it that way.
    #[inline(always)]
    pub(crate) fn slot_start(&self, at: usize) -> usize {
        match self {
            Arg::Signed(_) | Arg::Unsigned(_) => at.next_multiple_of(4),
            Arg::Str(_) | Arg::Char(_) => at,
        }
    }

    /// Bytes stored (before alignment).
    #[inline(always)]
    pub(crate) fn stored_len(&self) -> usize {
        match self {
            Arg::Signed(_) | Arg::Unsigned(_) => 8,
            Arg::Str(text) => text.len() + 1,
            Arg::Char(c) => c.len_utf8() + 1,
        }
    }

    /// Writes the value at the start of `out`.
    #[inline(always)]
    pub(crate) fn store(&self, out: &mut [u8]) {
        match *self {
            Arg::Signed(v) => out[..8].copy_from_slice(&v.to_ne_bytes()),
            Arg::Unsigned(v) => out[..8].copy_from_slice(&v.to_ne_bytes()),
            Arg::Str(text) => {
                out[..text.len()].copy_from_slice(text);
                out[text.len()] = 0;
            }
            Arg::Char(c) => {
                let mut utf8 = [0u8; 4];
                let n = c.encode_utf8(&mut utf8).len();
                out[..n].copy_from_slice(&utf8[..n]);
                out[n] = 0;
            }
        }
    }
}

/// A value `trace_printk!` can store: integers, `bool`, `char`, strings.
pub trait PrintkArg {
    /// The value as a stored argument (no formatting happens).
    fn to_arg(&self) -> Arg<'_>;
}

macro_rules! integer_arg {
    ($variant:ident, $wide:ty: $($t:ty),*) => {$(
        impl PrintkArg for $t {
            #[inline(always)]
            fn to_arg(&self) -> Arg<'_> {
                Arg::$variant(*self as $wide)
            }
        }
    )*};
}

integer_arg!(Signed, i64: i8, i16, i32, i64, isize);
integer_arg!(Unsigned, u64: u8, u16, u32, u64, usize);

impl PrintkArg for str {
    #[inline]
    fn to_arg(&self) -> Arg<'_> {
        let bytes = self.as_bytes();
        let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        Arg::Str(&bytes[..end])
    }
}

impl PrintkArg for String {
    #[inline]
    fn to_arg(&self) -> Arg<'_> {
        self.as_str().to_arg()
    }
}

impl PrintkArg for bool {
    #[inline]
    fn to_arg(&self) -> Arg<'_> {
        Arg::Str(if *self { b"true" } else { b"false" })
    }
}

impl PrintkArg for char {
    #[inline]
    fn to_arg(&self) -> Arg<'_> {
        Arg::Char(*self)
    }
}

impl<T: PrintkArg + ?Sized> PrintkArg for &T {
    #[inline]
    fn to_arg(&self) -> Arg<'_> {
        (**self).to_arg()
    }
}

/// The arguments of one `trace_printk!` call as a list whose types are
/// known at compile time: `(&a, (&b, (&c, ())))`. Walking it is unrolled
/// and each argument's [`Arg`] variant is a constant, so storing integers
/// compiles to plain stores at fixed offsets.
#[doc(hidden)]
pub trait ArgList {
    /// Calls `each` with every argument, in order.
    fn for_each_arg(&self, each: &mut impl FnMut(Arg<'_>));
    /// Where the arguments end when the first one may start at `at`.
    fn end_from(&self, at: usize) -> usize;
    /// Stores the arguments from `at` on, then zeroes the rest of `out`.
    fn store_from(&self, out: &mut [u8], at: usize);
}

impl ArgList for () {
    #[inline(always)]
    fn for_each_arg(&self, _each: &mut impl FnMut(Arg<'_>)) {}
    #[inline(always)]
    fn end_from(&self, at: usize) -> usize {
        at
    }
    #[inline(always)]
    fn store_from(&self, out: &mut [u8], at: usize) {
        out[at..].fill(0);
    }
}

// Recursion rather than a closure per argument: every step is inlined, so
// for integers the offsets are constants and the zero fills vanish.
impl<Head: PrintkArg + ?Sized, Tail: ArgList> ArgList for (&Head, Tail) {
    #[inline(always)]
    fn for_each_arg(&self, each: &mut impl FnMut(Arg<'_>)) {
        each(self.0.to_arg());
        self.1.for_each_arg(each);
    }
    #[inline(always)]
    fn end_from(&self, at: usize) -> usize {
        let arg = self.0.to_arg();
        self.1.end_from(arg.slot_start(at) + arg.stored_len())
    }
    #[inline(always)]
    fn store_from(&self, out: &mut [u8], at: usize) {
        let arg = self.0.to_arg();
        let start = arg.slot_start(at);
        out[at..start].fill(0);
        arg.store(&mut out[start..]);
        self.1.store_from(out, start + arg.stored_len());
    }
}

/// Bytes a list of arguments takes in the event (as [`args_len`]).
#[inline(always)]
pub(super) fn list_len(args: &impl ArgList) -> usize {
    args.end_from(0)
}

/// Writes a list of arguments in `vbin_printf` layout (as [`store_args`]).
#[inline(always)]
pub(super) fn store_list(args: &impl ArgList, out: &mut [u8]) {
    args.store_from(out, 0);
}

/// Bytes the arguments take in the event.
#[inline]
pub(crate) fn args_len(args: &[Arg<'_>]) -> usize {
    args.iter()
        .fold(0, |at, arg| arg.slot_start(at) + arg.stored_len())
}

/// Writes the arguments in `vbin_printf` layout.
#[inline]
pub(crate) fn store_args(args: &[Arg<'_>], out: &mut [u8]) {
    let mut at = 0usize;
    for arg in args {
        let start = arg.slot_start(at);
        out[at..start].fill(0);
        arg.store(&mut out[start..]);
        at = start + arg.stored_len();
    }
    out[at..].fill(0);
}
