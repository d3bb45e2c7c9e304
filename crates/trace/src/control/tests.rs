//! Control-interface tests. Tracers and events are process-wide, so each
//! test defines its own events and installs its own tracer.

use super::*;
use crate::{TraceConfig, Tracer};
use alloc::string::ToString;
use alloc::vec;

mod ctl_events {
    crate::define_event! {
        /// A request.
        pub ctl_request in ctltest {
            pid: i32,
            bytes: u32,
            name: [u8; 8],
        }
        print "pid=%d bytes=%u name=%s", pid, bytes, name
    }
    crate::define_event! {
        /// A reply.
        pub ctl_reply in ctltest {
            code: u32,
        }
        print "code=%u", code
    }
    crate::define_event! {
        /// Something in another system.
        pub ctl_other in ctlother {
            value: u64,
        }
        print "value=%llu", value
    }
    crate::define_event! {
        /// Used only by the trigger test.
        pub trig_hit in trigtest {
            n: u32,
        }
        print "n=%u", n
    }
    crate::define_event! {
        /// Used only by the filter test.
        pub filt_hit in filttest {
            n: u32,
            label: [u8; 8],
        }
        print "n=%u label=%s", n, label
    }
}

use ctl_events::*;

fn name8(text: &str) -> [u8; 8] {
    let mut out = [0u8; 8];
    out[..text.len()].copy_from_slice(text.as_bytes());
    out
}

fn register_all() {
    for event in [
        &ctl_request::EVENT,
        &ctl_reply::EVENT,
        &ctl_other::EVENT,
        &trig_hit::EVENT,
        &filt_hit::EVENT,
    ] {
        crate::event::register(event);
    }
}

fn installed() -> &'static Tracer {
    register_all();
    Tracer::with_threads(TraceConfig::small(), 2)
        .unwrap()
        .install()
        .unwrap()
}

/// Everything a write could change, read back through the files.
fn observable(control: &Control<'_>) -> Vec<(String, String)> {
    let files = [
        "tracing_on",
        "current_tracer",
        "buffer_size_kb",
        "set_event",
        "set_event_pid",
        "set_ftrace_pid",
        "set_ftrace_notrace",
        "max_graph_depth",
        "function_profile_enabled",
        "options/overwrite",
        "options/function-fork",
        "trace_options",
        "events/ctltest/ctl_request/enable",
        "events/ctltest/ctl_request/filter",
        "events/ctltest/ctl_request/trigger",
        "events/ctltest/filter",
        "events/enable",
    ];
    let mut state: Vec<(String, String)> = files
        .iter()
        .map(|f| (f.to_string(), control.read(f).unwrap()))
        .collect();
    // The file lists matching functions, and other tests register functions
    // concurrently; the selectors are what a write could change.
    state.push((
        "set_ftrace_filter".to_string(),
        control.tracer().ftrace_filter_text(),
    ));
    state
}

#[test]
fn bad_writes_are_refused_and_change_nothing() {
    register_all();
    let tracer = Tracer::with_threads(TraceConfig::small(), 2).unwrap();
    let control = Control::new(&tracer);
    control.write("set_event", "ctltest:ctl_request").unwrap();
    control
        .write("events/ctltest/ctl_request/filter", "bytes > 10")
        .unwrap();
    control
        .write("events/ctltest/ctl_request/trigger", "traceoff:2")
        .unwrap();
    control.write("set_event_pid", "7 8").unwrap();
    control.write("set_ftrace_filter", "read_*").unwrap();
    let before = observable(&control);
    let cases: &[(&str, &str, &str)] = &[
        ("tracing_on", "yes", "EINVAL"),
        ("current_tracer", "blk", "EINVAL"),
        ("current_tracer", "", "EINVAL"),
        ("buffer_size_kb", "0", "EINVAL"),
        ("buffer_size_kb", "-4", "EINVAL"),
        ("buffer_size_kb", "lots", "EINVAL"),
        ("set_event", "ctltest:ctl_reply nosuch:event", "EINVAL"),
        ("set_event", "!nothing_called_this", "EINVAL"),
        ("set_event_pid", "9 x", "EINVAL"),
        ("set_event_pid", "9 -1", "EINVAL"),
        ("set_ftrace_pid", "abc", "EINVAL"),
        ("set_ftrace_filter", "write_* bad:traceon", "EINVAL"),
        ("set_ftrace_notrace", "x:mod:", "EINVAL"),
        ("max_graph_depth", "deep", "EINVAL"),
        ("function_profile_enabled", "on", "EINVAL"),
        ("options/overwrite", "maybe", "EINVAL"),
        ("options/no-such-option", "1", "EINVAL"),
        ("trace_options", "nosuchoption", "EINVAL"),
        ("trace_clock", "global", "EINVAL"),
        ("snapshot", "now", "EINVAL"),
        ("events/ctltest/ctl_request/enable", "on", "EINVAL"),
        ("events/ctltest/ctl_request/filter", "bytes >", "EINVAL"),
        ("events/ctltest/ctl_request/filter", "nosuch == 1", "EINVAL"),
        ("events/ctltest/ctl_request/filter", "name == 3", "EINVAL"),
        ("events/ctltest/filter", "code == 1", "EINVAL"),
        ("events/ctltest/ctl_request/trigger", "traceoff", "EEXIST"),
        ("events/ctltest/ctl_request/trigger", "!snapshot", "ENOENT"),
        ("events/ctltest/ctl_request/trigger", "explode", "EINVAL"),
        (
            "events/ctltest/ctl_request/trigger",
            "enable_event:ctltest:nope",
            "ENOENT",
        ),
        (
            "events/ctltest/ctl_request/trigger",
            "hist:keys=nope",
            "EINVAL",
        ),
        (
            "events/ctltest/ctl_request/trigger",
            "snapshot if bytes ==",
            "EINVAL",
        ),
        ("events/ctltest/ctl_request/format", "x", "EACCES"),
        ("events/ctltest/ctl_request/nosuchfile", "1", "ENOENT"),
        ("events/nosys/enable", "1", "ENOENT"),
        ("available_tracers", "nop", "EACCES"),
        ("trace_pipe", "x", "EACCES"),
        ("no_such_file", "1", "ENOENT"),
    ];
    for &(file, text, errno) in cases {
        let error = control.write(file, text).unwrap_err();
        assert_eq!(error.errno(), errno, "{file} <- {text:?}: {error}");
        assert_eq!(
            observable(&control),
            before,
            "{file} <- {text:?} changed something"
        );
        // Appending the same bad value is refused the same way.
        assert!(control.append(file, text).is_err(), "{file} >> {text:?}");
        assert_eq!(
            observable(&control),
            before,
            "{file} >> {text:?} changed something"
        );
    }
}

#[test]
fn filter_errors_are_logged_with_ftrace_caret() {
    register_all();
    let tracer = Tracer::with_threads(TraceConfig::small(), 1).unwrap();
    let control = Control::new(&tracer);
    let error = control
        .write(
            "events/ctltest/ctl_request/filter",
            "bytes > 1 && nme == \"x\"",
        )
        .unwrap_err();
    match &error {
        ControlError::Filter { error, .. } => assert_eq!(error.position, 13),
        other => panic!("{other:?}"),
    }
    let log = control.read("error_log").unwrap();
    let lines: Vec<&str> = log.lines().collect();
    assert!(
        lines[0].ends_with("] event filter parse error: error: Field not found"),
        "{log}"
    );
    assert_eq!(lines[1], "  Command: bytes > 1 && nme == \"x\"");
    assert_eq!(lines[2].find('^'), Some("  Command: ".len() + 13));
    control.write("error_log", "").unwrap();
    assert_eq!(control.read("error_log").unwrap(), "");
}

#[test]
fn set_event_truncates_appends_and_removes() {
    register_all();
    let tracer = Tracer::with_threads(TraceConfig::small(), 1).unwrap();
    let control = Control::new(&tracer);
    control.write("set_event", "ctltest:*").unwrap();
    assert_eq!(
        control.read("set_event").unwrap(),
        "ctltest:ctl_request\nctltest:ctl_reply\n"
    );
    assert_eq!(control.read("events/ctltest/enable").unwrap(), "1\n");
    control.append("set_event", "ctl_other").unwrap();
    assert!(control
        .read("set_event")
        .unwrap()
        .contains("ctlother:ctl_other\n"));
    control.append("set_event", "!ctltest:ctl_reply").unwrap();
    assert_eq!(control.read("events/ctltest/enable").unwrap(), "X\n");
    assert_eq!(
        control.read("events/ctltest/ctl_reply/enable").unwrap(),
        "0\n"
    );
    control.write("set_event", "ctltest:ctl_reply").unwrap();
    assert_eq!(control.read("set_event").unwrap(), "ctltest:ctl_reply\n");
    control.write("set_event", "").unwrap();
    assert_eq!(control.read("set_event").unwrap(), "");
    control.write("events/ctlother/enable", "1").unwrap();
    assert_eq!(control.read("set_event").unwrap(), "ctlother:ctl_other\n");
    assert!(control
        .read("available_events")
        .unwrap()
        .contains("ctltest:ctl_request\n"));
    assert!(!control
        .read("available_events")
        .unwrap()
        .contains("ftrace:"));
}

#[test]
fn filters_decide_what_is_recorded() {
    let tracer = installed();
    let control = Control::new(tracer);
    control.write("set_event", "filttest:filt_hit").unwrap();
    control
        .write(
            "events/filttest/filt_hit/filter",
            "n >= 3 && label ~ \"k*\"",
        )
        .unwrap();
    assert_eq!(
        control.read("events/filttest/filt_hit/filter").unwrap(),
        "n >= 3 && label ~ \"k*\"\n"
    );
    for (n, label) in [(1, "kworker"), (3, "kworker"), (4, "user"), (5, "ksoftirq")] {
        filt_hit::trace(n, name8(label));
    }
    let text = control.read("trace_pipe").unwrap();
    let hits: Vec<&str> = text.lines().filter(|l| l.contains("filt_hit:")).collect();
    assert_eq!(hits.len(), 2, "{text}");
    assert!(hits[0].ends_with("filt_hit: n=3 label=kworker"));
    assert!(hits[1].ends_with("filt_hit: n=5 label=ksoftirq"));
    // trace_pipe consumed them.
    assert!(!control.read("trace").unwrap().contains("filt_hit:"));
    control
        .write("events/filttest/filt_hit/filter", "0")
        .unwrap();
    assert_eq!(
        control.read("events/filttest/filt_hit/filter").unwrap(),
        "none\n"
    );
    filt_hit::trace(1, name8("x"));
    assert!(control
        .read("trace")
        .unwrap()
        .contains("filt_hit: n=1 label=x"));
    tracer.uninstall();
}

#[test]
fn triggers_act_on_the_tracer() {
    let tracer = installed();
    let control = Control::new(tracer);
    // The event is not enabled: triggers still fire (soft-disabled event).
    control
        .write("events/trigtest/trig_hit/trigger", "traceoff:1 if n == 2")
        .unwrap();
    control
        .write(
            "events/trigtest/trig_hit/trigger",
            "hist:keys=n:sort=hitcount.descending",
        )
        .unwrap();
    assert_eq!(
        control.read("events/trigtest/trig_hit/trigger").unwrap(),
        "traceoff:count=1 if n == 2\nhist:keys=n:vals=hitcount:sort=hitcount.descending:size=2048 [active]\n"
    );
    for n in [1, 1, 1, 2, 2] {
        trig_hit::trace(n);
    }
    assert_eq!(control.read("tracing_on").unwrap(), "0\n");
    assert_eq!(
        control
            .read("events/trigtest/trig_hit/trigger")
            .unwrap()
            .lines()
            .next(),
        Some("traceoff:count=0 if n == 2")
    );
    let hist = control.read("events/trigtest/trig_hit/hist").unwrap();
    assert!(
        hist.contains(
            "{ n:          1 } hitcount:          3\n{ n:          2 } hitcount:          2\n"
        ),
        "{hist}"
    );
    assert!(hist.contains("    Hits: 5\n    Entries: 2\n"));
    control
        .write("events/trigtest/trig_hit/trigger", "!traceoff")
        .unwrap();
    control.write("tracing_on", "1").unwrap();
    control
        .write(
            "events/trigtest/trig_hit/trigger",
            "enable_event:trigtest:trig_hit:1",
        )
        .unwrap();
    assert_eq!(
        control.read("events/trigtest/trig_hit/enable").unwrap(),
        "0\n"
    );
    trig_hit::trace(9);
    assert_eq!(
        control.read("events/trigtest/trig_hit/enable").unwrap(),
        "1\n"
    );
    trig_hit::trace(10);
    assert!(control.read("trace").unwrap().contains("trig_hit: n=10"));
    tracer.uninstall();
}

#[test]
fn simple_files_round_trip() {
    let tracer = Tracer::with_threads(TraceConfig::small(), 2).unwrap();
    let control = Control::new(&tracer);
    assert_eq!(
        control.read("available_tracers").unwrap(),
        "hwlat function_graph function nop\n"
    );
    control.write("current_tracer", "function\n").unwrap();
    assert_eq!(control.read("current_tracer").unwrap(), "function\n");
    control.write("buffer_size_kb", "128").unwrap();
    let kb: usize = control
        .read("buffer_size_kb")
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(kb >= 128);
    assert_eq!(
        control.read("buffer_total_size_kb").unwrap(),
        alloc::format!("{}\n", kb * 2)
    );
    control.write("set_ftrace_pid", "10 11").unwrap();
    control.append("set_ftrace_pid", "12").unwrap();
    assert_eq!(control.read("set_ftrace_pid").unwrap(), "10\n11\n12\n");
    control.write("set_ftrace_pid", "").unwrap();
    assert_eq!(control.read("set_ftrace_pid").unwrap(), "no pid\n");
    control.write("max_graph_depth", "3").unwrap();
    assert_eq!(control.read("max_graph_depth").unwrap(), "3\n");
    control.write("options/overwrite", "0").unwrap();
    assert_eq!(control.read("options/overwrite").unwrap(), "0\n");
    control.write("trace_options", "overwrite").unwrap();
    control.write("trace_options", "function-fork").unwrap();
    assert!(control
        .read("trace_options")
        .unwrap()
        .starts_with("overwrite\nfunction-fork\nnoevent-fork\nirq-info\nprint-parent\n"));
    // Display options change the text, not the data.
    control.write("trace_marker", "opts").unwrap();
    control.write("options/irq-info", "0").unwrap();
    let text = control.read("trace").unwrap();
    assert!(
        text.contains("#           TASK-PID     CPU#     TIMESTAMP  FUNCTION\n"),
        "{text}"
    );
    assert!(!text.contains("irqs-off"));
    let line = text.lines().find(|l| l.contains("opts")).unwrap();
    assert!(line.contains("]  ") && !line.contains("....."), "{line}");
    control.write("trace_options", "irq-info").unwrap();
    assert!(control.read("trace").unwrap().contains("irqs-off"));
    control.write("trace", "").unwrap();
    assert_eq!(
        control.read("set_ftrace_filter").unwrap(),
        "#### all functions enabled ####\n"
    );
    assert!(control
        .read("snapshot")
        .unwrap()
        .contains("* Snapshot is freed *"));
    control.write("trace_marker", "before snapshot").unwrap();
    control.write("snapshot", "1").unwrap();
    assert!(control
        .read("snapshot")
        .unwrap()
        .contains("tracing_mark_write: before snapshot\n"));
    assert!(!control.read("trace").unwrap().contains("before snapshot"));
    control.write("snapshot", "0").unwrap();
    assert!(control
        .read("snapshot")
        .unwrap()
        .contains("* Snapshot is freed *"));
    assert_eq!(control.read("trace_marker").unwrap_err().errno(), "EINVAL");
    assert_eq!(
        control.read("/sys/kernel/tracing/tracing_on").unwrap(),
        "1\n"
    );
    assert!(control
        .read("trace_stat/function0")
        .unwrap()
        .starts_with("  Function "));
    assert!(control
        .read("per_cpu/cpu1/stats")
        .unwrap()
        .starts_with("entries: "));
    assert!(control
        .read("events/ftrace/function/format")
        .unwrap()
        .starts_with("name: function\nID: 1\n"));
    assert_eq!(control.read("events/ftrace/function/id").unwrap(), "1\n");
    assert_eq!(
        control
            .write("events/ftrace/function/enable", "1")
            .unwrap_err()
            .errno(),
        "ENOENT"
    );
    let files = control.list();
    assert!(
        files
            .iter()
            .any(|f| f == "events/ctltest/ctl_request/trigger")
            || files.len() > 20
    );
    for file in files {
        if file != "trace_pipe" {
            // Every listed file can be read (trace_marker is write-only).
            let result = control.read(&file);
            assert!(
                result.is_ok() || file == "trace_marker",
                "{file}: {result:?}"
            );
        }
    }
    let _ = vec![0u8];
}

#[test]
fn trace_text_has_ftrace_header_and_lines() {
    let tracer = Tracer::with_threads(TraceConfig::small(), 2).unwrap();
    let control = Control::new(&tracer);
    control.write("trace_marker", "one").unwrap();
    control.write("trace_marker", "two\n").unwrap();
    let text = control.read("trace").unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "# tracer: nop");
    assert_eq!(lines[2], "# entries-in-buffer/entries-written: 2/2   #P:2");
    assert_eq!(
        lines[10],
        "#           TASK-PID     CPU#  |||||  TIMESTAMP  FUNCTION"
    );
    assert_eq!(
        lines[11],
        "#              | |         |   |||||     |         |"
    );
    assert!(
        lines[12].ends_with(": tracing_mark_write: one"),
        "{}",
        lines[12]
    );
    assert!(
        lines[13].ends_with(": tracing_mark_write: two"),
        "{}",
        lines[13]
    );
    assert_eq!(lines.len(), 14);
    control.write("trace", "").unwrap();
    assert!(control
        .read("trace")
        .unwrap()
        .contains("entries-in-buffer/entries-written: 0/"));
}

mod ctl_funcs {
    #[crate::function]
    pub fn read_page(n: u64) -> u64 {
        read_block(n) + 1
    }

    #[crate::function]
    pub fn read_block(n: u64) -> u64 {
        core::hint::black_box(n * 3)
    }

    #[crate::function]
    pub fn write_page(n: u64) -> u64 {
        core::hint::black_box(n ^ 5)
    }

    pub mod net {
        #[crate::function]
        pub fn send_packet(n: u64) -> u64 {
            core::hint::black_box(n + 7)
        }
    }
}

fn touch_functions() {
    ctl_funcs::read_page(1);
    ctl_funcs::write_page(1);
    ctl_funcs::net::send_packet(1);
}

#[test]
fn ftrace_filter_globs_modules_negation_and_append() {
    let tracer = installed();
    touch_functions();
    let control = Control::new(tracer);
    let module = "hotkern_trace::control::tests::ctl_funcs";
    let mine = |control: &Control<'_>| -> Vec<String> {
        let text = control.read("set_ftrace_filter").unwrap();
        text.lines()
            .filter(|l| ["read_page", "read_block", "write_page", "send_packet"].contains(l))
            .map(String::from)
            .collect()
    };
    control.write("set_ftrace_filter", "read_*").unwrap();
    assert_eq!(mine(&control), ["read_block", "read_page"]);
    control.append("set_ftrace_filter", "!read_b*").unwrap();
    assert_eq!(mine(&control), ["read_page"]);
    control.append("set_ftrace_filter", "*_page").unwrap();
    assert_eq!(mine(&control), ["read_page", "write_page"]);
    control
        .write("set_ftrace_filter", &alloc::format!("*:mod:{module}::net"))
        .unwrap();
    assert_eq!(mine(&control), ["send_packet"]);
    control
        .write("set_ftrace_filter", &alloc::format!("*:mod:!{module}::net"))
        .unwrap();
    let selected = mine(&control);
    assert!(
        selected.contains(&"read_page".to_string())
            && !selected.contains(&"send_packet".to_string())
    );
    control.write("set_ftrace_notrace", "write_*").unwrap();
    assert!(!mine(&control).contains(&"write_page".to_string()));
    assert_eq!(control.read("set_ftrace_notrace").unwrap(), "write_*\n");
    control.write("set_ftrace_filter", "").unwrap();
    assert_eq!(
        control.read("set_ftrace_filter").unwrap(),
        "#### all functions enabled ####\n"
    );
    assert!(control
        .read("available_filter_functions")
        .unwrap()
        .contains("send_packet\n"));
    tracer.uninstall();
}

#[test]
fn function_profile_fills_trace_stat() {
    let tracer = installed();
    let control = Control::new(tracer);
    control
        .write(
            "set_ftrace_filter",
            ":mod:hotkern_trace::control::tests::ctl_funcs",
        )
        .unwrap();
    control.write("current_tracer", "function").unwrap();
    control.write("function_profile_enabled", "1").unwrap();
    for n in 0..5 {
        ctl_funcs::read_page(n);
    }
    let mut table = String::new();
    for cpu in 0..tracer.cpus() {
        table.push_str(
            &control
                .read(&alloc::format!("trace_stat/function{cpu}"))
                .unwrap(),
        );
    }
    let row = table
        .lines()
        .find(|l| l.trim_start().starts_with("read_page "))
        .unwrap_or_else(|| panic!("{table}"));
    let columns: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(columns[1], "5", "{row}");
    assert_eq!(columns[3], "us", "{row}");
    // The function tracer wrote one `function` line per call.
    let text = control.read("trace").unwrap();
    assert!(text.contains(": read_block <-read_page\n"), "{text}");
    assert!(text.starts_with("# tracer: function\n"));
    tracer.uninstall();
}

#[test]
fn stacktrace_trigger_records_the_callers() {
    let tracer = installed();
    let control = Control::new(tracer);
    control
        .write("events/ctltest/ctl_reply/trigger", "stacktrace:1")
        .unwrap();
    ctl_reply::trace(3);
    ctl_reply::trace(4);
    let text = control.read("trace").unwrap();
    assert_eq!(text.matches("<stack trace>").count(), 1, "{text}");
    #[cfg(feature = "std")]
    assert!(text.contains(" => "), "{text}");
    tracer.uninstall();
}
