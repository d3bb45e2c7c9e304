//! Shapes the attribute must accept: generics, `where` clauses, methods
//! with `self`, `?`, attributes and visibility kept, `unsafe` and `const`
//! generics; and, as the body runs in a closure, borrows returned from
//! `self` and arguments, `mut` and pattern arguments, `impl Trait` in and
//! out, and functions that never return.

#![deny(warnings)]

use std::fmt::Debug;

#[hotkern_trace::function]
pub fn generic<T: Debug + Clone>(value: &T) -> T
where
    T: Default,
{
    value.clone()
}

#[hotkern_trace::function]
fn fallible(text: &str) -> Result<u32, std::num::ParseIntError> {
    let n: u32 = text.parse()?;
    Ok(n + 1)
}

struct Disk {
    blocks: u64,
}

impl Disk {
    #[hotkern_trace::function]
    fn grow(&mut self, by: u64) -> u64 {
        self.blocks += by;
        self.blocks
    }

    #[hotkern_trace::function]
    #[must_use]
    fn size(&self) -> u64 {
        self.blocks
    }

    #[hotkern_trace::function]
    fn blocks(&self) -> &u64 {
        &self.blocks
    }

    #[hotkern_trace::function]
    fn blocks_mut(&mut self) -> &mut u64 {
        &mut self.blocks
    }

    #[hotkern_trace::function]
    fn into_blocks(self) -> u64 {
        self.blocks
    }
}

#[hotkern_trace::function]
fn longest<'a>(a: &'a str, b: &'a str) -> &'a str {
    if a.len() >= b.len() {
        return a;
    }
    b
}

#[hotkern_trace::function]
fn sum((a, b): (u32, u32), mut extra: u32) -> u32 {
    extra += a;
    extra + b
}

#[hotkern_trace::function]
fn evens(items: impl IntoIterator<Item = u32>) -> impl Iterator<Item = u32> {
    items.into_iter().filter(|n| n % 2 == 0)
}

#[hotkern_trace::function]
#[allow(dead_code)]
fn never_returns(code: i32) -> ! {
    std::process::exit(code)
}

#[hotkern_trace::function]
/// # Safety
/// `p` must be valid for reads.
unsafe fn read(p: *const u8) -> u8 {
    // SAFETY: the caller's promise.
    unsafe { *p }
}

#[hotkern_trace::function]
fn first<const N: usize>(array: [u8; N]) -> Option<u8> {
    array.first().copied()
}

/// A function another macro makes: its body arrives as a `block` fragment,
/// the shape in which a block nested in the expansion warned
/// (`unused_braces`, an error under this file's `deny(warnings)`).
macro_rules! traced {
    (fn $name:ident($($argument:ident: $type:ty),*) -> $output:ty $body:block) => {
        #[hotkern_trace::function]
        fn $name($($argument: $type),*) -> $output $body
    };
}

traced!(fn triple(n: u64) -> u64 { n * 3 });

fn main() {
    assert_eq!(triple(2), 6);
    assert_eq!(generic(&7u32), 7);
    assert_eq!(fallible("41").unwrap(), 42);
    assert!(fallible("x").is_err());
    let mut disk = Disk { blocks: 1 };
    assert_eq!(disk.grow(2), 3);
    assert_eq!(disk.size(), 3);
    let byte = 9u8;
    // SAFETY: `byte` is a live local.
    assert_eq!(unsafe { read(&byte) }, 9);
    assert_eq!(first([4u8, 5]), Some(4));
    assert_eq!(*disk.blocks(), 3);
    *disk.blocks_mut() += 1;
    assert_eq!(disk.into_blocks(), 4);
    assert_eq!(longest("ab", "c"), "ab");
    assert_eq!(sum((1, 2), 3), 6);
    assert_eq!(evens(1..7).collect::<Vec<_>>(), [2, 4, 6]);
}
