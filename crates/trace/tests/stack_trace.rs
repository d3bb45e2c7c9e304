//! The `stacktrace` trigger end to end: a live tracer records an
//! `ftrace/kernel_stack` event, our text and JSON name its frames, and the
//! real `trace-cmd report` reads the saved trace.dat and prints the same
//! frames by name.

mod common;

use hotkern_trace::control::{view, Control};
use hotkern_trace::event::KERNEL_STACK_ID;
use hotkern_trace::internals::output::stack_frames;
use hotkern_trace::output::Entry;
use hotkern_trace::{TraceConfig, Tracer};

hotkern_trace::define_event! {
    /// The event the trigger is set on.
    pub stk_hit in stktest {
        n: u32,
    }
    print "n=%u", n
}

/// A caller with a name to find among the frames.
#[inline(never)]
fn stk_caller_function(n: u32) {
    stk_hit::trace(n);
    std::hint::black_box(n);
}

/// Calls [`stk_caller_function`] `depth` frames down, so that the stack is
/// longer than the eight callers the event's format declares.
#[inline(never)]
fn stk_nested(depth: u32, n: u32) {
    if depth == 0 {
        stk_caller_function(n);
    } else {
        stk_nested(std::hint::black_box(depth - 1), n);
    }
    std::hint::black_box(depth);
}

/// Records one stack trace on a thread named `stk-worker` and returns the
/// tracer with its buffers unread.
fn record() -> &'static Tracer {
    hotkern_trace::event::register(&stk_hit::EVENT);
    let tracer = Tracer::with_threads(TraceConfig::small(), 1)
        .unwrap()
        .install()
        .unwrap();
    let control = Control::new(tracer);
    control.write("set_event", "stktest:stk_hit").unwrap();
    control
        .write("events/stktest/stk_hit/trigger", "stacktrace:1")
        .unwrap();
    std::thread::Builder::new()
        .name("stk-worker".into())
        .spawn(|| {
            stk_nested(6, 1);
            stk_caller_function(2);
        })
        .unwrap()
        .join()
        .unwrap();
    tracer
}

#[test]
fn stack_trace_reads_back_in_text_json_and_trace_cmd() {
    let tracer = record();
    let data = view::peek(tracer);
    let stacks: Vec<_> = data
        .entries
        .iter()
        .filter_map(|entry| match entry {
            Entry::Event(record) if record.event_id() == KERNEL_STACK_ID => Some(record),
            _ => None,
        })
        .collect();
    assert_eq!(stacks.len(), 1, "{:?}", data.entries);
    let event = data.event(KERNEL_STACK_ID).unwrap();
    let frames = stack_frames(event, &stacks[0].payload);
    let names: Vec<String> = frames
        .iter()
        .map(|&address| data.symbols.frame_name(address))
        .collect();
    assert!(
        names[0].ends_with("stk_caller_function"),
        "the first frame is the code that hit the event: {names:?}"
    );

    // Text: `<stack trace>` on the event line, then ` => name` lines.
    let control = Control::new(tracer);
    let text = control.read("trace").unwrap();
    let mut expected = String::from(": <stack trace>\n");
    for name in &names {
        expected.push_str(&format!(" => {name}\n"));
    }
    assert!(text.contains(&expected), "{text}");
    assert!(text.contains("stk-worker-"), "{text}");

    // trace.dat: the format and the symbols travel with the file (the
    // view adds the stack's symbols), so our own reader names the frames
    // the same way without this process.
    let file = view::trace_dat(tracer, view::peek_pages(tracer));
    assert!(file
        .ftrace_formats
        .iter()
        .any(|f| f.starts_with("name: kernel_stack\nID: 4\n")));
    let bytes = common::write_v6(&file);

    // JSON (exported from the saved file): the event's args list the
    // frames by name.
    let mut json = Vec::new();
    let mut saved = hotkern_tracedat::TraceFile::from_bytes(bytes.clone()).unwrap();
    hotkern_tracedat::json::write_chrome_json(&mut saved, &Default::default(), &mut json).unwrap();
    let json = String::from_utf8(json).unwrap();
    let quoted: Vec<String> = names.iter().map(|n| format!("\"{n}\"")).collect();
    assert!(
        json.contains(&format!("\"frames\":[{}]", quoted.join(","))),
        "{json}"
    );
    let saved = hotkern_tracedat::TraceFile::from_bytes(bytes.clone()).unwrap();
    let saved_names: Vec<String> = frames
        .iter()
        .map(|&address| {
            let (name, _) = saved.metadata().kallsyms.lookup(address).unwrap();
            name.to_string()
        })
        .collect();
    assert_eq!(saved_names, names);

    // trace-cmd prints `<stack trace >`, then `=> name (address)` per frame
    // up to the end marker, named from the file's kallsyms.
    if let Some(report) = common::trace_cmd_report_with(&bytes, "stack", &[]) {
        let start = report
            .find("kernel_stack:")
            .unwrap_or_else(|| panic!("{report}"));
        let lines: Vec<&str> = report[start..].lines().collect();
        assert!(lines[0].ends_with("<stack trace >"), "{report}");
        assert!(report[..start].contains("stk-worker-"), "{report}");
        for (line, (name, address)) in lines[1..].iter().zip(names.iter().zip(&frames)) {
            assert_eq!(*line, format!("=> {name} ({address:x})"), "{report}");
        }
        assert!(lines[frames.len() + 1].contains("stk_hit:"), "{report}");
    }
    // Without plugins trace-cmd goes by the format: the first eight
    // callers through `%ps`, and it must still read the file cleanly.
    if let Some(report) = common::trace_cmd_report_with(&bytes, "stack", &["-N"]) {
        assert!(report.contains(&format!("=> {}", names[0])), "{report}");
    }
    tracer.uninstall();
}
