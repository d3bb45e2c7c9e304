//! The lock kind cannot change behind a user's back: a build in which
//! one crate asked for `spin` and another for `parking_lot` (cargo unifies
//! the two) stops with the `compile_error!` of `sync`. Checked by running
//! `cargo check` on this crate with both features, offline, in a target
//! directory of its own.
#![cfg(not(loom))]

use std::path::Path;
use std::process::Command;

fn check(features: &str) -> std::process::Output {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    Command::new(cargo)
        .current_dir(manifest)
        .args([
            "check",
            "--offline",
            "--quiet",
            "-p",
            "hotkern-kernel",
            "--lib",
        ])
        .args(["--no-default-features", "--features", features])
        .env(
            "CARGO_TARGET_DIR",
            manifest.join("../../target/lock-features"),
        )
        .output()
        .expect("run cargo")
}

#[test]
fn spin_and_parking_lot_together_do_not_compile() {
    let both = check("spin,parking_lot");
    let stderr = String::from_utf8_lossy(&both.stderr);
    assert!(!both.status.success(), "both features built:\n{stderr}");
    assert!(
        stderr.contains("both the `spin` and the `parking_lot` feature are on"),
        "{stderr}"
    );
    // Each alone builds.
    for one in ["spin", "parking_lot"] {
        let alone = check(one);
        assert!(
            alone.status.success(),
            "{one}: {}",
            String::from_utf8_lossy(&alone.stderr)
        );
    }
}
