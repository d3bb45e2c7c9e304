//! Shared by the integration tests that compare our `trace.dat` report
//! with the real trace-cmd's.

/// `trace-cmd report -N -t` of `bytes` saved as a trace.dat (named after
/// `label` and this process, so parallel tests don't collide), or `None`
/// when trace-cmd is not installed on a developer's machine. Under CI
/// (`CI` set, as `.ci/run` runs) a missing trace-cmd fails instead: a
/// comparison that silently skips there would pass without comparing.
/// A trace-cmd that runs and fails is a test failure: it means it could
/// not read our file.
#[allow(dead_code)]
pub fn trace_cmd_report(bytes: &[u8], label: &str) -> Option<String> {
    trace_cmd_report_with(bytes, label, &["-N", "-t"])
}

/// `trace-cmd report` of `bytes` with `options`, as [`trace_cmd_report`].
pub fn trace_cmd_report_with(bytes: &[u8], label: &str, options: &[&str]) -> Option<String> {
    let path = std::env::temp_dir().join(format!("hotkern-{label}-{}.dat", std::process::id()));
    std::fs::write(&path, bytes).unwrap();
    let output = std::process::Command::new("trace-cmd")
        .arg("report")
        .args(options)
        .arg(&path)
        .output();
    let _ = std::fs::remove_file(&path);
    let Ok(output) = output else {
        assert!(
            std::env::var_os("CI").is_none(),
            "trace-cmd is not installed (Debian package trace-cmd; scripts/setup installs it)"
        );
        eprintln!("trace-cmd not installed; skipping the comparison");
        return None;
    };
    assert!(
        output.status.success(),
        "trace-cmd report failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Some(String::from_utf8(output.stdout).unwrap())
}
