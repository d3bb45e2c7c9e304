//! Conformance of the text outputs with ftrace's: the `trace` header, the
//! line layout, latency flags, time stamps, lost-event lines, and the
//! function_graph layout (leaves, nesting, duration markers, task
//! switches, comments). Built from hand-made records so every byte is known.

use hotkern_trace::internals::builtin_formats;
use hotkern_trace::internals::output::{
    flag, latency_flags, merge, split_timestamp, write_graph_duration,
};
use hotkern_trace::output::{
    write_trace, Comms, Entry, RawRecord, Symbols, TextOptions, TraceData,
};
use hotkern_tracedat::EventFormat;

const SCHED_FORMAT: &str = "name: sched_wake\nID: 300\nformat:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\
\tfield:char comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\
\tfield:int pid;\toffset:24;\tsize:4;\tsigned:1;\n\n\
print fmt: \"comm=%s pid=%d\", REC->comm, REC->pid\n";

const FUNC_A: u64 = 0xffff_8000_0000_1000;
const FUNC_B: u64 = 0xffff_8000_0000_2000;
const FUNC_C: u64 = 0xffff_8000_0000_3000;

fn trace_data(cpus: u32) -> TraceData {
    let mut data = TraceData::new(cpus);
    for format in builtin_formats() {
        data.add_event(EventFormat::parse(format.system(), &format.to_format_file()).unwrap());
    }
    data.add_event(EventFormat::parse("sched", SCHED_FORMAT).unwrap());
    let mut symbols = Symbols::new();
    symbols.insert(FUNC_A, "schedule");
    symbols.insert(FUNC_B, "pick_next_task");
    symbols.insert(FUNC_C, "worker_thread");
    data.symbols = symbols;
    let mut comms = Comms::new();
    comms.insert(1234, "bash");
    comms.insert(77, "kworker/1:2");
    data.comms = comms;
    data
}

/// A `sched_wake` payload from task 1234 waking `comm` with pid `pid`.
fn wake_payload(data: &TraceData, comm: &[u8], flags: u8, preempt: u8, pid: i32) -> Vec<u8> {
    let mut name = [0u8; 16];
    name[..comm.len()].copy_from_slice(comm);
    payload(
        data,
        "sched_wake",
        1234,
        flags,
        preempt,
        &[("comm", &name), ("pid", &pid.to_le_bytes())],
    )
}

/// A payload for event `name` of `data` with fields set by name.
fn payload(
    data: &TraceData,
    name: &str,
    pid: i32,
    flags: u8,
    preempt: u8,
    fields: &[(&str, &[u8])],
) -> Vec<u8> {
    let event = data.event_named(name).unwrap();
    let end = event.all_fields().map(|f| f.offset + f.size).max().unwrap();
    let mut p = vec![0u8; end];
    p[..2].copy_from_slice(&(event.id as u16).to_le_bytes());
    p[2] = flags;
    p[3] = preempt;
    p[4..8].copy_from_slice(&pid.to_le_bytes());
    for (field, bytes) in fields {
        let f = event.field(field).unwrap();
        if f.size == 0 {
            p.truncate(f.offset);
            p.extend_from_slice(bytes);
        } else {
            p[f.offset..f.offset + bytes.len()].copy_from_slice(bytes);
        }
    }
    p
}

fn event(cpu: u32, ns: u64, payload: Vec<u8>) -> Entry {
    Entry::Event(RawRecord {
        cpu,
        timestamp_ns: ns,
        payload,
    })
}

#[test]
fn default_layout_header_lines_and_losses() {
    let mut data = trace_data(4);
    let wake = wake_payload(&data, b"sshd", flag::IRQS_OFF | flag::HARDIRQ, 0x21, -5);
    let function = payload(
        &data,
        "function",
        77,
        flag::NEED_RESCHED | flag::SOFTIRQ,
        0,
        &[
            ("ip", &FUNC_A.to_le_bytes()),
            ("parent_ip", &FUNC_C.to_le_bytes()),
        ],
    );
    let marker = payload(
        &data,
        "print",
        0,
        0,
        0,
        &[("ip", &FUNC_B.to_le_bytes()), ("buf", b"hello\n\0")],
    );
    data.entries = vec![
        event(1, 123_456_789_499, wake),
        Entry::Lost { cpu: 3, count: 17 },
        event(3, 123_456_790_500, function),
        Entry::Lost { cpu: 0, count: 0 },
        event(0, 999_999_500, marker),
    ];
    data.entries_written = 20;
    let mut text = String::new();
    write_trace(&data, "nop", &TextOptions::default(), &mut text);
    let expected = "\
# tracer: nop
#
# entries-in-buffer/entries-written: 3/20   #P:4
#
#                                _-----=> irqs-off/BH-disabled
#                               / _----=> need-resched
#                              | / _---=> hardirq/softirq
#                              || / _--=> preempt-depth
#                              ||| / _-=> migrate-disable
#                              |||| /     delay
#           TASK-PID     CPU#  |||||  TIMESTAMP  FUNCTION
#              | |         |   |||||     |         |
            bash-1234    [001] d.h12   123.456789: sched_wake: comm=sshd pid=-5
CPU:3 [LOST 17 EVENTS]
     kworker/1:2-77      [003] .ns..   123.456791: schedule <-worker_thread
CPU:0 [LOST EVENTS]
          <idle>-0       [000] .....     1.000000: pick_next_task: hello
";
    assert_eq!(text, expected);
}

#[test]
fn latency_flag_columns() {
    let cases = [
        (0, 0, "....."),
        (flag::IRQS_OFF, 1, "d..1."),
        (flag::IRQS_OFF | flag::BH_OFF, 0, "D...."),
        (flag::BH_OFF, 0, "b...."),
        (flag::IRQS_NOSUPPORT, 0, "X...."),
        (flag::NEED_RESCHED | flag::PREEMPT_RESCHED, 0, ".N..."),
        (flag::PREEMPT_RESCHED, 0, ".p..."),
        (flag::NMI | flag::HARDIRQ, 0, "..Z.."),
        (flag::NMI, 0, "..z.."),
        (flag::HARDIRQ | flag::SOFTIRQ, 0, "..H.."),
        (0, 0xf3, "...3f"),
    ];
    for (flags, preempt, expected) in cases {
        assert_eq!(
            latency_flags(flags, preempt),
            expected,
            "{flags:#x} {preempt:#x}"
        );
    }
}

#[test]
fn timestamps_round_to_the_microsecond() {
    assert_eq!(split_timestamp(0), (0, 0));
    assert_eq!(split_timestamp(1_499), (0, 1));
    assert_eq!(split_timestamp(1_500), (0, 2));
    assert_eq!(split_timestamp(999_999_999), (1, 0));
    assert_eq!(split_timestamp(12_345_678_901_234), (12_345, 678_901));
}

#[test]
fn graph_durations_as_ftrace_prints_them() {
    let cases = [
        (374, "0.374 us    "),
        (12_250, "12.250 us   "),
        (123_456, "123.456 us  "),
        (1_234_567, "1234.567 us "),
        (12_345_678, "12345.67 us "),
        (123_456_789, "123456.7 us "),
        (1_234_567_890, "1234567 us  "),
    ];
    for (ns, expected) in cases {
        let mut out = String::new();
        write_graph_duration(ns, &mut out);
        assert_eq!(out, expected, "{ns}");
    }
}

fn entry(data: &TraceData, pid: i32, func: u64, depth: i32) -> Vec<u8> {
    payload(
        data,
        "funcgraph_entry",
        pid,
        0,
        0,
        &[
            ("func", &func.to_le_bytes()),
            ("depth", &depth.to_le_bytes()),
        ],
    )
}

fn exit(data: &TraceData, pid: i32, func: u64, depth: i32, calltime: u64, rettime: u64) -> Vec<u8> {
    payload(
        data,
        "funcgraph_exit",
        pid,
        0,
        0,
        &[
            ("func", &func.to_le_bytes()),
            ("depth", &depth.to_le_bytes()),
            ("calltime", &calltime.to_le_bytes()),
            ("rettime", &rettime.to_le_bytes()),
        ],
    )
}

#[test]
fn function_graph_layout() {
    let mut data = trace_data(2);
    let wake = wake_payload(&data, b"cat", 0, 0, 9);
    data.entries = vec![
        event(1, 1_000, entry(&data, 1234, FUNC_C, 0)),
        event(1, 1_100, entry(&data, 1234, FUNC_A, 1)),
        // A leaf on the other CPU in between does not break the leaf below.
        event(0, 1_150, entry(&data, 77, FUNC_B, 0)),
        event(1, 1_200, exit(&data, 1234, FUNC_A, 1, 1_100, 1_474)),
        event(0, 1_250, exit(&data, 77, FUNC_B, 0, 1_150, 150_000)),
        event(1, 1_300, wake),
        event(1, 2_000, exit(&data, 1234, FUNC_C, 0, 1_000, 13_250)),
        // An exit whose entry was lost names its function.
        event(1, 3_000, exit(&data, 1234, FUNC_B, 0, 2_500, 2_900)),
        // Another task on CPU 1.
        event(1, 4_000, entry(&data, 77, FUNC_A, 0)),
        event(1, 5_000, exit(&data, 77, FUNC_A, 0, 4_000, 2_004_000)),
    ];
    let mut text = String::new();
    write_trace(&data, "function_graph", &TextOptions::default(), &mut text);
    let expected = "\
# tracer: function_graph
#
# CPU  DURATION                  FUNCTION CALLS
# |     |   |                     |   |   |   |
 1)               |  worker_thread() {
 1)   0.374 us    |    schedule();
 0) ! 148.850 us  |  pick_next_task();
 1)               |  /* sched_wake: comm=cat pid=9 */
 1) + 12.250 us   |  }
 1)   0.400 us    |  } /* pick_next_task */
 ------------------------------------------
 1)   bash-1234    =>   kworker-77  
 ------------------------------------------

 1) # 2000.000 us |  schedule();
";
    assert_eq!(text, expected);
}

#[test]
fn absurd_graph_depths_from_a_file_are_bounded() {
    // Found by fuzzing tracedat_read: a depth of 0x7f000000 made the graph
    // writer indent by four billion spaces. Depths past what a recorder
    // can produce stop indenting at MAX_DEPTH levels, and extreme values
    // neither panic nor overflow.
    let mut data = trace_data(1);
    data.entries = vec![
        event(0, 1_000, entry(&data, 1234, FUNC_C, 0x7f00_0000)),
        event(0, 1_100, entry(&data, 1234, FUNC_A, i32::MIN)),
        event(0, 1_200, exit(&data, 1234, FUNC_A, i32::MIN, 1_100, 1_150)),
        event(
            0,
            1_300,
            exit(&data, 1234, FUNC_C, 0x7f00_0000, 1_000, 1_250),
        ),
    ];
    let mut text = String::new();
    write_trace(&data, "function_graph", &TextOptions::default(), &mut text);
    let widest = text.lines().map(str::len).max().unwrap();
    let deepest = 2 * hotkern_trace::function::MAX_DEPTH;
    assert!(widest < deepest + 80, "{widest}");
    assert!(
        text.contains(&format!("{}worker_thread() {{", " ".repeat(deepest))),
        "{text}"
    );
}

#[test]
fn merge_orders_by_time_then_cpu_and_keeps_losses_with_their_event() {
    let mut data = trace_data(2);
    let a = payload(&data, "print", 1, 0, 0, &[("buf", b"a\0")]);
    let b = payload(&data, "print", 1, 0, 0, &[("buf", b"b\0")]);
    let c = payload(&data, "print", 1, 0, 0, &[("buf", b"c\0")]);
    let ev = |cpu, ns, p: &Vec<u8>| event(cpu, ns, p.clone());
    merge(
        &mut data,
        vec![
            vec![ev(0, 10, &a), ev(0, 30, &c)],
            vec![
                Entry::Lost { cpu: 1, count: 2 },
                ev(1, 20, &b),
                ev(1, 30, &b),
            ],
        ],
    );
    let order: Vec<String> = data
        .entries
        .iter()
        .map(|e| match e {
            Entry::Event(r) => format!("{}@{}", r.cpu, r.timestamp_ns),
            Entry::Lost { cpu, count } => format!("lost{cpu}x{count}"),
        })
        .collect();
    assert_eq!(order, ["0@10", "lost1x2", "1@20", "0@30", "1@30"]);
}

#[test]
fn graph_options_change_columns() {
    use hotkern_trace::output::write_trace;
    let mut data = trace_data(2);
    data.entries = vec![
        event(1, 1_000, entry(&data, 1234, FUNC_C, 0)),
        event(1, 1_100, entry(&data, 1234, FUNC_A, 1)),
        event(1, 1_200, exit(&data, 1234, FUNC_A, 1, 1_100, 1_474)),
        event(1, 2_000, exit(&data, 1234, FUNC_C, 0, 1_000, 13_250)),
    ];
    let options = TextOptions {
        graph_tail: true,
        graph_proc: true,
        graph_overhead: false,
        graph_abstime: true,
        ..TextOptions::default()
    };
    let mut text = String::new();
    write_trace(&data, "function_graph", &options, &mut text);
    let expected = "\
# tracer: function_graph
#
#     TIME        CPU  TASK/PID         DURATION                  FUNCTION CALLS
#      |          |     |    |           |   |                     |   |   |   |
    0.000001 |   1)   bash-1234    |               |  worker_thread() {
    0.000001 |   1)   bash-1234    |   0.374 us    |    schedule();
    0.000002 |   1)   bash-1234    |   12.250 us   |  } /* worker_thread */
";
    assert_eq!(text, expected);
    let bare = TextOptions {
        graph_cpu: false,
        graph_duration: false,
        ..TextOptions::default()
    };
    let mut text = String::new();
    write_trace(&data, "function_graph", &bare, &mut text);
    assert!(text.ends_with("#               FUNCTION CALLS\n#               |   |   |   |\nworker_thread() {\n  schedule();\n}\n"), "{text}");
}

#[test]
fn print_parent_off_drops_the_caller() {
    use hotkern_trace::output::write_trace;
    let mut data = trace_data(1);
    let function = payload(
        &data,
        "function",
        77,
        0,
        0,
        &[
            ("ip", &FUNC_A.to_le_bytes()),
            ("parent_ip", &FUNC_C.to_le_bytes()),
        ],
    );
    data.entries = vec![event(0, 5_000, function)];
    let options = TextOptions {
        print_parent: false,
        irq_info: false,
        ..TextOptions::default()
    };
    let mut text = String::new();
    write_trace(&data, "function", &options, &mut text);
    assert!(
        text.ends_with("\n     kworker/1:2-77      [000]      0.000005: schedule\n"),
        "{text}"
    );
}

/// A `kernel_stack` payload from `pid` with `frames` (and ftrace's
/// `ULONG_MAX` end marker filling the rest of `caller[8]`).
fn stack_payload(pid: i32, frames: &[u64]) -> Vec<u8> {
    let mut p = vec![0u8; 16];
    p[..2].copy_from_slice(&4u16.to_le_bytes());
    p[2] = flag::IRQS_OFF;
    p[3] = 1;
    p[4..8].copy_from_slice(&pid.to_le_bytes());
    p[8..12].copy_from_slice(&(frames.len() as i32).to_le_bytes());
    for slot in 0..frames.len().max(8) {
        let address = frames.get(slot).copied().unwrap_or(u64::MAX);
        p.extend_from_slice(&address.to_le_bytes());
    }
    p
}

/// A stack trace prints as ftrace's `<stack trace>` line followed by one
/// ` => function` line per frame: names from the symbol table (a saved
/// trace's: the nearest symbol at or below), no offsets, hex when no symbol
/// holds the address; the end marker and a 0 frame stop it.
#[test]
fn kernel_stack_lines() {
    let mut data = trace_data(2);
    // A table read from a file names frames from its own lines only.
    data.symbols = Symbols::from_kallsyms(&data.symbols.to_kallsyms());
    let short = stack_payload(1234, &[FUNC_A + 0x10, FUNC_B + 4, 0x1234]);
    let long: Vec<u64> = (0..10).map(|i| FUNC_C + i).collect();
    let long = stack_payload(77, &long);
    let stopped = stack_payload(1234, &[FUNC_B, 0, FUNC_A]);
    data.entries = vec![
        event(1, 5_000_001_000, short),
        event(0, 5_000_002_000, long),
        event(1, 5_000_003_000, stopped),
    ];
    let mut text = String::new();
    write_trace(&data, "nop", &TextOptions::default(), &mut text);
    let body = text
        .lines()
        .skip_while(|l| l.starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n");
    let mut expected = String::from(
        "            bash-1234    [001] d..1.     5.000001: <stack trace>
 => schedule
 => pick_next_task
 => 0x1234
     kworker/1:2-77      [000] d..1.     5.000002: <stack trace>
",
    );
    for _ in 0..10 {
        expected.push_str(" => worker_thread\n");
    }
    expected.push_str(
        "            bash-1234    [001] d..1.     5.000003: <stack trace>
 => pick_next_task",
    );
    assert_eq!(body, expected);
}
