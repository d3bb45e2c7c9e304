//! Event files: filters, triggers, `set_event`, refused writes.

use super::*;

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
    // Triggers put the event in soft mode, shown with `*`.
    assert_eq!(
        control.read("events/trigtest/trig_hit/enable").unwrap(),
        "0*\n"
    );
    trig_hit::trace(9);
    assert_eq!(
        control.read("events/trigtest/trig_hit/enable").unwrap(),
        "1*\n"
    );
    trig_hit::trace(10);
    assert!(control.read("trace").unwrap().contains("trig_hit: n=10"));
    tracer.uninstall();
}

mod comm_events {
    crate::define_event! {
        /// Used only by the `COMM` filter test.
        pub comm_hit in commtest {
            n: u32,
        }
        print "n=%u", n
    }
}

/// Runs `work` on a new thread called `name` and waits for it.
fn on_thread(name: &str, work: fn()) {
    std::thread::Builder::new()
        .name(name.into())
        .spawn(work)
        .unwrap()
        .join()
        .unwrap();
}

/// The `n=` of every `comm_hit` line in `text`, with the task's name.
fn comm_hits(text: &str) -> Vec<(String, u32)> {
    text.lines()
        .filter_map(|line| {
            let (task, rest) = line.split_once(" [")?;
            let n = rest.split_once("comm_hit: n=")?.1.parse().ok()?;
            let comm = task.trim_start().rsplit_once('-')?.0;
            Some((comm.into(), n))
        })
        .collect()
}

#[test]
fn comm_filters_select_the_task_by_name() {
    use comm_events::comm_hit;

    crate::event::register(&comm_hit::EVENT);
    let tracer = Tracer::with_threads(TraceConfig::small(), 2)
        .unwrap()
        .install()
        .unwrap();
    let control = Control::new(tracer);
    control.write("set_event", "commtest:comm_hit").unwrap();
    let fire = || {
        on_thread("worker-1", || {
            comm_hit::trace(1);
            comm_hit::trace(2);
        });
        on_thread("worker-2", || {
            comm_hit::trace(3);
            comm_hit::trace(4);
        });
    };
    let filter = "events/commtest/comm_hit/filter";
    let cases: [(&str, &[(&str, u32)]); 4] = [
        ("comm == \"worker-1\"", &[("worker-1", 1), ("worker-1", 2)]),
        ("COMM != \"worker-1\"", &[("worker-2", 3), ("worker-2", 4)]),
        (
            "COMM ~ \"worker-*\" && n > 1",
            &[("worker-1", 2), ("worker-2", 3), ("worker-2", 4)],
        ),
        (
            "comm ~ \"*-2\" || n == 1",
            &[("worker-1", 1), ("worker-2", 3), ("worker-2", 4)],
        ),
    ];
    for (text, expected) in cases {
        control.write(filter, text).unwrap();
        fire();
        let hits = comm_hits(&control.read("trace_pipe").unwrap());
        let expected: Vec<(String, u32)> = expected.iter().map(|&(c, n)| (c.into(), n)).collect();
        assert_eq!(hits, expected, "{text}");
    }

    // Trigger filters see the task name too.
    control.write(filter, "0").unwrap();
    control
        .write(
            "events/commtest/comm_hit/trigger",
            "traceoff if COMM == \"worker-2\"",
        )
        .unwrap();
    fire();
    assert_eq!(control.read("tracing_on").unwrap(), "0\n");
    let hits = comm_hits(&control.read("trace_pipe").unwrap());
    // The filtered trigger runs after its event is recorded: the first
    // hit of worker-2 is kept and turns tracing off.
    let expected: Vec<(String, u32)> = [("worker-1", 1), ("worker-1", 2), ("worker-2", 3)]
        .iter()
        .map(|&(c, n)| (c.into(), n))
        .collect();
    assert_eq!(hits, expected);

    // `COMM` is a string: an ordering is refused with its position and the
    // filter in place stays.
    control
        .write("events/commtest/comm_hit/trigger", "!traceoff")
        .unwrap();
    control.write("tracing_on", "1").unwrap();
    control.write(filter, "COMM == \"worker-2\"").unwrap();
    match control.write(filter, "comm > \"x\"").unwrap_err() {
        ControlError::Filter { error, .. } => {
            assert_eq!(error.kind, crate::filter::FilterErrorKind::IllegalFieldOp);
            assert_eq!(error.position, 7);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(control.read(filter).unwrap(), "COMM == \"worker-2\"\n");
    fire();
    let hits = comm_hits(&control.read("trace_pipe").unwrap());
    assert_eq!(hits.iter().map(|h| h.1).collect::<Vec<_>>(), [3, 4]);
    tracer.uninstall();
}
