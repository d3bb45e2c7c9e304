//! The attribute in a user's crate, not ours: `tests/ui/renamed` is a crate
//! of its own that depends on `hotkern-trace` renamed to `tracing2`, names
//! it with `crate = tracing2`, has one-expression bodies, and must build
//! with `-D warnings`. It is built by `cargo build`, offline, into this
//! workspace's target directory (so its dependencies are built once).

use std::path::Path;
use std::process::Command;

#[test]
fn a_renamed_dependency_builds_without_warnings() {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let fixture = manifest.join("tests/ui/renamed");
    let target = manifest.join("../../target/ui-fixtures");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let output = Command::new(cargo)
        .current_dir(&fixture)
        .args(["build", "--offline", "--quiet"])
        .env("RUSTFLAGS", "-D warnings")
        .env("CARGO_TARGET_DIR", &target)
        // The fixture is not a member of this workspace; nothing of the
        // test's own build may leak into its build.
        .env_remove("CARGO_BUILD_TARGET")
        .env_remove("RUSTC_WRAPPER")
        .output()
        .expect("run cargo");
    assert!(
        output.status.success(),
        "the user crate failed to build:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
