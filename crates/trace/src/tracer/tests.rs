//! Tracer tests. Installed tracers and call sites are process-wide and the
//! test harness runs tests in parallel, so every test selects its own
//! functions (by module) and looks only at its own task's records.

use super::*;
use crate::event::format::{
    BPRINT_ID, FUNCGRAPH_ENTRY_ID, FUNCGRAPH_EXIT_ID, FUNCTION_ID, PRINT_ID,
};
use crate::platform::{ManualClock, ThreadCpus};
use crate::ring::RingError;
use alloc::string::String;
use alloc::vec;
use std::boxed::Box;

fn me() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::gettid() }
}

fn mine(records: Vec<Record>) -> Vec<Record> {
    let pid = me();
    records.into_iter().filter(|r| r.pid == pid).collect()
}

fn installed() -> &'static Tracer {
    Tracer::with_threads(TraceConfig::small(), 4)
        .unwrap()
        .install()
        .unwrap()
}

/// Runs `work` on a child thread whose birth `tracer` hears about (as a
/// fork), and returns the child's task id.
fn forked_child(tracer: &'static Tracer, work: impl FnOnce() + Send + 'static) -> i32 {
    let fork = move |parent, child| tracer.on_fork(parent, child);
    crate::platform::spawn(fork, move || {
        work();
        me()
    })
    .join()
    .unwrap()
}

fn name_at(address: u64) -> &'static str {
    function::site_at(address).map_or("?", |s| s.name())
}

mod graph_funcs {
    #[crate::function]
    pub fn outer(n: u64) -> u64 {
        inner(n) + inner(n + 1)
    }

    #[crate::function]
    pub fn inner(n: u64) -> u64 {
        leaf(n) * 2
    }

    #[crate::function]
    pub fn leaf(n: u64) -> u64 {
        n + 1
    }

    #[crate::function]
    pub fn early_return(n: u64) -> Result<u64, ()> {
        if n == 0 {
            return Err(());
        }
        Ok(n)
    }
}

#[test]
fn function_graph_records_nested_entries_and_exits_with_durations() {
    let tracer = installed();
    tracer
        .set_ftrace_filter(":mod:*::graph_funcs", false)
        .unwrap();
    tracer
        .set_current_tracer(TracerKind::FunctionGraph)
        .unwrap();
    assert_eq!(graph_funcs::outer(1), 10);
    assert!(graph_funcs::early_return(0).is_err());
    tracer.set_current_tracer(TracerKind::Nop).unwrap();
    let records = mine(tracer.drain_records());
    let shape: Vec<(u16, &str, i64)> = records
        .iter()
        .map(|r| (r.event_id, name_at(r.unsigned(8, 8)), r.signed(16, 4)))
        .collect();
    let (e, x) = (FUNCGRAPH_ENTRY_ID, FUNCGRAPH_EXIT_ID);
    assert_eq!(
        shape,
        vec![
            (e, "outer", 0),
            (e, "inner", 1),
            (e, "leaf", 2),
            (x, "leaf", 2),
            (x, "inner", 1),
            (e, "inner", 1),
            (e, "leaf", 2),
            (x, "leaf", 2),
            (x, "inner", 1),
            (x, "outer", 0),
            (e, "early_return", 0),
            (x, "early_return", 0),
        ]
    );
    for exit in records.iter().filter(|r| r.event_id == FUNCGRAPH_EXIT_ID) {
        let (call, ret) = (exit.unsigned(24, 8), exit.unsigned(32, 8));
        assert!(ret >= call);
        assert_eq!(exit.timestamp_ns, ret);
    }
    // Nothing runs once the tracer is back to nop.
    graph_funcs::outer(1);
    assert!(mine(tracer.drain_records()).is_empty());
    tracer.uninstall();
}

mod depth_funcs {
    #[crate::function]
    pub fn a() {
        b();
    }
    #[crate::function]
    pub fn b() {
        c();
    }
    #[crate::function]
    pub fn c() {}
}

#[test]
fn max_graph_depth_limits_what_is_recorded() {
    let tracer = installed();
    tracer
        .set_ftrace_filter(":mod:*::depth_funcs", false)
        .unwrap();
    assert_eq!(
        tracer.set_max_graph_depth(1000),
        Err(TraceError::BadDepth(1000))
    );
    tracer.set_max_graph_depth(2).unwrap();
    tracer
        .set_current_tracer(TracerKind::FunctionGraph)
        .unwrap();
    depth_funcs::a();
    tracer.set_current_tracer(TracerKind::Nop).unwrap();
    let names: Vec<&str> = mine(tracer.drain_records())
        .iter()
        .map(|r| name_at(r.unsigned(8, 8)))
        .collect();
    assert_eq!(names, vec!["a", "b", "b", "a"]);
    tracer.uninstall();
}

mod filter_funcs {
    #[crate::function]
    pub fn read_block() {}
    #[crate::function]
    pub fn read_page() {}
    #[crate::function]
    pub fn write_block() {}
    pub mod net {
        #[crate::function]
        pub fn read_socket() {}
    }
}

fn called_functions(tracer: &Tracer) -> Vec<&'static str> {
    filter_funcs::read_block();
    filter_funcs::read_page();
    filter_funcs::write_block();
    filter_funcs::net::read_socket();
    let mut names: Vec<&str> = mine(tracer.drain_records())
        .iter()
        .filter(|r| r.event_id == FUNCTION_ID)
        .map(|r| name_at(r.unsigned(8, 8)))
        .collect();
    names.sort_unstable();
    names
}

#[test]
fn function_filters_globs_modules_and_notrace() {
    let tracer = installed();
    tracer.set_current_tracer(TracerKind::Function).unwrap();
    tracer
        .set_ftrace_filter("read_*:mod:*::filter_funcs", false)
        .unwrap();
    assert_eq!(
        called_functions(tracer),
        vec!["read_block", "read_page", "read_socket"]
    );
    tracer
        .set_ftrace_filter("read_*:mod:!*::filter_funcs::net", false)
        .unwrap();
    // The negated module selects every module but net — restrict to ours.
    tracer
        .set_ftrace_notrace(":mod:!*::filter_funcs", false)
        .unwrap();
    assert_eq!(called_functions(tracer), vec!["read_block", "read_page"]);
    tracer
        .set_ftrace_filter("*_block:mod:*::filter_funcs", false)
        .unwrap();
    tracer.set_ftrace_notrace("write*", true).unwrap();
    assert_eq!(called_functions(tracer), vec!["read_block"]);
    // A bad write changes nothing: an unknown probe command, a bad selector.
    assert!(matches!(
        tracer.set_ftrace_filter("ok bad:cmd", false),
        Err(TraceError::Probe(ref e)) if e.kind == crate::function::probe::ProbeErrorKind::UnknownCommand
    ));
    assert!(matches!(
        tracer.set_ftrace_filter("ok x:mod:", false),
        Err(TraceError::Selector(_))
    ));
    assert_eq!(tracer.ftrace_filter_text(), "*_block:mod:*::filter_funcs\n");
    assert_eq!(called_functions(tracer), vec!["read_block"]);
    let selected: Vec<&str> = tracer
        .selected_functions()
        .iter()
        .filter(|s| s.module().contains("filter_funcs"))
        .map(|s| s.name())
        .collect();
    assert_eq!(selected, vec!["read_block"]);
    tracer.set_current_tracer(TracerKind::Nop).unwrap();
    tracer.uninstall();
}

mod parent_funcs {
    #[crate::function]
    pub fn caller() {
        callee();
    }
    #[crate::function]
    pub fn callee() {}
}

#[test]
fn function_tracer_reports_the_parent() {
    let tracer = installed();
    tracer
        .set_ftrace_filter(":mod:*::parent_funcs", false)
        .unwrap();
    tracer.set_current_tracer(TracerKind::Function).unwrap();
    parent_funcs::caller();
    tracer.set_current_tracer(TracerKind::Nop).unwrap();
    let pairs: Vec<(&str, &str)> = mine(tracer.drain_records())
        .iter()
        .map(|r| (name_at(r.unsigned(8, 8)), name_at(r.unsigned(16, 8))))
        .collect();
    assert_eq!(pairs, vec![("caller", "?"), ("callee", "caller")]);
    tracer.uninstall();
}

mod pid_funcs {
    #[crate::function]
    pub fn work() {}
}

#[test]
fn pid_filter_follows_children_with_function_fork() {
    let tracer = installed();
    tracer
        .set_ftrace_filter(":mod:*::pid_funcs", false)
        .unwrap();
    tracer.set_current_tracer(TracerKind::Function).unwrap();
    tracer.ftrace_pids().add(&[i64::from(me())]).unwrap();
    tracer.set_option(TraceOption::FunctionFork, true);
    let child = forked_child(tracer, || {
        pid_funcs::work();
    });
    // Without function-fork a child is not followed.
    tracer.set_option(TraceOption::FunctionFork, false);
    let stranger = forked_child(tracer, || {
        pid_funcs::work();
    });
    pid_funcs::work();
    tracer.set_current_tracer(TracerKind::Nop).unwrap();
    let pids: Vec<i32> = tracer
        .drain_records()
        .iter()
        .filter(|r| r.event_id == FUNCTION_ID && name_at(r.unsigned(8, 8)) == "work")
        .map(|r| r.pid)
        .collect();
    assert!(pids.contains(&child));
    assert!(pids.contains(&me()));
    assert!(!pids.contains(&stranger));
    assert!(tracer.ftrace_pids().contains(child));
    tracer.uninstall();
}

/// The profiler test's clock: `slow` moves it on by hand, so the times the
/// profiler adds up are known exactly instead of being "at least" a sleep.
static PROFILE_CLOCK: ManualClock = ManualClock::new(0);

struct ProfileClock;

impl Clock for ProfileClock {
    fn now_ns(&self) -> u64 {
        PROFILE_CLOCK.now_ns()
    }
    fn name(&self) -> &'static str {
        "manual"
    }
}

mod profile_funcs {
    #[crate::function]
    pub fn slow() {
        super::PROFILE_CLOCK.advance(200_000);
    }
    #[crate::function]
    pub fn fast() {}
}

#[test]
fn profiler_counts_hits_and_time_per_cpu() {
    let tracer = Tracer::new(
        TraceConfig::small(),
        Arc::new(ProfileClock),
        ThreadCpus::new(4),
    )
    .unwrap()
    .install()
    .unwrap();
    tracer
        .set_ftrace_filter(":mod:*::profile_funcs", false)
        .unwrap();
    tracer.set_function_profile(true).unwrap();
    for _ in 0..3 {
        profile_funcs::slow();
    }
    for _ in 0..10 {
        profile_funcs::fast();
    }
    tracer.set_function_profile(false).unwrap();
    let rows: Vec<_> = (0..tracer.cpus())
        .flat_map(|cpu| tracer.function_profile(cpu))
        .filter(|r| r.module.contains("profile_funcs"))
        .collect();
    let slow = rows.iter().find(|r| r.function == "slow").unwrap();
    let fast = rows.iter().find(|r| r.function == "fast").unwrap();
    assert_eq!((slow.hits, fast.hits), (3, 10));
    assert_eq!((slow.time_ns, slow.avg_ns()), (600_000, 200_000));
    assert_eq!((fast.time_ns, fast.avg_ns()), (0, 0));
    // Profiling alone records no events.
    assert!(mine(tracer.drain_records()).is_empty());
    tracer.uninstall();
}

/// Functions of the reset test alone (call sites are process-wide).
mod profile_reset_funcs {
    #[crate::function]
    pub fn counted() {}
}

#[test]
fn enabling_the_profiler_again_resets_its_counters() {
    let tracer = installed();
    tracer
        .set_ftrace_filter(":mod:*::profile_reset_funcs", false)
        .unwrap();
    tracer.set_function_profile(true).unwrap();
    for _ in 0..10 {
        profile_reset_funcs::counted();
    }
    let hits = |tracer: &Tracer| -> u64 {
        (0..tracer.cpus())
            .flat_map(|cpu| tracer.function_profile(cpu))
            .filter(|r| r.module.contains("profile_reset_funcs"))
            .map(|r| r.hits)
            .sum()
    };
    assert_eq!(hits(tracer), 10);
    // Still on: the reset (from this thread, the control side) must not be
    // undone by the profiler's own updates.
    tracer.set_function_profile(true).unwrap();
    assert_eq!(hits(tracer), 0);
    for _ in 0..4 {
        profile_reset_funcs::counted();
    }
    tracer.set_function_profile(false).unwrap();
    assert_eq!(hits(tracer), 4);
    tracer.uninstall();
}

mod recording;
