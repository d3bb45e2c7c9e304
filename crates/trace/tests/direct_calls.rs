//! Direct calls (ftrace 4.0's per-tracer trampolines): a function site one tracer
//! watches calls it directly, a shared one walks the list. Both must
//! record the same, and switching between them while threads run the
//! function must neither cut an entry/exit pair nor enter a tracer after
//! its uninstall returned. Its own test binary: it installs tracers, and
//! its tests take turns (they share the instance slots).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use hotkern_trace::control::Control;
use hotkern_trace::function::TracerKind;
use hotkern_trace::internals::dispatch::{direct_handler, is_direct, set_list_only};
use hotkern_trace::platform::{MonotonicClock, ThreadCpus};
use hotkern_trace::{Record, TraceConfig, Tracer};

static TURNS: Mutex<()> = Mutex::new(());

/// Threads calling the functions in the contention test.
const WORKERS: usize = 3;

#[hotkern_trace::function]
fn direct_outer(x: u64) -> u64 {
    let first = direct_inner(x);
    // Time inside the call, for switches to land in.
    for spin in 0..64 {
        std::hint::black_box(spin);
    }
    first + direct_inner(x + 1)
}

#[hotkern_trace::function]
fn direct_inner(x: u64) -> u64 {
    std::hint::black_box(x * 3)
}

const BOTH: &str = "direct_outer direct_inner";

/// What a tracer runs in a comparison.
#[derive(Debug, Clone, Copy)]
enum Mode {
    Function,
    Graph,
    Profile,
    FunctionProfiled,
    GraphProfiled,
}

impl Mode {
    const ALL: [Mode; 5] = [
        Mode::Function,
        Mode::Graph,
        Mode::Profile,
        Mode::FunctionProfiled,
        Mode::GraphProfiled,
    ];

    /// The direct handler a site watched by one tracer in this mode calls.
    fn handler(self) -> &'static str {
        match self {
            Mode::Function => "function",
            Mode::Graph => "function_graph",
            Mode::Profile => "profile",
            Mode::FunctionProfiled => "function+profile",
            Mode::GraphProfiled => "function_graph+profile",
        }
    }
}

/// One CPU model for every tracer, as a kernel has one set of CPUs: a
/// thread keeps its CPU whichever tracer asks.
fn cpus() -> &'static ThreadCpus {
    static CPUS: OnceLock<&'static ThreadCpus> = OnceLock::new();
    CPUS.get_or_init(|| ThreadCpus::new(WORKERS))
}

fn installed(kind: TracerKind, filter: &str, kb: usize) -> &'static Tracer {
    let config = TraceConfig {
        buffer_kb: kb,
        ..TraceConfig::small()
    };
    let tracer = Tracer::new(config, Arc::new(MonotonicClock::new()), cpus())
        .and_then(Tracer::install)
        .unwrap();
    tracer.set_ftrace_filter(filter, false).unwrap();
    tracer.set_current_tracer(kind).unwrap();
    tracer
}

fn start(tracer: &'static Tracer, mode: Mode) {
    let kind = match mode {
        Mode::Function | Mode::FunctionProfiled => TracerKind::Function,
        Mode::Graph | Mode::GraphProfiled => TracerKind::FunctionGraph,
        Mode::Profile => TracerKind::Nop,
    };
    tracer.set_current_tracer(kind).unwrap();
    if matches!(
        mode,
        Mode::Profile | Mode::FunctionProfiled | Mode::GraphProfiled
    ) {
        Control::new(tracer)
            .write("function_profile_enabled", "1")
            .unwrap();
    }
}

/// A record without its times: event id, then function and parent or depth.
type Shape = (u16, Vec<u8>);

/// The records without their times.
fn shapes(tracer: &Tracer, records: &[Record]) -> Vec<Shape> {
    let exit = tracer.event_id("ftrace", "funcgraph_exit");
    records
        .iter()
        .map(|r| {
            let end = if Some(r.event_id) == exit { 20 } else { 24 };
            (r.event_id, r.payload[8..end].to_vec())
        })
        .collect()
}

/// Function names and hit counts of the profiler's tables (the calling
/// thread's CPU is whichever slot was free).
fn profile(tracer: &Tracer) -> Vec<(String, u64)> {
    let control = Control::new(tracer);
    let tables: String = (0..WORKERS)
        .map(|cpu| control.read(&format!("trace_stat/function{cpu}")).unwrap())
        .collect();
    let mut rows: Vec<(String, u64)> = tables
        .lines()
        .filter_map(|line| {
            let mut columns = line.split_whitespace();
            let name = columns.next()?;
            let hits = columns.next()?.parse().ok()?;
            name.starts_with("direct_")
                .then(|| (name.to_string(), hits))
        })
        .collect();
    rows.sort();
    rows
}

/// Runs the calls with `tracer` alone, then what it recorded.
fn recorded(mode: Mode, shared: bool, list_only: bool) -> (Vec<Shape>, Vec<(String, u64)>) {
    set_list_only(list_only);
    let tracer = installed(TracerKind::Nop, BOTH, 64);
    let other = shared.then(|| installed(TracerKind::FunctionGraph, BOTH, 64));
    start(tracer, mode);
    let direct = is_direct("direct_outer");
    assert_eq!(
        direct,
        !shared && !list_only,
        "{mode:?} shared {shared} list {list_only}"
    );
    assert_eq!(
        direct_handler("direct_outer"),
        direct.then(|| mode.handler()),
        "{mode:?}: the handler of its mode"
    );
    for i in 0..50 {
        assert_eq!(direct_outer(i), 6 * i + 3);
    }
    tracer.set_current_tracer(TracerKind::Nop).unwrap();
    let records = tracer.drain_records();
    let shapes = shapes(tracer, &records);
    let profile = profile(tracer);
    assert_eq!(tracer.open_calls(), 0);
    if let Some(other) = other {
        assert_eq!(
            other.drain_records().len(),
            50 * 3 * 2,
            "the second tracer saw every pair"
        );
        other.uninstall();
    }
    tracer.uninstall();
    set_list_only(false);
    (shapes, profile)
}

#[test]
fn direct_shared_and_list_calls_record_the_same() {
    let _turn = TURNS.lock().unwrap_or_else(|e| e.into_inner());
    for mode in Mode::ALL {
        let direct = recorded(mode, false, false);
        let expected = match mode {
            Mode::Function | Mode::FunctionProfiled => 50 * 3,
            Mode::Graph | Mode::GraphProfiled => 50 * 3 * 2,
            Mode::Profile => 0,
        };
        assert_eq!(direct.0.len(), expected, "{mode:?}");
        if let Mode::Profile | Mode::FunctionProfiled | Mode::GraphProfiled = mode {
            assert_eq!(
                direct.1,
                [
                    ("direct_inner".to_string(), 100),
                    ("direct_outer".to_string(), 50)
                ]
            );
        }
        assert_eq!(recorded(mode, true, false), direct, "{mode:?} shared");
        assert_eq!(
            recorded(mode, false, true),
            direct,
            "{mode:?} through the list"
        );
    }
}

#[test]
fn one_watcher_is_called_directly_and_two_go_through_the_list() {
    let _turn = TURNS.lock().unwrap_or_else(|e| e.into_inner());
    let first = installed(TracerKind::Nop, BOTH, 64);
    assert!(!is_direct("direct_outer"), "nobody watches");
    first.set_current_tracer(TracerKind::Function).unwrap();
    assert!(is_direct("direct_outer"));
    let second = installed(TracerKind::FunctionGraph, "direct_inner", 64);
    assert!(!is_direct("direct_inner"), "two watch it");
    assert!(is_direct("direct_outer"), "only the first watches it");
    first.set_ftrace_notrace("direct_inner", false).unwrap();
    assert!(is_direct("direct_inner"), "only the second watches it now");
    second.uninstall();
    assert!(!is_direct("direct_inner"), "nobody watches it");
    assert!(is_direct("direct_outer"));
    set_list_only(true);
    assert!(!is_direct("direct_outer"));
    set_list_only(false);
    first.uninstall();
    assert!(!is_direct("direct_outer"));
}

#[test]
fn a_mode_change_re_decides_the_direct_handler() {
    let _turn = TURNS.lock().unwrap_or_else(|e| e.into_inner());
    let tracer = installed(TracerKind::Function, "direct_outer", 64);
    let control = Control::new(tracer);
    let steps: [(&str, &str, Option<&str>); 6] = [
        ("current_tracer", "function_graph", Some("function_graph")),
        (
            "function_profile_enabled",
            "1",
            Some("function_graph+profile"),
        ),
        ("current_tracer", "function", Some("function+profile")),
        ("current_tracer", "nop", Some("profile")),
        ("function_profile_enabled", "0", None),
        ("current_tracer", "function", Some("function")),
    ];
    assert_eq!(direct_handler("direct_outer"), Some("function"));
    for (file, value, handler) in steps {
        control.write(file, value).unwrap();
        assert_eq!(
            direct_handler("direct_outer"),
            handler,
            "after {file} = {value}"
        );
        // The direct call records what the mode records.
        tracer.drain_records();
        direct_outer(1);
        let records = tracer.drain_records();
        let graph = tracer.current_tracer() == TracerKind::FunctionGraph;
        let function = tracer.current_tracer() == TracerKind::Function;
        let entry = tracer.event_id("ftrace", "funcgraph_entry");
        let function_id = tracer.event_id("ftrace", "function");
        let expected: Vec<Option<u16>> = if graph {
            vec![entry, tracer.event_id("ftrace", "funcgraph_exit")]
        } else if function {
            vec![function_id]
        } else {
            vec![]
        };
        let ids: Vec<Option<u16>> = records.iter().map(|r| Some(r.event_id)).collect();
        assert_eq!(ids, expected, "after {file} = {value}");
    }
    assert_eq!(tracer.open_calls(), 0);
    tracer.uninstall();
    assert_eq!(direct_handler("direct_outer"), None);
}

/// Replays one CPU's graph records: every exit closes the innermost open
/// entry (same function, same depth).
fn check_pairs(tracer: &Tracer, records: &[Record], cpus: usize) -> usize {
    let entry = tracer.event_id("ftrace", "funcgraph_entry");
    let exit = tracer.event_id("ftrace", "funcgraph_exit");
    let mut pairs = 0;
    for cpu in 0..cpus {
        let mut open: Vec<(u64, u64)> = Vec::new();
        for r in records.iter().filter(|r| r.cpu == cpu) {
            let call = (r.unsigned(8, 8), r.unsigned(16, 4));
            if Some(r.event_id) == entry {
                open.push(call);
            } else if Some(r.event_id) == exit {
                assert_eq!(
                    open.pop(),
                    Some(call),
                    "cpu {cpu}: an exit without its entry"
                );
                pairs += 1;
            }
        }
        assert!(
            open.is_empty(),
            "cpu {cpu}: entries without exits: {open:?}"
        );
    }
    pairs
}

#[test]
fn switching_under_contention_keeps_pairs_and_never_enters_an_uninstalled_tracer() {
    let _turn = TURNS.lock().unwrap_or_else(|e| e.into_inner());
    const CALLS: u64 = 10_000;
    // Big enough that nothing of the first tracer is overwritten.
    let first = installed(TracerKind::FunctionGraph, BOTH, 8192);
    let done = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..WORKERS)
        .map(|_| {
            let done = Arc::clone(&done);
            std::thread::spawn(move || {
                for call in 0..CALLS {
                    assert_eq!(direct_outer(call), 6 * call + 3);
                }
                done.fetch_add(1, Ordering::Relaxed);
            })
        })
        .collect();
    let mut seconds = Vec::new();
    // Switches while the workers call (at least a few, on a slow host).
    while done.load(Ordering::Relaxed) < WORKERS || seconds.len() < 10 {
        let round = seconds.len();
        let second = installed(TracerKind::FunctionGraph, BOTH, 64);
        first.set_ftrace_filter("direct_inner", false).unwrap();
        second.set_current_tracer(TracerKind::Function).unwrap();
        std::thread::yield_now();
        first.set_ftrace_filter(BOTH, false).unwrap();
        second
            .set_current_tracer(TracerKind::FunctionGraph)
            .unwrap();
        if round % 2 == 0 {
            // Calls entered as `function` end under `function_graph`.
            first.set_current_tracer(TracerKind::Function).unwrap();
            std::thread::sleep(std::time::Duration::from_micros(50));
            first.set_current_tracer(TracerKind::FunctionGraph).unwrap();
        }
        std::thread::yield_now();
        second.uninstall();
        // Anything it holds now was entered before; later, only the
        // exits of calls entered before may come.
        drop(second.drain_records());
        seconds.push(second);
    }
    for worker in workers {
        worker.join().unwrap();
    }
    let exit = first.event_id("ftrace", "funcgraph_exit");
    eprintln!("{} switches of the second tracer", seconds.len());
    for second in &seconds {
        assert_eq!(
            second.open_calls(),
            0,
            "a call entered the second tracer and never left"
        );
        let late = second.drain_records();
        assert!(
            late.iter().all(|r| Some(r.event_id) == exit),
            "an uninstalled tracer was entered: {late:?}"
        );
    }
    first.set_current_tracer(TracerKind::Nop).unwrap();
    assert_eq!(
        first.open_calls(),
        0,
        "a call entered the first tracer and never left"
    );
    let records = first.drain_records();
    assert_eq!((0..WORKERS).map(|cpu| first.lost(cpu)).sum::<u64>(), 0);
    let pairs = check_pairs(first, &records, WORKERS);
    assert!(pairs > 0);
    first.uninstall();
}
