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

/// `bytes` written by hotkern-tracedat's writer (version 6, the default).
#[allow(dead_code)]
pub fn write_v6(file: &hotkern_tracedat::write::TraceDat) -> Vec<u8> {
    hotkern_tracedat::write::write_trace_dat(file, &Default::default()).unwrap()
}

/// What hotkern-tracedat's reader finds in `bytes`: each event as (CPU,
/// time stamp, data) in time order, and the events the pages say were
/// lost (a loss of unknown count counts 0).
#[allow(dead_code)]
pub fn read_back(bytes: &[u8]) -> (Vec<(u32, u64, Vec<u8>)>, u64) {
    let mut file = hotkern_tracedat::TraceFile::from_bytes(bytes.to_vec()).unwrap();
    let mut events = Vec::new();
    let mut lost = 0;
    for record in file.records().unwrap() {
        let record = record.unwrap();
        if let Some(hotkern_tracedat::Lost::Events(count)) = record.lost_before {
            lost += count.unwrap_or(0);
        }
        events.push((record.cpu, record.timestamp, record.data));
    }
    (events, lost)
}

/// hotkern-tracedat's `report -N -t` of `bytes` (what `hotkern trace
/// report -t` prints).
#[allow(dead_code)]
pub fn report(bytes: &[u8]) -> String {
    let mut file = hotkern_tracedat::TraceFile::from_bytes(bytes.to_vec()).unwrap();
    let options = hotkern_tracedat::ReportOptions {
        nanoseconds: true,
        ..Default::default()
    };
    let mut out = Vec::new();
    hotkern_tracedat::write_report(&mut file, &options, &mut out).unwrap();
    String::from_utf8(out).unwrap()
}
