//! The tour on a machine without QEMU: its kernel step runs the setup
//! script (a stub here, named by HOTKERN_SETUP) when it may, and says what
//! to install when it may not. PATH holds only fake apt-get, sudo and
//! rustup, so neither QEMU nor rustc (hence the kernel's target) is found.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// A directory of its own for each test, with the fake tools in `bin/`.
fn machine(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("hotkern-tour-setup-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("bin")).unwrap();
    for tool in ["apt-get", "sudo", "rustup"] {
        script(&dir.join("bin").join(tool), "exit 0");
    }
    dir
}

fn script(path: &Path, body: &str) {
    std::fs::write(path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}

/// Runs the tour's kernel preparation with `dir/bin` as the whole PATH.
fn tour(dir: &Path, setup: &Path, no_setup: Option<&str>) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_hotkern"));
    command
        .args(["demo", "--prerequisites-only"])
        .env("PATH", dir.join("bin"))
        .env("HOTKERN_SETUP", setup)
        .env_remove("HOTKERN_NO_SETUP")
        .env_remove("RUSTC");
    if let Some(value) = no_setup {
        command.env("HOTKERN_NO_SETUP", value);
    }
    command.output().unwrap()
}

#[test]
fn without_qemu_the_tour_runs_the_setup_script_and_says_why() {
    let dir = machine("runs");
    let stub = dir.join("setup");
    let ran = dir.join("setup-ran");
    script(&stub, &format!("echo \"$@\" > '{}'", ran.display()));
    let output = tour(&dir, &stub, None);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{stdout}");
    assert_eq!(
        std::fs::read_to_string(&ran).expect("the stub setup ran"),
        "kernel\n"
    );
    assert!(
        stdout.contains(&format!(
            "the kernel step needs qemu-system-x86_64 (Debian package qemu-system-x86) and \
             the Rust target x86_64-unknown-none, not installed here; running {} kernel",
            stub.display()
        )),
        "{stdout}"
    );
    // The stub installed nothing: the tour says so and goes on.
    assert!(stdout.contains("ran, but it is still missing"), "{stdout}");
    assert!(
        stdout.contains("    sudo apt-get install qemu-system-x86\n"),
        "{stdout}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_failing_setup_or_setup_turned_off_leaves_the_commands_to_run() {
    let dir = machine("refused");
    let stub = dir.join("setup");
    let ran = dir.join("setup-ran");
    script(&stub, &format!(": > '{}'; exit 3", ran.display()));
    let output = tour(&dir, &stub, None);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(ran.exists());
    assert!(
        stdout.contains("failed: it exited with exit status: 3"),
        "{stdout}"
    );
    assert!(
        stdout.contains("    rustup target add x86_64-unknown-none\n"),
        "{stdout}"
    );

    std::fs::remove_file(&ran).unwrap();
    let output = tour(&dir, &stub, Some("1"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(!ran.exists(), "HOTKERN_NO_SETUP=1 must not run the setup");
    assert!(
        stdout.contains("not installing it: HOTKERN_NO_SETUP is set"),
        "{stdout}"
    );
    assert!(
        stdout.contains("the tour goes on without the kernel."),
        "{stdout}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
