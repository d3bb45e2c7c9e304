//! What the attribute accepts and what it refuses, with its messages
//! (`TRYBUILD=overwrite cargo test -p hotkern-trace-macros --test ui`
//! regenerates the `.stderr` files after a compiler change).

#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/pass.rs");
    cases.compile_fail("tests/ui/arguments.rs");
    cases.compile_fail("tests/ui/async_fn.rs");
}
