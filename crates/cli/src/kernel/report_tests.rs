//! Tests of `report.rs`: the summary line parsed into the run table and JSON.

use std::path::PathBuf;

use super::*;

const LINE: &str = "hotkern: summary {\"kernel\":\"hotkern-kernel 0.1.0\",\"cpus\":1,\
    \"hypervisor\":\"TCGTCGTCGTCG\",\"cmdline\":\"\",\"memory\":{\"ram_bytes\":133820416,\
    \"segments\":1,\"frames\":31726,\"managed_bytes\":129949696,\"kernel_bytes\":471040,\
    \"heap_bytes\":2748416,\"heap_used_bytes\":520464,\"heap_peak_bytes\":658056,\
    \"page_descriptor_bytes\":16,\"segments_now\":3},\"checks\":{\"passed\":22,\"failed\":0,\
    \"skipped\":0,\"failures\":[]},\"breakpoints\":1,\"tsc_mhz\":2596,\"boot_us\":108469,\
    \"phases_us\":{\"physload\":315,\"heap\":645,\"init_pages\":6118,\"checks\":87928}}\r";

fn report(outcome: Outcome, summary: Option<Value>) -> RunReport {
    RunReport {
        outcome,
        status: Some(33),
        first_line: Some(Duration::from_millis(52)),
        total: Duration::from_millis(431),
        lines: 34,
        last_line: Some("hotkern: check ok   x".into()),
        summary,
        ..RunReport::started(
            QemuConfig {
                firmware: Some(PathBuf::from("/usr/share/qemu/qboot.rom")),
                ..QemuConfig::new(PathBuf::from("k"), 1, 128)
            },
            None,
        )
    }
}

#[test]
fn table_and_json_show_the_trace() {
    let mut run = report(Outcome::Success, None);
    run.trace = Some(super::super::trace::Trace {
        path: PathBuf::from("/out/trace.dat"),
        events: 131,
        lost: 0,
        bytes: 40_960,
    });
    assert!(run
        .to_table()
        .contains("trace          131 events (0 lost), 40 KiB in /out/trace.dat"));
    let document = run.to_json();
    assert_eq!(document["trace_events"], 131);
    assert_eq!(document["trace_dat"], "/out/trace.dat");
    assert!(document["trace_error"].is_null());
}

#[test]
fn summary_line_parses_with_its_carriage_return() {
    let summary = parse_summary(LINE).unwrap().unwrap();
    assert_eq!(summary["checks"]["passed"], 22);
    assert_eq!(summary["memory"]["frames"], 31726);
    assert_eq!(summary["hypervisor"], "TCGTCGTCGTCG");
}

#[test]
fn other_lines_are_not_summaries_and_bad_ones_are_errors() {
    assert!(parse_summary("hotkern: check ok   x").is_none());
    assert!(parse_summary(" hotkern: summary {}").is_none());
    let garbled = parse_summary("hotkern: summary {\"checks\":").unwrap();
    assert!(garbled.unwrap_err().contains("not JSON"));
    let uncounted = parse_summary("hotkern: summary {\"checks\":{}}").unwrap();
    assert!(uncounted.unwrap_err().contains("no check counts"));
}

#[test]
fn fault_lines_are_recognised() {
    assert!(is_fault_line(
        "hotkern: exception 14 #PF (page fault) on cpu 0: ..."
    ));
    assert!(is_fault_line(
        "hotkern: panic on cpu 0 at src/main.rs:1:1: boom"
    ));
    assert!(!is_fault_line("hotkern: check ok   panic-free"));
}

#[test]
fn json_document_carries_outcome_host_and_guest() {
    let summary = parse_summary(LINE).unwrap().unwrap();
    let document = report(Outcome::Success, Some(summary)).to_json();
    assert_eq!(document["outcome"], "success");
    assert_eq!(document["qemu_status"], 33);
    assert_eq!(document["accel"], "tcg");
    assert_eq!(document["arch"], "x86_64");
    assert_eq!(document["host"]["first_line_s"], 0.052);
    assert_eq!(document["guest"]["checks"]["failed"], 0);
    assert!(document["host"]["build_s"].is_null());
}

#[test]
fn table_shows_the_kernel_figures() {
    let summary = parse_summary(LINE).unwrap().unwrap();
    let table = report(Outcome::Success, Some(summary)).to_table();
    assert!(table.starts_with("hotkern boot: the kernel booted and passed all its checks\n"));
    assert!(table.contains("QEMU TCG, 1 vCPU, 128 MiB, qboot.rom"));
    assert!(table.contains("first line 0.052 s after QEMU started, 34 lines"));
    assert!(table.contains("108.5 ms from its first instruction to the summary (TSC 2596 MHz)"));
    assert!(table.contains("init_pages 6.1 ms"));
    assert!(table.contains("123 MiB in 1 segment (31726 frames) of 127 MiB RAM"));
    assert!(table.contains("22 passed, 0 failed, 0 skipped"));
    assert!(!table.contains("last line"));
}

#[test]
fn table_shows_the_smp_figures() {
    let line = LINE.replace(
        "}}\r",
        "},\"smp\":{\"cpus_found\":2,\"cpus_online\":2,\"apic_ids\":[0,1],\
         \"ticks\":[5,4],\"tick_hz\":100,\"apic_timer_hz\":1000000000,\"start_us\":[669],\
         \"offline_us\":[64],\"online_us\":[345],\"call_round_trip_ns\":14345,\
         \"call_round_trip_min_ns\":11126,\"acpi_error\":null}}\r",
    );
    let summary = parse_summary(&line).unwrap().unwrap();
    let table = report(Outcome::Success, Some(summary)).to_table();
    assert!(table.contains("2 of 2 found online (APIC ids 0, 1); ticks per CPU 5, 4 at 100 Hz"));
    assert!(table.contains("round trip 14.3 µs median, 11.1 µs fastest"));
    assert!(table.contains("AP start       669 µs"));
    assert!(table.contains("offline 64 µs; online 345 µs"));
}

#[test]
fn table_of_a_failed_run_says_where_the_kernel_got_to() {
    let mut failed = report(Outcome::Timeout, None);
    failed.status = None;
    failed.qemu_stderr = "qemu-system-x86_64: terminating on signal 9\n".into();
    let table = failed.to_table();
    assert!(table.contains("did not finish in time"));
    assert!(table.contains("last line      hotkern: check ok   x"));
    assert!(table.contains("QEMU said      qemu-system-x86_64: terminating"));
    assert!(table.contains("from QEMU start to exit\n"));
}

#[test]
fn failure_message_names_the_fault_the_checks_or_the_last_line() {
    let mut run = report(Outcome::Exception, None);
    run.fault = Some("hotkern: exception 14 #PF (page fault) on cpu 0".into());
    assert_eq!(
        run.failure_message(),
        "the kernel stopped on a CPU exception: exception 14 #PF (page fault) on cpu 0"
    );
    let failing = LINE.replace("\"failures\":[]", "\"failures\":[\"a\",\"b\"]");
    let run = report(Outcome::ChecksFailed, parse_summary(&failing).unwrap().ok());
    assert!(run
        .failure_message()
        .ends_with("some of its checks failed: a; b"));
    assert!(!run.to_table().contains("last line"));
    let run = report(Outcome::Timeout, None);
    assert!(run
        .failure_message()
        .ends_with("(last console line: hotkern: check ok   x)"));
    let mut silent = report(Outcome::Reset, None);
    silent.last_line = None;
    assert!(silent.failure_message().ends_with("(no console output)"));
}
