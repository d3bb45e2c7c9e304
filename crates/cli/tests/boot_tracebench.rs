//! The kernel side of `hotkern bench trace --platform qemu` end to end:
//! `tracebench=N` on the command line has the booted kernel time N calls
//! of its tiny traced function untraced (the twin without a site), with
//! its site a NOP, and patched in and recording, and the summary carries
//! the figures. A bad N is a failed check, not a silent default.
//! Skipped, saying so, where qemu-system-x86_64 is not installed.

mod common;

use common::qemu_missing;

use std::process::Command;

use serde_json::Value;

fn boot(append: &str) -> (bool, Value, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_hotkern"))
        .args([
            "boot",
            "--json",
            "--cpus",
            "2",
            "--no-disk",
            "--timeout",
            "180",
            "--append",
            append,
        ])
        .output()
        .expect("hotkern runs");
    (
        output.status.success(),
        serde_json::from_slice(&output.stdout).unwrap_or(Value::Null),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

fn median(bench: &Value, key: &str) -> f64 {
    let mut values: Vec<f64> = bench[key]
        .as_array()
        .unwrap_or_else(|| panic!("no {key}: {bench}"))
        .iter()
        .map(|value| value.as_f64().expect("a number"))
        .collect();
    assert!(values.iter().all(|ns| *ns > 0.0), "{key}: {bench}");
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

#[test]
fn the_kernel_times_its_traced_function_off_and_on() {
    if qemu_missing() {
        return;
    }
    let (ok, run, stderr) = boot("engine=none tracebench=2000");
    assert!(ok, "hotkern boot failed: {stderr}\n{run}");
    let bench = &run["guest"]["tracebench"];
    assert_eq!(bench["calls"], 2000, "{bench}");
    assert_eq!(bench["function"], "traced_parent_pid", "{bench}");
    let rounds = bench["repetitions"].as_u64().expect("repetitions");
    // Every call of every `on` loop was recorded, and only those.
    assert_eq!(bench["recorded"], 2000 * rounds, "{bench}");
    let (floor, off, on) = (
        median(bench, "floor_ns"),
        median(bench, "off_ns"),
        median(bench, "on_ns"),
    );
    // Recording costs more than a NOP; a NOP costs about nothing, within
    // a loaded emulator's noise.
    assert!(on > off * 2.0, "on {on} ns, off {off} ns: {bench}");
    assert!(
        off >= floor * 0.5,
        "off {off} ns, floor {floor} ns: {bench}"
    );
}

#[test]
fn a_bad_call_count_fails_its_check_and_measures_nothing() {
    if qemu_missing() {
        return;
    }
    let (ok, run, _) = boot("engine=none tracebench=many");
    assert!(!ok, "a bad tracebench= passed: {run}");
    let guest = &run["guest"];
    assert_eq!(guest["tracebench"], Value::Null, "{guest}");
    assert!(
        guest["checks"]["failures"]
            .as_array()
            .is_some_and(|failures| failures
                .iter()
                .any(|name| name.as_str().is_some_and(|n| n.starts_with("tracebench")))),
        "{}",
        guest["checks"]
    );
}
