//! The root README's Rust snippets, compiled and run as doctests.
//!
//! The front page shows each crate's "use it" lines; a snippet that stops
//! compiling when an API changes would teach newcomers something false, so
//! `cargo test -p hotkern --doc` runs every `rust` block of the README.
//! This crate is the one that depends on every library the snippets use.

#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
struct ReadmeDoctests;
