//! What the boot tests share: whether the tools they drive are installed.
//! A test that needs QEMU skips, saying which package to install, where it
//! is missing.

/// Whether `program` is an executable file in a directory of `PATH`.
pub fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| dir.join(program).is_file()))
}

/// True, after saying the test is skipped and what to install, when
/// qemu-system-x86_64 is not on `PATH`.
pub fn qemu_missing() -> bool {
    let missing = !on_path("qemu-system-x86_64");
    if missing {
        eprintln!(
            "skipped: qemu-system-x86_64 is not on PATH (apt-get install qemu-system-x86; scripts/setup does it)"
        );
    }
    missing
}
