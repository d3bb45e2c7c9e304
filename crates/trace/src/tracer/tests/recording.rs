//! Tracer tests of events, hooks, printk, markers and the buffers.

use super::*;

crate::define_event! {
    /// An event for tracer tests.
    pub tracer_test_event in tracertest {
        a: u32,
        b: u64,
        c: i16,
    }
    print "a=%u b=%llu c=%d", a, b, c
}

#[test]
fn events_record_only_when_enabled_and_by_pid() {
    let tracer = installed();
    let id = tracer_test_event::EVENT.id();
    assert_eq!(tracer.event_id("tracertest", "tracer_test_event"), Some(id));
    tracer_test_event::trace(1, 2, 3);
    tracer.set_event_enabled(id, true).unwrap();
    assert!(tracer.event_enabled(id));
    tracer_test_event::trace(4, 5, -6);
    tracer.event_pids().add(&[1]).unwrap();
    tracer_test_event::trace(7, 8, 9);
    tracer.event_pids().clear();
    tracer.set_tracing_on(false);
    tracer_test_event::trace(10, 11, 12);
    tracer.set_tracing_on(true);
    tracer.set_event_enabled(id, false).unwrap();
    tracer_test_event::trace(13, 14, 15);
    let records: Vec<Record> = mine(tracer.drain_records())
        .into_iter()
        .filter(|r| r.event_id == id)
        .collect();
    assert_eq!(records.len(), 1);
    assert_eq!(
        (
            records[0].unsigned(8, 4),
            records[0].unsigned(16, 8),
            records[0].signed(24, 2)
        ),
        (4, 5, -6)
    );
    assert_eq!(
        tracer.set_event_enabled(9, true),
        Err(TraceError::NoSuchEvent(9))
    );
    assert_eq!(
        tracer.set_event_enabled(PRINT_ID, true),
        Err(TraceError::NoSuchEvent(PRINT_ID))
    );
    tracer.uninstall();
}

crate::define_event! {
    /// Enabled in two tracer instances at once.
    pub shared_test_event in tracertest {
        n: u32,
    }
    print "n=%u", n
}

#[test]
fn an_event_wanted_by_two_tracers_is_recorded_in_both() {
    // One instance takes the straight path of `Event::emit_sized`, two the
    // loop over instances; each must record exactly what it enabled.
    let first = installed();
    let second = installed();
    let id = shared_test_event::EVENT.id();
    let values = |tracer: &Tracer| -> Vec<u64> {
        mine(tracer.drain_records())
            .into_iter()
            .filter(|r| r.event_id == id)
            .map(|r| r.unsigned(8, 4))
            .collect()
    };
    first.set_event_enabled(id, true).unwrap();
    shared_test_event::trace(1);
    second.set_event_enabled(id, true).unwrap();
    shared_test_event::trace(2);
    first.set_event_enabled(id, false).unwrap();
    shared_test_event::trace(3);
    second.set_event_enabled(id, false).unwrap();
    shared_test_event::trace(4);
    assert_eq!(values(first), vec![1, 2]);
    assert_eq!(values(second), vec![2, 3]);
    first.uninstall();
    second.uninstall();
}

struct OnlyOdd(std::sync::Arc<std::sync::atomic::AtomicUsize>);

impl EventHook for OnlyOdd {
    fn before(&self, _tracer: &Tracer, _cpu: usize, payload: &[u8], _enabled: bool) -> bool {
        self.0.fetch_add(1, Ordering::Relaxed);
        payload[8] % 2 == 1
    }
}

#[test]
fn hooks_see_every_hit_and_decide_what_is_recorded() {
    let tracer = installed();
    let id = tracer_test_event::EVENT.id();
    let hits = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    tracer
        .set_event_hook(id, Some(Box::new(OnlyOdd(hits.clone()))))
        .unwrap();
    // Soft-disabled: the hook runs, nothing is recorded.
    tracer_test_event::trace(1, 0, 0);
    tracer.set_event_enabled(id, true).unwrap();
    for a in 2..6 {
        tracer_test_event::trace(a, 0, 0);
    }
    tracer.set_event_hook(id, None).unwrap();
    tracer_test_event::trace(6, 0, 0);
    let values: Vec<u64> = mine(tracer.drain_records())
        .iter()
        .filter(|r| r.event_id == id)
        .map(|r| r.unsigned(8, 4))
        .collect();
    assert_eq!(values, vec![3, 5, 6]);
    assert!(hits.load(Ordering::Relaxed) >= 5);
    tracer.set_event_enabled(id, false).unwrap();
    tracer.uninstall();
}

#[test]
fn printk_formats_at_read_time() {
    let tracer = installed();
    let name = String::from("disk0");
    crate::trace_printk!("{}: {} blocks, {:x} {}", name, 12u32, 255u8, true);
    let records: Vec<Record> = mine(tracer.drain_records())
        .into_iter()
        .filter(|r| r.event_id == BPRINT_ID)
        .collect();
    assert_eq!(records.len(), 1);
    let text = crate::printk::format_bprint(&records[0].payload).unwrap();
    assert_eq!(text, "disk0: 12 blocks, ff true");
    let address = records[0].unsigned(16, 8);
    let formats = crate::printk::formats();
    let c = formats.iter().find(|(a, _)| *a == address).unwrap();
    assert_eq!(c.1, "%s: %llu blocks, %llx %s");
    tracer.uninstall();
}

#[test]
fn markers_add_a_newline_and_are_cut_to_fit() {
    let tracer = Tracer::with_threads(TraceConfig::small(), 1).unwrap();
    tracer.write_marker("already\n").unwrap();
    let long = "x".repeat(10_000);
    let taken = tracer.write_marker(&long).unwrap();
    assert!(taken < 4096);
    let records = tracer.drain_records();
    assert_eq!(records[0].string(16), "already\n");
    assert_eq!(records[1].string(16).len(), taken + 1);
    assert_eq!(name_at(records[0].unsigned(8, 8)), "tracing_mark_write");
}

#[test]
fn resize_keeps_unread_events_and_accounting() {
    let tracer = Tracer::with_threads(TraceConfig::small(), 1).unwrap();
    for i in 0..100 {
        tracer.write_marker(&alloc::format!("before {i}")).unwrap();
    }
    assert_eq!(
        tracer.set_buffer_size_kb(0),
        Err(TraceError::BadBufferSize(0))
    );
    // Reported like ftrace: whole pages of 4080 data bytes, in KiB.
    assert_eq!(tracer.buffer_size_kb(), 17 * 4080 / 1024);
    tracer.set_buffer_size_kb(16).unwrap();
    assert_eq!(tracer.buffer_size_kb(), 5 * 4080 / 1024);
    for i in 0..10 {
        tracer.write_marker(&alloc::format!("after {i}")).unwrap();
    }
    let texts = marker_texts(&tracer.drain_records());
    assert_eq!(texts.len(), 110);
    assert_eq!(texts[0], "before 0\n");
    assert_eq!(texts[109], "after 9\n");
    let stats = tracer.stats(0).unwrap();
    assert_eq!((stats.written, stats.read, stats.lost()), (110, 110, 0));
    tracer.set_mode(Mode::ProducerConsumer).unwrap();
    assert_eq!(tracer.mode(), Mode::ProducerConsumer);
}

/// The text of each `trace_marker` record.
fn marker_texts(records: &[Record]) -> Vec<String> {
    records.iter().map(|r| r.string(16).into()).collect()
}

#[test]
fn snapshot_swaps_live_and_spare() {
    let tracer = Tracer::with_threads(TraceConfig::small(), 1).unwrap();
    assert_eq!(tracer.snapshot_clear(), Err(TraceError::NoSnapshot));
    tracer.write_marker("one").unwrap();
    tracer.snapshot_swap().unwrap();
    tracer.write_marker("two").unwrap();
    let snap = marker_texts(&tracer.snapshot_records().unwrap());
    assert_eq!(snap, vec!["one\n"]);
    let live = marker_texts(&tracer.peek_records());
    assert_eq!(live, vec!["two\n"]);
    tracer.snapshot_swap().unwrap();
    let snap = marker_texts(&tracer.snapshot_records().unwrap());
    assert_eq!(snap, vec!["two\n"]);
    // The old spare was cleared before becoming live.
    assert!(tracer.peek_records().is_empty());
    tracer.snapshot_clear().unwrap();
    assert!(tracer.snapshot_records().unwrap().is_empty());
    tracer.snapshot_free();
    assert!(!tracer.snapshot_allocated());
    assert_eq!(tracer.snapshot_records(), Err(TraceError::NoSnapshot));
}

#[test]
fn manual_clock_gives_exact_timestamps_and_clear_empties() {
    let clock = Arc::new(ManualClock::new(1_000));
    let tracer = Tracer::new(TraceConfig::small(), clock.clone(), ThreadCpus::new(1)).unwrap();
    tracer.write_marker("a").unwrap();
    clock.advance(5_000_000_000);
    tracer.write_marker("b").unwrap();
    let times: Vec<u64> = tracer
        .peek_records()
        .iter()
        .map(|r| r.timestamp_ns)
        .collect();
    assert_eq!(times, vec![1_000, 5_000_001_000]);
    tracer.clear();
    assert!(tracer.drain_records().is_empty());
    assert_eq!(
        tracer.stats(7),
        Err(TraceError::Ring(RingError::NoSuchCpu(7)))
    );
}

#[test]
fn threads_beyond_the_cpu_count_are_not_traced() {
    let tracer = Tracer::with_threads(TraceConfig::small(), 1).unwrap();
    let tracer = &tracer;
    std::thread::scope(|s| {
        let (hold, release) = std::sync::mpsc::channel::<()>();
        let (ready, wait) = std::sync::mpsc::channel::<()>();
        s.spawn(move || {
            tracer.write_marker("owner").unwrap();
            ready.send(()).unwrap();
            release.recv().unwrap();
        });
        wait.recv().unwrap();
        s.spawn(|| tracer.write_marker("ignored").unwrap())
            .join()
            .unwrap();
        hold.send(()).unwrap();
    });
    let texts = marker_texts(&tracer.drain_records());
    assert_eq!(texts, vec!["owner\n"]);
}

#[test]
fn event_pid_filter_follows_children_with_event_fork() {
    let tracer = installed();
    let id = tracer_test_event::EVENT.id();
    tracer.set_event_enabled(id, true).unwrap();
    tracer.event_pids().add(&[i64::from(me())]).unwrap();
    tracer.set_option(TraceOption::EventFork, true);
    assert!(tracer.option(TraceOption::EventFork));
    let child = forked_child(tracer, || {
        tracer_test_event::trace(1, 0, 0);
    });
    tracer.set_option(TraceOption::EventFork, false);
    let stranger = forked_child(tracer, || {
        tracer_test_event::trace(2, 0, 0);
    });
    tracer.set_event_enabled(id, false).unwrap();
    let pids: Vec<i32> = tracer
        .drain_records()
        .iter()
        .filter(|r| r.event_id == id)
        .map(|r| r.pid)
        .collect();
    assert_eq!(pids, vec![child]);
    assert!(tracer.event_pids().contains(child) && !tracer.event_pids().contains(stranger));
    tracer.uninstall();
}

#[test]
fn common_header_word_decodes_field_by_field() {
    let header = common_header(0xbeef, format::FLAG_HARDIRQ, -77);
    let record = Record::from_payload(0, 0, &header);
    assert_eq!(record.event_id, 0xbeef);
    assert_eq!(record.flags, format::FLAG_HARDIRQ);
    assert_eq!(record.preempt_count, 0);
    assert_eq!(record.pid, -77);
}
