//! Function probes (`set_ftrace_filter` commands, as Linux's
//! `register_ftrace_function_probe`): parsed with typed errors that
//! change nothing, attached to function sites, and called directly when a
//! probe is a function's only watcher. Its own test binary: it installs
//! tracers, and its tests take turns.

use std::sync::{Mutex, OnceLock};

use hotkern_trace::control::Control;
use hotkern_trace::event::KERNEL_STACK_ID;
use hotkern_trace::function::TracerKind;
use hotkern_trace::internals::dispatch::{direct_handler, set_list_only};
use hotkern_trace::platform::ThreadCpus;
use hotkern_trace::{TraceConfig, TraceError, Tracer};
use proptest::prelude::*;

hotkern_trace::define_event! {
    /// The event `enable_event` probes switch.
    pub probe_event in probesys {
        value: u64,
    }
    print "value=%llu", value
}

#[hotkern_trace::function]
fn probe_target(x: u64) -> u64 {
    std::hint::black_box(x + 1)
}

#[hotkern_trace::function]
fn probe_other(x: u64) -> u64 {
    std::hint::black_box(x * 2)
}

static TURNS: Mutex<()> = Mutex::new(());

fn installed() -> &'static Tracer {
    static CPUS: OnceLock<&'static ThreadCpus> = OnceLock::new();
    let cpus = *CPUS.get_or_init(|| ThreadCpus::new(2));
    Tracer::new(
        TraceConfig::small(),
        std::sync::Arc::new(hotkern_trace::platform::MonotonicClock::new()),
        cpus,
    )
    .and_then(Tracer::install)
    .unwrap()
}

/// The event ids a tracer recorded, in order.
fn ids(tracer: &Tracer) -> Vec<u16> {
    tracer.drain_records().iter().map(|r| r.event_id).collect()
}

#[test]
fn a_traceoff_probe_alone_is_called_directly_and_its_count_runs_out() {
    let _turn = TURNS.lock().unwrap_or_else(|e| e.into_inner());
    let tracer = installed();
    let control = Control::new(tracer);
    control
        .write("set_ftrace_filter", "probe_target:traceoff:1")
        .unwrap();
    assert_eq!(direct_handler("probe_target"), Some("probe"));
    assert_eq!(direct_handler("probe_other"), None, "not probed");
    let listed = control.read("set_ftrace_filter").unwrap();
    assert!(
        listed.contains("probe_target:traceoff:count=1\n"),
        "{listed}"
    );
    assert!(
        listed.starts_with("#### all functions enabled ####"),
        "{listed}"
    );
    assert!(tracer.tracing_on());
    probe_other(1);
    assert!(tracer.tracing_on(), "an unprobed function");
    assert_eq!(probe_target(1), 2);
    assert!(!tracer.tracing_on(), "the probe switched tracing off");
    tracer.set_tracing_on(true);
    probe_target(2);
    assert!(tracer.tracing_on(), "its count is spent");
    let listed = control.read("set_ftrace_filter").unwrap();
    assert!(
        listed.contains("probe_target:traceoff:count=0\n"),
        "{listed}"
    );
    control
        .write("set_ftrace_filter", "!probe_target:traceoff")
        .unwrap();
    assert_eq!(direct_handler("probe_target"), None, "removed");
    assert!(!control
        .read("set_ftrace_filter")
        .unwrap()
        .contains("traceoff"));
    tracer.uninstall();
}

/// Calls the target three times with a `stacktrace:2` probe on it, the
/// tracer in `kind`; the handler it was called through and what it
/// recorded.
fn probed_calls(kind: TracerKind, list_only: bool) -> (Option<&'static str>, Vec<u16>) {
    set_list_only(list_only);
    let tracer = installed();
    tracer.set_ftrace_filter("probe_target", false).unwrap();
    tracer
        .set_ftrace_filter("probe_target:stacktrace:2", true)
        .unwrap();
    tracer.set_current_tracer(kind).unwrap();
    let handler = direct_handler("probe_target");
    for x in 0..3 {
        probe_target(x);
    }
    tracer.set_current_tracer(TracerKind::Nop).unwrap();
    let recorded = ids(tracer);
    assert_eq!(tracer.open_calls(), 0);
    tracer.uninstall();
    set_list_only(false);
    (handler, recorded)
}

#[test]
fn probes_record_the_same_directly_beside_a_tracer_and_through_the_list() {
    let _turn = TURNS.lock().unwrap_or_else(|e| e.into_inner());
    let function = installed().event_id("ftrace", "function").unwrap();
    // The probe alone: called directly.
    let alone = probed_calls(TracerKind::Nop, false);
    assert_eq!(alone, (Some("probe"), vec![KERNEL_STACK_ID; 2]));
    assert_eq!(probed_calls(TracerKind::Nop, true), (None, alone.1));
    // The probe and the function tracer: the list, both act.
    let both = probed_calls(TracerKind::Function, false);
    assert_eq!(both.0, None, "two watchers go through the list");
    // The probe runs before the mode's entry; its count is spent after two.
    let expected = [
        KERNEL_STACK_ID,
        function,
        KERNEL_STACK_ID,
        function,
        function,
    ];
    assert_eq!(both.1, expected);
    assert_eq!(probed_calls(TracerKind::Function, true).1, both.1);
}

#[test]
fn a_probed_function_the_filters_leave_out_is_not_traced_through_the_list() {
    let _turn = TURNS.lock().unwrap_or_else(|e| e.into_inner());
    set_list_only(true);
    let tracer = installed();
    tracer.set_ftrace_filter("probe_other", false).unwrap();
    tracer
        .set_ftrace_filter("probe_target:stacktrace", true)
        .unwrap();
    tracer.set_current_tracer(TracerKind::Function).unwrap();
    probe_target(1);
    probe_other(1);
    tracer.set_current_tracer(TracerKind::Nop).unwrap();
    let function = tracer.event_id("ftrace", "function").unwrap();
    assert_eq!(ids(tracer), [KERNEL_STACK_ID, function]);
    tracer.uninstall();
    set_list_only(false);
}

#[test]
fn an_enable_event_probe_switches_the_event_and_none_fires_after_uninstall() {
    let _turn = TURNS.lock().unwrap_or_else(|e| e.into_inner());
    hotkern_trace::event::register(&probe_event::EVENT);
    let tracer = installed();
    let id = probe_event::EVENT.id();
    tracer
        .set_ftrace_filter("probe_tar*:enable_event:probesys:probe_event", false)
        .unwrap();
    probe_event::trace(1);
    assert!(!tracer.event_enabled(id));
    probe_target(1);
    assert!(tracer.event_enabled(id), "the probe enabled it");
    probe_event::trace(2);
    assert_eq!(ids(tracer), [id]);
    tracer
        .set_ftrace_filter(
            "probe_target:disable_event:probesys:probe_event probe_other:traceoff",
            false,
        )
        .unwrap();
    probe_target(1);
    assert!(!tracer.event_enabled(id), "disabled again");
    tracer.uninstall();
    probe_other(1);
    assert!(tracer.tracing_on(), "no probe after uninstall returned");
}

/// Whole tokens, well-formed and not: probes, selectors and their errors.
const TOKENS: &[&str] = &[
    "probe_target:traceon",
    "probe_oth*:stacktrace:3",
    "probe_target:enable_event:probesys:probe_event",
    "!probe_target:traceon",
    "probe_target:tracon",
    ":traceon",
    "probe_target:enable_event:nosys:nothing",
    "probe_target:disable_event:probesys",
    "probe_target:traceon:-1",
    "probe_target:traceoff:1:2",
    "no_such_fn:traceon",
    "!",
    "x:mod:",
    "probe_other",
    "no_such_fn",
];

/// Pieces that glue into tokens nobody wrote by hand.
const PIECES: &[&str] = &[
    "probe_target",
    "probe_oth*",
    "no_such_fn",
    ":",
    ":",
    "!",
    "traceon",
    "traceoff",
    "stacktrace",
    "enable_event",
    "disable_event",
    "probesys",
    "probe_event",
    "nosys",
    "3",
    "-1",
    "mod",
    "*",
    "x",
];

/// A token: one of [`TOKENS`], or [`PIECES`] glued together.
fn token() -> impl Strategy<Value = String> {
    prop_oneof![
        (0..TOKENS.len()).prop_map(|t| TOKENS[t].to_string()),
        prop::collection::vec(0..PIECES.len(), 1..6)
            .prop_map(|pieces| pieces.iter().map(|&p| PIECES[p]).collect()),
    ]
}

/// What a write may change: the filter and probe listing.
fn listing(control: &Control) -> String {
    control.read("set_ftrace_filter").unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn malformed_probe_writes_are_refused_with_typed_errors_and_change_nothing(
        writes in prop::collection::vec(prop::collection::vec(token(), 1..4), 1..6)
    ) {
        let _turn = TURNS.lock().unwrap_or_else(|e| e.into_inner());
        hotkern_trace::event::register(&probe_event::EVENT);
        let tracer = installed();
        let control = Control::new(tracer);
        for tokens in writes {
            let text = tokens.join(" ");
            let before = listing(&control);
            match tracer.set_ftrace_filter(&text, true) {
                Ok(()) => {}
                Err(TraceError::Probe(_) | TraceError::Selector(_) | TraceError::NoMatch(_)) => {
                    prop_assert_eq!(listing(&control), before, "{:?} changed something", text);
                }
                Err(other) => prop_assert!(false, "{:?}: untyped error {:?}", text, other),
            }
        }
        tracer.uninstall();
    }
}

#[test]
fn each_malformed_command_is_refused_with_its_kind() {
    use hotkern_trace::function::probe::ProbeErrorKind as Kind;
    let _turn = TURNS.lock().unwrap_or_else(|e| e.into_inner());
    hotkern_trace::event::register(&probe_event::EVENT);
    let tracer = installed();
    let cases = [
        ("probe_target:tracon", Kind::UnknownCommand),
        (":traceon", Kind::EmptyFunction),
        ("probe_target:enable_event:nosys:nothing", Kind::NoSuchEvent),
        ("probe_target:disable_event:probesys", Kind::MissingEvent),
        ("probe_target:traceon:-1", Kind::BadCount),
        ("probe_target:traceoff:1:2", Kind::TooManyFields),
    ];
    for (text, kind) in cases {
        // After a well-formed probe in the same write: it is not installed.
        let write = ["probe_other:traceon ", text].concat();
        match tracer.set_ftrace_filter(&write, true) {
            Err(TraceError::Probe(error)) => {
                assert_eq!(error.kind, kind, "{text}");
                assert_eq!(error.position, "probe_other:traceon ".len(), "{text}");
            }
            other => panic!("{text}: {other:?}"),
        }
    }
    assert_eq!(direct_handler("probe_other"), None, "nothing was installed");
    tracer.uninstall();
}
