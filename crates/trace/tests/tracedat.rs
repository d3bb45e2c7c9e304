//! trace.dat written from real ring-buffer pages reads back event for
//! event, and prints as ftrace text.

mod common;

use hotkern_trace::output::tracedat::{
    decode_pages, read_trace_dat, write_trace_dat, TraceDat, TraceDatError,
};
use hotkern_trace::output::{write_trace, Comms, Entry, Symbols};
use hotkern_trace::ring::page::{HEADER_EVENT_FORMAT, HEADER_PAGE_FORMAT};
use hotkern_trace::ring::{Mode, RingBuffer, PAGE_SIZE};

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
        printk_formats: String::new(),
        cmdlines: comms.to_saved_cmdlines(),
        options: Vec::new(),
        cpu_data,
    };
    (file, expected)
}

#[test]
fn round_trip_event_for_event() {
    let (file, mut expected) = sample();
    let bytes = write_trace_dat(&file);
    if let Ok(path) = std::env::var("HOTKERN_TRACEDAT_SAMPLE") {
        std::fs::write(path, &bytes).unwrap();
    }
    let back = read_trace_dat(&bytes).unwrap();
    assert_eq!(back, file);
    let data = back.to_trace_data().unwrap();
    let got: Vec<(u32, u64, Vec<u8>)> = data
        .entries
        .iter()
        .map(|e| match e {
            Entry::Event(r) => (
                r.cpu,
                r.timestamp_ns,
                r.payload[..expected_len(r.payload.len())].to_vec(),
            ),
            Entry::Lost { .. } => panic!("no loss expected"),
        })
        .collect();
    expected.sort_by_key(|(cpu, time, _)| (*time, *cpu));
    assert_eq!(got.len(), expected.len());
    for (g, e) in got.iter().zip(&expected) {
        assert_eq!((g.0, g.1), (e.0, e.1));
        assert_eq!(&g.2[..e.2.len()], &e.2[..]);
    }
    let mut text = String::new();
    write_trace(&data, "function", &mut text);
    assert!(
        text.contains("        worker-a-100     [000] ..... "),
        "{text}"
    );
    assert!(text.contains("demo_tick: comm=worker value=-3\n"), "{text}");
    assert!(text.contains(": do_other_work <-worker_loop\n"), "{text}");
}

fn expected_len(len: usize) -> usize {
    len
}

#[test]
fn damaged_files_are_refused_not_panicked_on() {
    let (file, _) = sample();
    let bytes = write_trace_dat(&file);
    assert_eq!(read_trace_dat(b"nope"), Err(TraceDatError::BadMagic));
    for cut in [5, 20, 100, 1000, bytes.len() - 1] {
        assert!(read_trace_dat(&bytes[..cut]).is_err(), "cut at {cut}");
    }
    let mut bad = bytes.clone();
    bad[10] = b'7';
    assert!(matches!(
        read_trace_dat(&bad),
        Err(TraceDatError::UnsupportedVersion(_))
    ));
}

#[test]
fn errors_say_what_is_wrong_and_where() {
    let error: &dyn std::error::Error = &TraceDatError::BadMagic;
    assert_eq!(error.to_string(), "not a trace.dat file (bad magic)");
    let page = decode_pages(1, &[0; 4], 4096).unwrap_err();
    let error: &dyn std::error::Error = &page;
    assert_eq!(error.to_string(), "page 0 offset 0: truncated page header");
    let error = TraceDatError::Page {
        cpu: 1,
        error: page,
    };
    assert_eq!(
        error.to_string(),
        "cpu 1: page 0 offset 0: truncated page header"
    );
}

/// When trace-cmd is installed, our report of the sample must equal its
/// `report -N` output line for line (scripts/check-trace-cmd does the same
/// for the demo's file).
#[test]
fn report_matches_trace_cmd_when_available() {
    use hotkern_trace::output::write_report;
    let (file, _) = sample();
    let bytes = write_trace_dat(&file);
    let data = read_trace_dat(&bytes).unwrap().to_trace_data().unwrap();
    let mut ours = String::new();
    write_report(&data, true, &mut ours);
    assert!(ours.starts_with("cpus=2\n"));
    assert_eq!(ours.lines().count(), 301);
    let Some(theirs) = common::trace_cmd_report(&bytes, "sample") else {
        return;
    };
    for (line, (a, b)) in ours.lines().zip(theirs.lines()).enumerate() {
        assert_eq!(a, b, "line {line}");
    }
    assert_eq!(ours.lines().count(), theirs.lines().count());
}

/// The fuzz target `tracedat_read` starts from this checked-in file (made
/// by a 1-CPU tracer: events with fields, function_graph pairs, printk and
/// a marker); it must stay a file the reader takes in full.
#[test]
fn fuzz_seed_is_a_whole_trace() {
    let bytes = include_bytes!("../fuzz/seeds/tracedat_read/small.dat");
    let data = read_trace_dat(bytes).unwrap().to_trace_data().unwrap();
    let mut names: Vec<&str> = data
        .entries
        .iter()
        .filter_map(|entry| match entry {
            Entry::Event(record) => data.events.get(&record.event_id()).map(|e| e.name.as_str()),
            _ => None,
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
