//! Direct calls for events (as Linux's tracepoints call a lone probe): an event with one
//! consumer (one tracer recording it, or one tracer's triggers alone)
//! calls it directly, as Linux's tracepoints use a static call for a
//! single probe; several consumers go through the list. Both must record
//! the same; switching between them while threads fire the event must
//! neither lose nor double a record, and a call that starts after a
//! disable returned must not reach the disabled consumer. Its own test
//! binary: it installs tracers, and its tests take turns.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use hotkern_trace::control::Control;
use hotkern_trace::internals::dispatch::{event_handler, set_list_only};
use hotkern_trace::platform::{MonotonicClock, ThreadCpus};
use hotkern_trace::{Record, TraceConfig, Tracer};

hotkern_trace::define_event! {
    /// The tests' event: who fired it, which call, and the generation the
    /// caller read just before.
    pub direct_sample in directsys {
        generation: u64,
        worker: u64,
        call: u64,
    }
    print "generation=%llu worker=%llu call=%llu", generation, worker, call
}

static TURNS: Mutex<()> = Mutex::new(());

/// Threads firing the event in the contention tests.
const WORKERS: usize = 3;

const TRIGGER: &str = "events/directsys/direct_sample/trigger";
const HIST: &str = "events/directsys/direct_sample/hist";

/// One CPU model for every tracer; a slot for the test thread besides the
/// workers.
fn cpus() -> &'static ThreadCpus {
    static CPUS: OnceLock<&'static ThreadCpus> = OnceLock::new();
    CPUS.get_or_init(|| ThreadCpus::new(WORKERS + 1))
}

fn installed(kb: usize) -> &'static Tracer {
    let config = TraceConfig {
        buffer_kb: kb,
        ..TraceConfig::small()
    };
    Tracer::new(config, Arc::new(MonotonicClock::new()), cpus())
        .and_then(Tracer::install)
        .unwrap()
}

fn enable(tracer: &Tracer, on: bool) {
    tracer
        .set_event_enabled(direct_sample::EVENT.id(), on)
        .unwrap();
}

fn handler() -> Option<&'static str> {
    event_handler("directsys", "direct_sample")
}

/// (generation, worker, call) of each record of the test event.
fn fields(records: &[Record]) -> Vec<(u64, u64, u64)> {
    let id = direct_sample::EVENT.id();
    records
        .iter()
        .filter(|r| r.event_id == id)
        .map(|r| (r.unsigned(8, 8), r.unsigned(16, 8), r.unsigned(24, 8)))
        .collect()
}

#[test]
fn one_consumer_is_called_directly_and_several_go_through_the_list() {
    let _turn = TURNS.lock().unwrap_or_else(|e| e.into_inner());
    let first = installed(64);
    let control = Control::new(first);
    assert_eq!(handler(), None, "nobody wants it");
    enable(first, true);
    assert_eq!(handler(), Some("record"));
    control.write(TRIGGER, "hist:keys=worker").unwrap();
    assert_eq!(handler(), None, "enabled and a trigger: two consumers");
    enable(first, false);
    assert_eq!(handler(), Some("hook"), "the trigger alone");
    control.write(TRIGGER, "!hist:keys=worker").unwrap();
    assert_eq!(handler(), None, "nobody wants it again");
    enable(first, true);
    let second = installed(64);
    assert_eq!(handler(), Some("record"), "the second does not want it");
    enable(second, true);
    assert_eq!(handler(), None, "two tracers");
    second.uninstall();
    assert_eq!(handler(), Some("record"), "the first alone again");
    set_list_only(true);
    assert_eq!(handler(), None, "forced through the list");
    set_list_only(false);
    assert_eq!(handler(), Some("record"));
    first.uninstall();
    assert_eq!(handler(), None);
}

/// Fires the event 50 times with `tracer` set up by `setup`, alone,
/// beside a second tracer recording it, or forced through the list; what
/// it recorded, and its hist file.
fn recorded(setup: fn(&Control), shared: bool, list_only: bool) -> (Vec<(u64, u64, u64)>, String) {
    set_list_only(list_only);
    let tracer = installed(64);
    let control = Control::new(tracer);
    setup(&control);
    let other = shared.then(|| {
        let other = installed(64);
        enable(other, true);
        other
    });
    let expected = match (shared, list_only) {
        (false, false) => handler().is_some(),
        _ => false,
    };
    assert_eq!(handler().is_some(), expected);
    for call in 0..50 {
        direct_sample::trace(7, 1, call);
    }
    let records = fields(&tracer.drain_records());
    let hist = control.read(HIST).unwrap();
    if let Some(other) = other {
        assert_eq!(
            fields(&other.drain_records()).len(),
            50,
            "the second saw every call"
        );
        other.uninstall();
    }
    tracer.uninstall();
    set_list_only(false);
    (records, hist)
}

/// A configuration of the event's consumers: its name, how a tracer's
/// control sets it up, and the direct handler it gives.
type Setup = (&'static str, fn(&Control), Option<&'static str>);

#[test]
fn direct_shared_and_list_events_record_the_same() {
    let _turn = TURNS.lock().unwrap_or_else(|e| e.into_inner());
    let setups: [Setup; 3] = [
        (
            "enabled",
            |control| {
                control
                    .write("events/directsys/direct_sample/enable", "1")
                    .unwrap()
            },
            Some("record"),
        ),
        (
            "a trigger alone",
            |control| control.write(TRIGGER, "hist:keys=call").unwrap(),
            Some("hook"),
        ),
        (
            "enabled with a filter",
            |control| {
                control
                    .write("events/directsys/direct_sample/filter", "call < 20")
                    .unwrap();
                control
                    .write("events/directsys/direct_sample/enable", "1")
                    .unwrap();
            },
            None,
        ),
    ];
    for (name, setup, direct_handler) in setups {
        set_list_only(false);
        let tracer = installed(64);
        setup(&Control::new(tracer));
        assert_eq!(handler(), direct_handler, "{name}");
        tracer.uninstall();
        let direct = recorded(setup, false, false);
        match name {
            "enabled" => assert_eq!(direct.0.len(), 50),
            "a trigger alone" => {
                assert!(direct.0.is_empty());
                assert!(direct.1.contains("Hits: 50"), "{name}: {}", direct.1);
            }
            _ => assert_eq!(direct.0.len(), 20),
        }
        assert_eq!(recorded(setup, true, false), direct, "{name} shared");
        assert_eq!(
            recorded(setup, false, true),
            direct,
            "{name} through the list"
        );
    }
}

/// Workers fire the event with the generation they read just before, each
/// call numbered, until `stop` is set or they made `limit` calls.
fn start_workers(
    generation: &Arc<AtomicU64>,
    stop: &Arc<AtomicBool>,
    limit: u64,
) -> Vec<std::thread::JoinHandle<u64>> {
    (0..WORKERS as u64)
        .map(|worker| {
            let generation = Arc::clone(generation);
            let stop = Arc::clone(stop);
            std::thread::spawn(move || {
                let mut call = 0;
                while !stop.load(Ordering::Relaxed) && call < limit {
                    direct_sample::trace(generation.load(Ordering::Acquire), worker, call);
                    call += 1;
                }
                call
            })
        })
        .collect()
}

#[test]
fn switching_under_contention_loses_no_record_and_writes_none_twice() {
    let _turn = TURNS.lock().unwrap_or_else(|e| e.into_inner());
    let generation = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    // Big enough that nothing is overwritten.
    let first = installed(8192);
    let control = Control::new(first);
    enable(first, true);
    // At most 50 000 records of 40 bytes per CPU: nothing is overwritten.
    let workers = start_workers(&generation, &stop, 50_000);
    for round in 0..20 {
        // Direct, then shared with a second tracer, then (every other
        // round) enabled with a trigger: the list each time.
        let second = installed(64);
        enable(second, true);
        std::thread::yield_now();
        second.uninstall();
        if round % 2 == 0 {
            control.write(TRIGGER, "hist:keys=worker").unwrap();
            std::thread::yield_now();
            control.write(TRIGGER, "!hist:keys=worker").unwrap();
        }
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
    stop.store(true, Ordering::Relaxed);
    let calls: Vec<u64> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    enable(first, false);
    assert_eq!((0..first.cpus()).map(|cpu| first.lost(cpu)).sum::<u64>(), 0);
    let mut seen: Vec<(u64, u64)> = fields(&first.drain_records())
        .into_iter()
        .map(|(_, worker, call)| (worker, call))
        .collect();
    seen.sort_unstable();
    let expected: Vec<(u64, u64)> = (0..WORKERS as u64)
        .flat_map(|worker| (0..calls[worker as usize]).map(move |call| (worker, call)))
        .collect();
    assert!(expected.len() > 100, "the workers ran");
    let doubled = seen.windows(2).filter(|pair| pair[0] == pair[1]).count();
    assert_eq!(doubled, 0, "records written twice");
    assert_eq!(seen.len(), expected.len(), "records lost");
    assert!(seen == expected, "records lost or doubled");
    first.uninstall();
}

#[test]
fn a_call_starting_after_disable_returned_does_not_record() {
    let _turn = TURNS.lock().unwrap_or_else(|e| e.into_inner());
    let generation = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let workers = start_workers(&generation, &stop, u64::MAX);
    let (mut rounds, mut choices) = (Vec::new(), Vec::new());
    for round in 0..24 {
        // Alone (direct), or beside a companion recording it too (list).
        let tracer = installed(64);
        let companion = (round % 2 == 1).then(|| {
            let companion = installed(64);
            enable(companion, true);
            companion
        });
        enable(tracer, true);
        // Checked after the records, which show a stale choice better.
        choices.push((round, handler(), companion.is_none()));
        std::thread::sleep(std::time::Duration::from_micros(100));
        enable(tracer, false);
        // A worker that reads this generation started after the disable.
        let disabled_at = generation.fetch_add(1, Ordering::AcqRel) + 1;
        // Time for the workers to read it and fire.
        std::thread::sleep(std::time::Duration::from_millis(1));
        if let Some(companion) = companion {
            companion.uninstall();
        }
        rounds.push((tracer, disabled_at));
    }
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.join().unwrap();
    }
    let mut recorded = 0;
    for (tracer, disabled_at) in rounds {
        let records = fields(&tracer.drain_records());
        recorded += records.len();
        let late: Vec<_> = records.iter().filter(|r| r.0 >= disabled_at).collect();
        assert!(
            late.is_empty(),
            "{} records after the disable returned, the first {:?}",
            late.len(),
            late.first()
        );
        tracer.uninstall();
    }
    assert!(recorded > 0, "the tracers recorded while enabled");
    for (round, handler, alone) in choices {
        assert_eq!(handler.is_some(), alone, "round {round}: {handler:?}");
    }
}
