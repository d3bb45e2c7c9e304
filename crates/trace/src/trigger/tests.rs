use super::*;
use crate::filter::common_fields;
use alloc::string::ToString;
use alloc::vec;
use alloc::vec::Vec;

#[derive(Default)]
struct Recorder {
    on: bool,
    snapshots: u32,
    stacks: Vec<u32>,
    enabled: Vec<(String, String)>,
}

impl TriggerActions for Recorder {
    fn tracing_on(&self) -> bool {
        self.on
    }
    fn set_tracing_on(&mut self, on: bool) {
        self.on = on;
    }
    fn snapshot(&mut self) {
        self.snapshots += 1;
    }
    fn stacktrace(&mut self, cpu: u32) {
        self.stacks.push(cpu);
    }
    fn event_enabled(&self, system: &str, event: &str) -> bool {
        self.enabled.iter().any(|(s, e)| s == system && e == event)
    }
    fn set_event_enabled(&mut self, system: &str, event: &str, enabled: bool) {
        self.enabled.retain(|(s, e)| !(s == system && e == event));
        if enabled {
            self.enabled.push((system.into(), event.into()));
        }
    }
}

fn fields() -> Vec<FieldSpec> {
    let mut f = common_fields().to_vec();
    f.push(FieldSpec::signed("pid", 8, 4));
    f.push(FieldSpec::unsigned("bytes", 12, 4));
    f.push(FieldSpec::fixed_string("comm", 16, 8));
    f
}

fn payload(pid: i32, bytes: u32, comm: &str) -> Vec<u8> {
    let mut p = vec![0u8; 24];
    p[8..12].copy_from_slice(&pid.to_ne_bytes());
    p[12..16].copy_from_slice(&bytes.to_ne_bytes());
    p[16..16 + comm.len()].copy_from_slice(comm.as_bytes());
    p
}

fn exists(system: &str, event: &str) -> bool {
    system == "sched" && event == "sched_switch"
}

#[test]
fn counted_traceoff_spends_counts_only_when_effective() {
    let mut set = TriggerSet::default();
    set.write("traceoff:2", &fields(), &exists).unwrap();
    let mut tracer = Recorder {
        on: true,
        ..Default::default()
    };
    let p = payload(1, 0, "a");
    set.fire(&p, 0, &mut tracer);
    assert!(!tracer.on);
    // Already off: no count spent.
    set.fire(&p, 0, &mut tracer);
    assert_eq!(set.to_string(), "traceoff:count=1\n");
    tracer.on = true;
    set.fire(&p, 0, &mut tracer);
    assert!(!tracer.on);
    tracer.on = true;
    set.fire(&p, 0, &mut tracer);
    assert!(tracer.on, "count exhausted");
    assert_eq!(set.to_string(), "traceoff:count=0\n");
}

#[test]
fn filters_enable_event_snapshot_stacktrace() {
    let mut set = TriggerSet::default();
    let f = fields();
    set.write("enable_event:sched:sched_switch if pid > 10", &f, &exists)
        .unwrap();
    set.write("snapshot:1", &f, &exists).unwrap();
    set.write("stacktrace if comm ~ \"k*\"", &f, &exists)
        .unwrap();
    let mut tracer = Recorder::default();
    set.fire(&payload(3, 0, "user"), 2, &mut tracer);
    assert!(tracer.enabled.is_empty());
    assert_eq!(tracer.snapshots, 1);
    assert!(tracer.stacks.is_empty());
    set.fire(&payload(11, 0, "kworker"), 3, &mut tracer);
    assert_eq!(
        tracer.enabled,
        vec![("sched".to_string(), "sched_switch".to_string())]
    );
    assert_eq!(tracer.snapshots, 1);
    assert_eq!(tracer.stacks, vec![3]);
    assert!(set.targets("sched", "sched_switch"));
    assert_eq!(
        set.to_string(),
        "enable_event:sched:sched_switch:unlimited if pid > 10\nsnapshot:count=0\nstacktrace:unlimited if comm ~ \"k*\"\n"
    );
}

#[test]
fn duplicates_removal_and_errors_leave_the_set_unchanged() {
    let f = fields();
    let mut set = TriggerSet::default();
    set.write("traceon", &f, &exists).unwrap();
    let before = set.to_string();
    let bad: &[(&str, TriggerError)] = &[
        ("", TriggerError::Empty),
        ("traceon", TriggerError::Exists),
        ("!traceoff", TriggerError::NotFound),
        ("tracenever", TriggerError::UnknownCommand { position: 0 }),
        ("traceoff:x", TriggerError::InvalidArgument { position: 9 }),
        (
            "traceoff:1:2",
            TriggerError::InvalidArgument { position: 11 },
        ),
        (
            "enable_event:sched",
            TriggerError::InvalidArgument { position: 18 },
        ),
        (
            "enable_event:sched:nope",
            TriggerError::NoSuchEvent { position: 13 },
        ),
        (
            "traceoff iff pid == 1",
            TriggerError::InvalidArgument { position: 9 },
        ),
    ];
    for (text, expected) in bad {
        assert_eq!(
            &set.write(text, &f, &exists).unwrap_err(),
            expected,
            "{text:?}"
        );
        assert_eq!(set.to_string(), before);
    }
    let error = set.write("traceoff if pidd == 1", &f, &exists).unwrap_err();
    assert_eq!(error.position(), Some(12));
    assert_eq!(set.to_string(), before);
    set.write("!traceon", &f, &exists).unwrap();
    assert!(set.is_empty());
    assert!(set.to_string().starts_with("# Available triggers:"));
}

#[test]
fn hist_aggregates_sorts_and_prints_like_ftrace() {
    let f = fields();
    let mut set = TriggerSet::default();
    set.write(
        "hist:keys=pid:vals=bytes:sort=bytes.descending if pid != 0",
        &f,
        &exists,
    )
    .unwrap();
    let mut tracer = Recorder::default();
    for (pid, bytes) in [(1, 10), (2, 100), (1, 5), (0, 1000), (3, 1)] {
        set.fire(&payload(pid, bytes, "x"), 0, &mut tracer);
    }
    let table = set.hist_table().unwrap();
    assert_eq!((table.hits(), table.len(), table.dropped()), (4, 3, 0));
    let text = set.hist_text();
    let expected = "# event histogram\n#\n\
# trigger info: hist:keys=pid:vals=hitcount,bytes:sort=bytes.descending:size=2048 if pid != 0 [active]\n#\n\n\
{ pid:          2 } hitcount:          1  bytes:        100\n\
{ pid:          1 } hitcount:          2  bytes:         15\n\
{ pid:          3 } hitcount:          1  bytes:          1\n\
\nTotals:\n    Hits: 4\n    Entries: 3\n    Dropped: 0\n";
    assert_eq!(text, expected);
}

#[test]
fn hist_errors_and_limits() {
    let f = fields();
    let mut set = TriggerSet::default();
    for bad in [
        "hist",
        "hist:vals=bytes",
        "hist:keys=nope",
        "hist:keys=pid:vals=comm",
        "hist:keys=pid:sort=nope",
        "hist:keys=pid:size=0",
        "hist:keys=pid,bytes,comm,common_pid",
        "hist:keys=comm.hex",
        "hist:keys=pid:bogus",
    ] {
        assert!(
            matches!(set.write(bad, &f, &exists), Err(TriggerError::Hist { .. })),
            "{bad}"
        );
        assert!(set.is_empty());
    }
    set.write("hist:keys=pid:size=1", &f, &exists).unwrap();
    let mut tracer = Recorder::default();
    for pid in 0..200 {
        set.fire(&payload(pid, 0, "x"), 0, &mut tracer);
    }
    let table = set.hist_table().unwrap();
    assert_eq!(table.len(), 128, "size rounds up to the minimum of 128");
    assert_eq!(table.dropped(), 72);
}

#[test]
fn hist_pause_continue_and_clear_act_on_the_existing_histogram() {
    let f = fields();
    let mut set = TriggerSet::default();
    let mut tracer = Recorder::default();
    set.write("hist:keys=pid", &f, &exists).unwrap();
    set.fire(&payload(1, 0, "x"), 0, &mut tracer);
    set.write("hist:keys=pid:pause", &f, &exists).unwrap();
    assert_eq!(set.len(), 1, "no second histogram");
    assert!(set.to_string().ends_with(" [paused]\n"));
    set.fire(&payload(2, 0, "x"), 0, &mut tracer);
    assert_eq!(set.hist_table().unwrap().hits(), 1);
    set.write("hist:keys=pid:cont", &f, &exists).unwrap();
    set.fire(&payload(2, 0, "x"), 0, &mut tracer);
    assert_eq!(set.hist_table().unwrap().len(), 2);
    set.write("hist:keys=pid:clear", &f, &exists).unwrap();
    assert!(set.hist_table().unwrap().is_empty());
    assert_eq!(
        set.write("hist:keys=pid", &f, &exists),
        Err(TriggerError::Exists)
    );
    // A different layout is a second histogram; created paused here.
    set.write("hist:keys=comm:pause", &f, &exists).unwrap();
    assert_eq!(set.len(), 2);
    assert!(set
        .hist_text()
        .contains("hist:keys=comm:vals=hitcount:sort=hitcount:size=2048 [paused]"));
}

#[test]
fn hist_sym_and_execname_keys_are_named_when_printed() {
    struct Names;
    impl hist::HistNames for Names {
        fn symbol(&self, address: u64) -> Option<String> {
            (address == 0x1000).then(|| String::from("do_work"))
        }
        fn comm(&self, pid: i64) -> Option<String> {
            (pid == 7).then(|| String::from("worker"))
        }
    }
    let f = fields();
    let mut set = TriggerSet::default();
    set.write("hist:keys=common_pid.execname,bytes.sym", &f, &exists)
        .unwrap();
    let mut tracer = Recorder::default();
    let mut p = payload(0, 0x1000, "x");
    p[4..8].copy_from_slice(&7i32.to_ne_bytes());
    set.fire(&p, 0, &mut tracer);
    let text = set.hist_text_with(&Names);
    let expected_key = alloc::format!(
        "{{ common_pid: {:<16}[{:>10}], bytes: [1000] {:<45} }} hitcount:          1\n",
        "worker",
        7,
        "do_work"
    );
    assert!(text.contains(&expected_key), "{text}");
    assert!(text.contains("hist:keys=common_pid.execname,bytes.sym:vals=hitcount"));
    // Without names the numbers still print.
    assert!(set
        .hist_text()
        .contains("common_pid: <...>           [         7]"));
}

#[test]
fn parse_trigger_reads_count_and_filter() {
    let fields = [FieldSpec::signed("prev_pid", 24, 4)];
    let line = parse_trigger("traceoff:3 if prev_pid == 1", &fields, &|_, _| true).unwrap();
    assert_eq!(line.spec.command, TriggerCommand::TraceOff);
    assert_eq!(line.spec.count, Some(3));
    assert!(line.spec.filter.is_some());
    assert!(!line.remove);
    let line = parse_trigger("!traceoff", &fields, &|_, _| true).unwrap();
    assert!(line.remove);
}
