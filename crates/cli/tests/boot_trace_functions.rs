//! `hotkern boot --trace-functions GLOB` end to end: the filter reaches
//! the kernel on its command line, the kernel writes it to its
//! `set_ftrace_filter`, and the trace.dat it sends on COM2 holds function
//! events of the matching functions only. A filter that matches nothing
//! is reported and the boot goes on. Skipped, saying so, where
//! qemu-system-x86_64 is not installed.

mod common;

use common::qemu_missing;

use std::process::Command;

use hotkern_tracedat::TraceFile;
use serde_json::Value;

fn boot(filter: &str, append: &str) -> (bool, Value, String) {
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
            "--trace-functions",
            filter,
        ])
        .output()
        .expect("hotkern runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    (
        output.status.success(),
        serde_json::from_str(&stdout).unwrap_or(Value::Null),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// The functions named by the trace.dat's `ftrace/function` events.
fn traced_functions(path: &str) -> Vec<String> {
    let mut file = TraceFile::open(path).expect("the trace.dat opens");
    let (records, printer) = file.reader().expect("its records read");
    let mut names = Vec::new();
    for record in records {
        let record = record.expect("a whole record");
        let Some(event) = printer.event_of(&record) else {
            continue;
        };
        if event.name != "function" {
            continue;
        }
        let mut text = String::new();
        printer.write_event(event, &record, &mut text);
        names.push(text.split_whitespace().next().unwrap_or("").to_owned());
    }
    names
}

#[test]
fn only_the_functions_the_filter_selects_are_traced() {
    if qemu_missing() {
        return;
    }
    // The caller-driven grace periods' functions, by module as ftrace's
    // `:mod:` selects them; the hotplug run calls both of them.
    let (ok, run, stderr) = boot("*:mod:*::caller_driven", "");
    assert!(ok, "hotkern boot failed: {stderr}\n{run}");
    let trace = &run["guest"]["trace"];
    assert_eq!(
        trace["function_filter"], "*:mod:*::caller_driven",
        "{trace}"
    );
    assert_eq!(trace["function_filter_error"], Value::Null, "{trace}");
    assert!(
        trace["function_sites_patched"]
            .as_u64()
            .is_some_and(|n| n > 0),
        "{trace}"
    );
    let names = traced_functions(run["trace_dat"].as_str().expect("a trace.dat"));
    assert!(!names.is_empty(), "no function event in the trace");
    assert!(
        names
            .iter()
            .all(|name| name == "synchronize" || name == "set_online"),
        "functions outside the filter: {names:?}"
    );
}

#[test]
fn a_filter_that_matches_nothing_is_reported_and_the_boot_goes_on() {
    if qemu_missing() {
        return;
    }
    let (ok, run, stderr) = boot("no_such_function_*", "engine=none");
    assert!(ok, "hotkern boot failed: {stderr}\n{run}");
    let trace = &run["guest"]["trace"];
    assert_eq!(trace["function_filter"], "no_such_function_*", "{trace}");
    assert!(
        trace["function_filter_error"]
            .as_str()
            .is_some_and(|error| error.contains("no_such_function_*")),
        "{trace}"
    );
    assert_eq!(trace["function_sites_patched"], 0, "{trace}");
}
