//! A live tracer, driven through the control files, saved as trace.dat and
//! read back: our page decoder agrees with the recorder's, event for event,
//! and (when trace-cmd is installed) so does the real `trace-cmd report`.

mod common;

use hotkern_trace::control::{view, Control};
use hotkern_trace::{Record, TraceConfig, Tracer};

hotkern_trace::define_event! {
    /// A unit of work.
    pub rt_work in roundtrip {
        item: u32,
        cost: u64,
        tag: [u8; 8],
    }
    print "item=%u cost=%llu tag=%s", item, cost, tag
}

mod funcs {
    #[hotkern_trace::function]
    pub fn rt_outer(n: u64) -> u64 {
        rt_inner(n) + rt_inner(n + 1)
    }

    #[hotkern_trace::function]
    pub fn rt_inner(n: u64) -> u64 {
        super::rt_work::trace(n as u32, n * 3, *b"inner\0\0\0");
        std::hint::black_box(n * 2)
    }
}

#[test]
fn live_trace_survives_trace_dat_event_for_event() {
    hotkern_trace::event::register(&rt_work::EVENT);
    let tracer = Tracer::with_threads(TraceConfig::small(), 3)
        .and_then(Tracer::install)
        .unwrap();
    let control = Control::new(tracer);
    control.write("current_tracer", "function_graph").unwrap();
    control
        .write("set_ftrace_filter", "rt_*:mod:live_roundtrip::funcs")
        .unwrap();
    control.write("set_event", "roundtrip:rt_work").unwrap();
    control
        .write("events/roundtrip/rt_work/filter", "item != 7")
        .unwrap();
    std::thread::scope(|scope| {
        for t in 0..2u64 {
            scope.spawn(move || {
                for n in 0..40 {
                    funcs::rt_outer(t * 100 + n);
                }
            });
        }
    });
    control.write("tracing_on", "0").unwrap();
    let pages = view::drain_pages(tracer);
    tracer.uninstall();

    // The recorder's own decoding of the same pages.
    let mut theirs: Vec<Record> = Vec::new();
    for (cpu, bytes) in pages.iter().enumerate() {
        for page in bytes.chunks(hotkern_trace::ring::PAGE_SIZE) {
            let page: &[u8; hotkern_trace::ring::PAGE_SIZE] = page.try_into().unwrap();
            theirs.extend(hotkern_trace::internals::records_from_page(cpu, page));
        }
    }
    hotkern_trace::internals::merge_records(&mut theirs);

    let file = view::trace_dat(tracer, pages);
    let bytes = common::write_v6(&file);
    let (ours, lost) = common::read_back(&bytes);
    assert_eq!(lost, 0, "nothing was lost");
    let ours: Vec<(usize, u64, Vec<u8>)> = ours
        .into_iter()
        .map(|(cpu, time, data)| (cpu as usize, time, data))
        .collect();
    assert_eq!(ours.len(), theirs.len());
    // 2 threads × 40 × (outer + 2 inner) entry/exit pairs, plus the events
    // that passed the filter (item 7 comes up twice, both in thread 0).
    let work = ours
        .iter()
        .filter(|(_, _, p)| u16::from_le_bytes([p[0], p[1]]) == rt_work::EVENT.id())
        .count();
    assert_eq!(ours.len(), 2 * 40 * 3 * 2 + work);
    assert_eq!(work, 2 * 40 * 2 - 2);
    // Both decoders return an event's data as the ring stores it, 4-byte
    // padding included, so the payloads must agree whole: no normalising.
    for (a, b) in ours.iter().zip(&theirs) {
        assert_eq!((a.0, a.1), (b.cpu, b.timestamp_ns));
        assert_eq!(a.2, b.payload, "len {} vs {}", a.2.len(), b.payload.len());
    }
    // And they are what was traced: 8 bytes of common header, `item` at 8,
    // 4 bytes of alignment, `cost` at 16, `tag` at 24 (laid out by hand as C
    // would), each `cost` three times its `item`.
    for (_, _, p) in ours
        .iter()
        .filter(|(_, _, p)| u16::from_le_bytes([p[0], p[1]]) == rt_work::EVENT.id())
    {
        assert_eq!(p.len(), 32, "{p:?}");
        let item = u32::from_ne_bytes(p[8..12].try_into().unwrap());
        let cost = u64::from_ne_bytes(p[16..24].try_into().unwrap());
        assert_ne!(item, 7, "the filter lets no item 7 through");
        assert_eq!(cost, u64::from(item) * 3);
        assert_eq!(&p[24..32], b"inner\0\0\0");
    }

    let report = common::report(&bytes);
    assert!(
        report.contains("rt_work:              item=8 cost=24 tag=inner\n"),
        "{report}"
    );
    if let Some(theirs) = common::trace_cmd_report(&bytes, "live") {
        assert_eq!(theirs, report);
    }
}

/// Pages that lost events carry the count; trace.dat keeps it and both
/// reports print it the same way.
#[test]
fn lost_events_survive_trace_dat() {
    let tracer = Tracer::with_threads(
        TraceConfig {
            buffer_kb: 8,
            ..TraceConfig::small()
        },
        1,
    )
    .unwrap();
    let control = Control::new(&tracer);
    for i in 0..2000 {
        control
            .write("trace_marker", &format!("message {i}"))
            .unwrap();
    }
    let lost = tracer.lost(0);
    let pages = view::drain_pages(&tracer);
    let bytes = common::write_v6(&view::trace_dat(&tracer, pages));
    let (events, dropped) = common::read_back(&bytes);
    assert_eq!(dropped, lost);
    assert_eq!(events.len() as u64 + dropped, 2000);
    let report = common::report(&bytes);
    assert!(
        report.contains(&format!("CPU:0 [{lost} EVENTS DROPPED]\n")),
        "{report}"
    );
    if let Some(theirs) = common::trace_cmd_report(&bytes, "lossy") {
        assert_eq!(theirs, report);
    }
}
