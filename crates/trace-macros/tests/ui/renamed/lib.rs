//! A `no_std` user of the attribute whose dependency is renamed
//! (`tracing2 = { package = "hotkern-trace", … }`), with one-expression
//! bodies, built with `-D warnings`.
#![no_std]
#![deny(warnings)]

/// One expression.
#[tracing2::function(crate = tracing2)]
pub fn double(n: u64) -> u64 {
    n * 2
}

/// No return value.
#[tracing2::function(crate = tracing2)]
pub fn nothing() {}

/// An `impl Trait` return, one expression.
#[tracing2::function(crate = ::tracing2)]
pub fn evens(limit: u32) -> impl Iterator<Item = u32> {
    (0..limit).filter(|n| n % 2 == 0)
}

/// A method whose body is one field.
pub struct Disk {
    /// Size in blocks.
    pub blocks: u64,
}

impl Disk {
    /// One expression, borrowing `self`.
    #[tracing2::function(crate = tracing2)]
    pub fn blocks(&self) -> &u64 {
        &self.blocks
    }
}

/// A function another macro makes: its body arrives as a `block` fragment,
/// the shape in which a block nested in the expansion warned.
macro_rules! traced {
    (fn $name:ident($($argument:ident: $type:ty),*) -> $output:ty $body:block) => {
        /// Made by `traced!`.
        #[tracing2::function(crate = "tracing2")]
        pub fn $name($($argument: $type),*) -> $output $body
    };
}

traced!(fn triple(n: u64) -> u64 { n * 3 });
