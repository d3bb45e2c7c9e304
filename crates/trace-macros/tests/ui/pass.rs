//! Shapes the attribute must accept: generics, `where` clauses, methods
//! with `self`, `?`, attributes and visibility kept, `unsafe` and `const`
//! generics.

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

fn main() {
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
}
