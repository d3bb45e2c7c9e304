//! Function-tracer files: filters, profiling, stack triggers.

use super::*;

mod ctl_funcs {
    #[crate::function]
    pub fn cf_read_page(n: u64) -> u64 {
        cf_read_block(n) + 1
    }

    #[crate::function]
    pub fn cf_read_block(n: u64) -> u64 {
        core::hint::black_box(n * 3)
    }

    #[crate::function]
    pub fn cf_write_page(n: u64) -> u64 {
        core::hint::black_box(n ^ 5)
    }

    pub mod net {
        #[crate::function]
        pub fn cf_send_packet(n: u64) -> u64 {
            core::hint::black_box(n + 7)
        }
    }
}

fn touch_functions() {
    ctl_funcs::cf_read_page(1);
    ctl_funcs::cf_write_page(1);
    ctl_funcs::net::cf_send_packet(1);
}

#[test]
fn ftrace_filter_globs_modules_negation_and_append() {
    let tracer = installed();
    touch_functions();
    let control = Control::new(tracer);
    let module = "hotkern_trace::control::tests::functions::ctl_funcs";
    let mine = |control: &Control<'_>| -> Vec<String> {
        let text = control.read("set_ftrace_filter").unwrap();
        text.lines()
            .filter(|l| {
                [
                    "cf_read_page",
                    "cf_read_block",
                    "cf_write_page",
                    "cf_send_packet",
                ]
                .contains(l)
            })
            .map(String::from)
            .collect()
    };
    control.write("set_ftrace_filter", "cf_read_*").unwrap();
    assert_eq!(mine(&control), ["cf_read_block", "cf_read_page"]);
    control.append("set_ftrace_filter", "!cf_read_b*").unwrap();
    assert_eq!(mine(&control), ["cf_read_page"]);
    control.append("set_ftrace_filter", "cf_*_page").unwrap();
    assert_eq!(mine(&control), ["cf_read_page", "cf_write_page"]);
    control
        .write("set_ftrace_filter", &alloc::format!("*:mod:{module}::net"))
        .unwrap();
    assert_eq!(mine(&control), ["cf_send_packet"]);
    control
        .write("set_ftrace_filter", &alloc::format!("*:mod:!{module}::net"))
        .unwrap();
    let selected = mine(&control);
    assert!(
        selected.contains(&"cf_read_page".to_string())
            && !selected.contains(&"cf_send_packet".to_string())
    );
    control.write("set_ftrace_notrace", "cf_write_*").unwrap();
    assert!(!mine(&control).contains(&"cf_write_page".to_string()));
    assert_eq!(control.read("set_ftrace_notrace").unwrap(), "cf_write_*\n");
    control.write("set_ftrace_filter", "").unwrap();
    assert_eq!(
        control.read("set_ftrace_filter").unwrap(),
        "#### all functions enabled ####\n"
    );
    assert!(control
        .read("available_filter_functions")
        .unwrap()
        .contains("cf_send_packet\n"));
    tracer.uninstall();
}

#[test]
fn function_profile_fills_trace_stat() {
    let tracer = installed();
    let control = Control::new(tracer);
    control
        .write(
            "set_ftrace_filter",
            ":mod:hotkern_trace::control::tests::functions::ctl_funcs",
        )
        .unwrap();
    control.write("current_tracer", "function").unwrap();
    control.write("function_profile_enabled", "1").unwrap();
    for n in 0..5 {
        ctl_funcs::cf_read_page(n);
    }
    let mut table = String::new();
    for cpu in 0..tracer.cpus() {
        table.push_str(
            &control
                .read(&alloc::format!("trace_stat/function{cpu}"))
                .unwrap(),
        );
    }
    // Tests run in parallel with tracers of their own; a thread that calls
    // into several models may be given another CPU between calls, so the
    // hits add up over the per-CPU tables.
    let rows: Vec<Vec<&str>> = table
        .lines()
        .filter(|l| l.trim_start().starts_with("cf_read_page "))
        .map(|row| row.split_whitespace().collect())
        .collect();
    assert!(!rows.is_empty(), "{table}");
    let hits: u64 = rows
        .iter()
        .map(|columns| columns[1].parse::<u64>().unwrap())
        .sum();
    assert_eq!(hits, 5, "{table}");
    assert!(rows.iter().all(|columns| columns[3] == "us"), "{table}");
    // The function tracer wrote one `function` line per call.
    let text = control.read("trace").unwrap();
    assert!(text.contains(": cf_read_block <-cf_read_page\n"), "{text}");
    assert!(text.starts_with("# tracer: function\n"));
    tracer.uninstall();
}

#[test]
fn stacktrace_trigger_records_the_callers() {
    use crate::event::format::KERNEL_STACK_ID;
    use crate::output::Entry;

    let tracer = installed();
    let control = Control::new(tracer);
    control.write("set_event", "ctltest:ctl_reply").unwrap();
    control
        .write("events/ctltest/ctl_reply/trigger", "stacktrace:1")
        .unwrap();
    ctl_reply::trace(3);
    ctl_reply::trace(4);
    // `:1` fired once: one kernel_stack event, from the task that hit the
    // event, recorded before the event itself (as ftrace's unfiltered
    // triggers run).
    let data = crate::control::view::peek(tracer);
    let records: Vec<_> = data
        .entries
        .iter()
        .filter_map(|entry| match entry {
            Entry::Event(record) => Some(record),
            Entry::Lost { .. } => None,
        })
        .collect();
    let stacks: Vec<_> = records
        .iter()
        .filter(|r| r.event_id() == KERNEL_STACK_ID)
        .collect();
    assert_eq!(stacks.len(), 1, "{records:?}");
    assert_eq!(records.len(), 3);
    assert_eq!(records[0].event_id(), KERNEL_STACK_ID);
    let reply = records[1];
    assert_eq!(stacks[0].pid(), reply.pid());
    assert_eq!(stacks[0].cpu, reply.cpu);
    let event = data.event(KERNEL_STACK_ID).unwrap();
    let frames = crate::output::stack::stack_frames(event, &stacks[0].payload);
    let text = control.read("trace").unwrap();
    assert_eq!(text.matches("<stack trace>").count(), 1, "{text}");
    assert!(text.contains(": <stack trace>\n => "), "{text}");
    #[cfg(feature = "std")]
    {
        // The frames start at the code that hit the event: none of the
        // tracer's own frames, and this test among the callers by name.
        assert!(!frames.is_empty());
        let names: Vec<String> = frames
            .iter()
            .map(|&address| data.symbols.frame_name(address))
            .collect();
        assert!(
            !names[0].starts_with("hotkern_trace::tracer")
                && !names[0].starts_with("hotkern_trace::control::hook")
                && !names[0].starts_with("hotkern_trace::trigger"),
            "{names:?}"
        );
        assert!(
            names
                .iter()
                .any(|name| name.contains("stacktrace_trigger_records_the_callers")),
            "{names:?}"
        );
        for name in &names {
            assert!(text.contains(&alloc::format!(" => {name}\n")), "{text}");
        }
    }
    #[cfg(not(feature = "std"))]
    assert!(frames.is_empty());
    tracer.uninstall();
}
