//! trace.dat written from real ring-buffer pages by hotkern-tracedat's
//! writer, versions 6 and 7, reads back event for event and prints as
//! trace-cmd prints it; the same pages print as ftrace text live.

mod common;

use hotkern_trace::internals::output::{decode_pages, merge};
use hotkern_trace::output::{write_trace, Comms, Symbols, TextOptions, TraceData};
use hotkern_trace::ring::{Mode, RingBuffer, HEADER_EVENT_FORMAT, HEADER_PAGE_FORMAT, PAGE_SIZE};
use hotkern_tracedat::write::{write_trace_dat, Compression, FileVersion, TraceDat, WriteOptions};
use hotkern_tracedat::EventFormat;

const FUNCTION_FORMAT: &str = "name: function\nID: 1\nformat:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\
\tfield:unsigned long ip;\toffset:8;\tsize:8;\tsigned:0;\n\
\tfield:unsigned long parent_ip;\toffset:16;\tsize:8;\tsigned:0;\n\n\
print fmt: \" %ps <-- %ps\", (void *)REC->ip, (void *)REC->parent_ip\n";

const LONG_FORMAT: &str = "name: a_very_long_event_name_for_padding\nID: 601\nformat:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\
\tfield:unsigned long long value;\toffset:8;\tsize:8;\tsigned:0;\n\n\
print fmt: \"value=0x%08llx\", REC->value\n";

const DEMO_FORMAT: &str = "name: demo_tick\nID: 600\nformat:\n\
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n\
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;\n\
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;\n\
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n\
\tfield:char comm[16];\toffset:8;\tsize:16;\tsigned:0;\n\
\tfield:int value;\toffset:24;\tsize:4;\tsigned:1;\n\n\
print fmt: \"comm=%s value=%d\", REC->comm, REC->value\n";

fn header(id: u16, pid: i32) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&id.to_le_bytes());
    p.push(0);
    p.push(0);
    p.extend_from_slice(&pid.to_le_bytes());
    p
}

/// A two-CPU trace: function events and demo events, with gaps large
/// enough to need time extends.
fn sample() -> (TraceDat, Vec<(u32, u64, Vec<u8>)>) {
    let ring = RingBuffer::new(2, 8, Mode::Overwrite).unwrap();
    let mut expected = Vec::new();
    for i in 0..300u64 {
        let cpu = (i % 2) as usize;
        let time =
            1_000_000_000 + i * 1_000 + (i % 5) * 250 + if i > 150 { 5_000_000_000 } else { 0 };
        let pid = 100 + cpu as i32;
        let payload = if i % 7 == 5 {
            let mut p = header(601, pid);
            p.extend_from_slice(&(i * 4097).to_le_bytes());
            p
        } else if i % 3 == 0 {
            let mut p = header(600, pid);
            let mut comm = [0u8; 16];
            comm[..6].copy_from_slice(b"worker");
            p.extend_from_slice(&comm);
            p.extend_from_slice(&(-(i as i32)).to_le_bytes());
            p
        } else {
            let mut p = header(1, pid);
            p.extend_from_slice(&(0xffff_0000_0000_1000u64 + (i % 2) * 0x100).to_le_bytes());
            p.extend_from_slice(&0xffff_0000_0000_2000u64.to_le_bytes());
            p
        };
        // SAFETY: this test thread is the only writer of every CPU.
        unsafe { ring.write(cpu, time, &payload).unwrap() };
        expected.push((cpu as u32, time, payload));
    }
    let mut cpu_data = vec![Vec::new(); 2];
    for (cpu, data) in cpu_data.iter_mut().enumerate() {
        ring.peek_pages(cpu, |page: &[u8; PAGE_SIZE]| data.extend_from_slice(page));
    }
    let mut symbols = Symbols::new();
    symbols.insert(0xffff_0000_0000_1000, "do_work");
    symbols.insert(0xffff_0000_0000_1100, "do_other_work");
    symbols.insert(0xffff_0000_0000_2000, "worker_loop");
    let mut comms = Comms::new();
    comms.insert(100, "worker-a");
    comms.insert(101, "worker-b");
    let file = TraceDat {
        page_size: PAGE_SIZE as u32,
        header_page: HEADER_PAGE_FORMAT.to_string(),
        header_event: HEADER_EVENT_FORMAT.to_string(),
        ftrace_formats: vec![FUNCTION_FORMAT.to_string()],
        systems: vec![(
            "demo".to_string(),
            vec![DEMO_FORMAT.to_string(), LONG_FORMAT.to_string()],
        )],
        kallsyms: symbols.to_kallsyms(),
        cmdlines: comms.to_saved_cmdlines(),
        cpu_data,
        ..TraceDat::default()
    };
    (file, expected)
}

/// Version 6, and version 7 plain and compressed.
const WRITES: [(FileVersion, Compression); 3] = [
    (FileVersion::V6, Compression::None),
    (FileVersion::V7, Compression::None),
    (FileVersion::V7, Compression::Zstd),
];

fn write(file: &TraceDat, (version, compression): (FileVersion, Compression)) -> Vec<u8> {
    let options = WriteOptions {
        version,
        compression,
    };
    write_trace_dat(file, &options).unwrap()
}

#[test]
fn round_trip_event_for_event() {
    let (file, mut expected) = sample();
    expected.sort_by_key(|(cpu, time, _)| (*time, *cpu));
    for how in WRITES {
        let bytes = write(&file, how);
        if let Ok(path) = std::env::var("HOTKERN_TRACEDAT_SAMPLE") {
            std::fs::write(path, &bytes).unwrap();
        }
        let (got, lost) = common::read_back(&bytes);
        assert_eq!(lost, 0, "{how:?}");
        assert_eq!(got.len(), expected.len(), "{how:?}");
        for (g, e) in got.iter().zip(&expected) {
            assert_eq!((g.0, g.1), (e.0, e.1), "{how:?}");
            // The ring pads payloads to 4 bytes; the reader keeps that.
            assert_eq!(&g.2[..e.2.len()], &e.2[..], "{how:?}");
        }
    }
}

/// The live side: the same pages decoded by the recorder's output code and
/// printed as ftrace's `trace` file.
#[test]
fn pages_print_as_ftrace_text() {
    let (file, _) = sample();
    let mut data = TraceData::new(2);
    data.add_event(EventFormat::parse("ftrace", FUNCTION_FORMAT).unwrap());
    for text in &file.systems[0].1 {
        data.add_event(EventFormat::parse("demo", text).unwrap());
    }
    data.symbols = Symbols::from_kallsyms(&file.kallsyms);
    data.comms = Comms::from_saved_cmdlines(&file.cmdlines);
    let streams = file
        .cpu_data
        .iter()
        .enumerate()
        .map(|(cpu, pages)| decode_pages(cpu as u32, pages, PAGE_SIZE).unwrap())
        .collect();
    merge(&mut data, streams);
    assert_eq!(data.event_count(), 300);
    let mut text = String::new();
    write_trace(&data, "function", &TextOptions::default(), &mut text);
    assert!(
        text.contains("        worker-a-100     [000] ..... "),
        "{text}"
    );
    assert!(text.contains("demo_tick: comm=worker value=-3\n"), "{text}");
    assert!(text.contains(": do_other_work <-worker_loop\n"), "{text}");
}

#[test]
fn page_errors_say_what_is_wrong_and_where() {
    let page = decode_pages(1, &[0; 4], 4096).unwrap_err();
    let error: &dyn std::error::Error = &page;
    assert_eq!(error.to_string(), "page 0 offset 0: truncated page header");
}

/// When trace-cmd is installed, the report of the sample must equal its
/// `report -N -t` output line for line, whichever version was written
/// (scripts/check-trace-cmd does the same for the demo's file).
#[test]
fn report_matches_trace_cmd_when_available() {
    let (file, _) = sample();
    for how in WRITES {
        let bytes = write(&file, how);
        let ours = common::report(&bytes);
        assert!(ours.starts_with("cpus=2\n"), "{how:?}");
        assert_eq!(ours.lines().count(), 301, "{how:?}");
        assert!(ours.contains("do_other_work <-- worker_loop\n"), "{ours}");
        let Some(theirs) = common::trace_cmd_report(&bytes, "sample") else {
            return;
        };
        for (line, (a, b)) in ours.lines().zip(theirs.lines()).enumerate() {
            assert_eq!(a, b, "{how:?} line {line}");
        }
        assert_eq!(ours.lines().count(), theirs.lines().count(), "{how:?}");
    }
}

/// hotkern-tracedat's fuzz target `tracedat_read` starts from this
/// checked-in file among others (made by a 1-CPU tracer: events with
/// fields, function_graph pairs, printk and a marker); it must stay a file
/// the reader takes in full.
#[test]
fn fuzz_seed_is_a_whole_trace() {
    let bytes = include_bytes!("../../tracedat/fuzz/seeds/tracedat_read/hotkern-small.dat");
    let file = hotkern_tracedat::TraceFile::from_bytes(bytes.to_vec()).unwrap();
    let printer = file.printer();
    let (events, lost) = common::read_back(bytes);
    assert_eq!(lost, 0);
    let mut names: Vec<&str> = events
        .iter()
        .filter_map(|(cpu, timestamp, data)| {
            let record = hotkern_tracedat::Record {
                buffer: 0,
                cpu: *cpu,
                timestamp: *timestamp,
                data: data.clone(),
                lost_before: None,
            };
            printer.event_of(&record).map(|e| e.name.as_str())
        })
        .collect();
    assert_eq!(names.len(), 19);
    names.sort_unstable();
    names.dedup();
    assert_eq!(
        names,
        [
            "bprint",
            "funcgraph_entry",
            "funcgraph_exit",
            "print",
            "seed_sample"
        ]
    );
}
