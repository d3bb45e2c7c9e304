//! Top-level files and the `trace` text.

use super::*;

#[test]
fn simple_files_round_trip() {
    register_all();
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
    control.write("snapshot", "2").unwrap();
    assert!(control
        .read("snapshot")
        .unwrap()
        .contains("* Snapshot is allocated *"));
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
    // Written out by hand, not taken from `FILES`: the top-level files
    // ftrace users expect, every option, two CPUs' worth of per-CPU files,
    // and this module's events (the test registered them above).
    let mut expected: Vec<String> = [
        "available_events",
        "available_filter_functions",
        "available_tracers",
        "buffer_size_kb",
        "buffer_total_size_kb",
        "current_tracer",
        "error_log",
        "function_profile_enabled",
        "max_graph_depth",
        "printk_formats",
        "saved_cmdlines",
        "set_event",
        "set_event_pid",
        "set_ftrace_filter",
        "set_ftrace_notrace",
        "set_ftrace_pid",
        "snapshot",
        "trace",
        "trace_clock",
        "trace_marker",
        "trace_options",
        "trace_pipe",
        "tracing_on",
        "options/overwrite",
        "options/function-fork",
        "options/event-fork",
        "options/irq-info",
        "options/print-parent",
        "options/funcgraph-cpu",
        "options/funcgraph-overhead",
        "options/funcgraph-duration",
        "options/funcgraph-proc",
        "options/funcgraph-abstime",
        "options/funcgraph-tail",
        "trace_stat/function0",
        "trace_stat/function1",
        "per_cpu/cpu0/stats",
        "per_cpu/cpu0/trace",
        "per_cpu/cpu0/trace_pipe",
        "per_cpu/cpu1/stats",
        "per_cpu/cpu1/trace",
        "per_cpu/cpu1/trace_pipe",
        "events/enable",
        "events/header_page",
        "events/header_event",
        "events/ctltest/enable",
        "events/ctltest/filter",
        "events/ftrace/function/format",
        "events/ftrace/function/id",
    ]
    .iter()
    .map(|f| f.to_string())
    .collect();
    for event in ["ctl_request", "ctl_reply"] {
        for file in ["format", "id", "enable", "filter", "trigger", "hist"] {
            expected.push(alloc::format!("events/ctltest/{event}/{file}"));
        }
    }
    let missing: Vec<&String> = expected.iter().filter(|f| !files.contains(f)).collect();
    assert!(missing.is_empty(), "missing {missing:?}");
    // Other tests register events of their own while this one runs; any
    // other file must be one of those.
    let unexpected: Vec<&String> = files
        .iter()
        .filter(|f| !expected.contains(f) && !f.starts_with("events/"))
        .collect();
    assert!(unexpected.is_empty(), "unexpected {unexpected:?}");
    let mut unique = files.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), files.len(), "a file is listed twice");
    // Built-in events have no enable file: they follow `current_tracer`.
    assert!(!files.iter().any(|f| f == "events/ftrace/function/enable"));
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

#[test]
fn trace_pipe_reports_lost_events_like_ftrace() {
    for overwrite in ["1", "0"] {
        lost_events_through_trace_pipe(overwrite);
    }
}

fn lost_events_through_trace_pipe(overwrite: &str) {
    let tracer = Tracer::with_threads(
        TraceConfig {
            buffer_kb: 8,
            ..TraceConfig::small()
        },
        1,
    )
    .unwrap();
    let control = Control::new(&tracer);
    control.write("options/overwrite", overwrite).unwrap();
    for i in 0..2000 {
        control
            .write("trace_marker", &alloc::format!("message {i}"))
            .unwrap();
    }
    let lost = tracer.lost(0);
    assert!(lost > 0);
    // `trace` tells the loss in its header, as ftrace's does.
    let peeked = control.read("trace").unwrap();
    let kept = peeked.lines().filter(|l| l.contains("message ")).count() as u64;
    assert!(peeked.contains(&alloc::format!(
        "# entries-in-buffer/entries-written: {kept}/2000   #P:1\n"
    )));
    let text = control.read("trace_pipe").unwrap();
    let lost_lines: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("CPU:0 [LOST"))
        .collect();
    assert!(!lost_lines.is_empty(), "{}", &text[..text.len().min(400)]);
    let shown: u64 = lost_lines
        .iter()
        .filter_map(|l| {
            l.strip_prefix("CPU:0 [LOST ")?
                .strip_suffix(" EVENTS]")?
                .parse::<u64>()
                .ok()
        })
        .sum();
    let events = text.lines().filter(|l| l.contains("message ")).count() as u64;
    // Every event written is either shown or counted as lost.
    assert_eq!(events + shown, 2000, "{lost_lines:?}");
    // Overwrite mode keeps the newest events, producer/consumer the oldest.
    let kept = if overwrite == "1" {
        "message 1999\n"
    } else {
        "message 0\n"
    };
    assert!(text.contains(kept), "{overwrite}");
}

#[test]
fn per_cpu_files_show_and_consume_one_cpu() {
    let tracer = Tracer::with_threads(TraceConfig::small(), 2).unwrap();
    let control = Control::new(&tracer);
    control.write("trace_marker", "from main").unwrap();
    std::thread::scope(|scope| {
        scope.spawn(|| control.write("trace_marker", "from thread").unwrap());
    });
    let all = control.read("trace").unwrap();
    let cpu_of = |needle: &str| -> String {
        let line = all.lines().find(|l| l.contains(needle)).unwrap();
        let open = line.find('[').unwrap();
        line[open + 1..open + 4].to_string()
    };
    let (main_cpu, thread_cpu) = (cpu_of("from main"), cpu_of("from thread"));
    assert_ne!(main_cpu, thread_cpu);
    let thread_cpu: usize = thread_cpu.parse().unwrap();
    let file = alloc::format!("per_cpu/cpu{thread_cpu}/trace");
    let one = control.read(&file).unwrap();
    assert!(
        one.contains("from thread") && !one.contains("from main"),
        "{one}"
    );
    assert!(one.contains("# entries-in-buffer/entries-written: 1/1   #P:2\n"));
    let pipe = control
        .read(&alloc::format!("per_cpu/cpu{thread_cpu}/trace_pipe"))
        .unwrap();
    assert_eq!(pipe.lines().count(), 1);
    assert!(pipe.ends_with("tracing_mark_write: from thread\n"));
    let rest = control.read("trace").unwrap();
    assert!(rest.contains("from main") && !rest.contains("from thread"));
    let main_cpu: usize = main_cpu.parse().unwrap();
    control
        .write(&alloc::format!("per_cpu/cpu{main_cpu}/trace"), "")
        .unwrap();
    assert!(!control.read("trace").unwrap().contains("from main"));
    assert_eq!(
        control.read("per_cpu/cpu9/trace").unwrap_err().errno(),
        "ENOENT"
    );
}
