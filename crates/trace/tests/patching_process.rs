//! Patching call sites, in processes of their own: the first install
//! (which rewrites every compiled site while threads may run through
//! them), the fallback when patching is off, and a torn patch — the bytes
//! written one by one without the breakpoint protocol, the planted bug the
//! protocol exists to prevent, which must be caught.
//!
//! Each case runs this test binary again as a child (the ignored `child`
//! test, told what to do by `HOTKERN_PATCH_CHILD`) and judges its exit.
#![cfg(all(not(loom), target_arch = "x86_64", target_os = "linux"))]

use std::hint::black_box;
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hotkern_trace::function::TracerKind;
use hotkern_trace::internals::site::{between_steps, plant_torn_patching, traps};
use hotkern_trace::platform::TextError;
use hotkern_trace::site::{self, Form, SiteStatus};
use hotkern_trace::{TraceConfig, Tracer};

/// What the child does.
const MODE: &str = "HOTKERN_PATCH_CHILD";

/// Threads running through the site while it is patched.
const THREADS: usize = 4;

#[hotkern_trace::function]
#[inline(never)]
fn hammered(x: u64) -> u64 {
    black_box(x.wrapping_mul(3))
}

fn call_hammered() {
    assert_eq!(hammered(5), 15);
}

/// The child: patches `hammered`'s site on and off 300 times while
/// [`THREADS`] threads call it; with `torn`, through the planted torn
/// writer. Exits cleanly only if every call returned what it should.
fn hammer(torn: bool) {
    let tracer = Tracer::with_threads(TraceConfig::small(), THREADS + 1)
        .and_then(Tracer::install)
        .unwrap();
    assert!(matches!(site::status(), SiteStatus::Patched { .. }));
    tracer.set_tracing_on(false);
    tracer.set_ftrace_filter("hammered", false).unwrap();
    plant_torn_patching(torn);
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut i = t as u64;
                while !stop.load(Ordering::Relaxed) {
                    assert_eq!(hammered(i), i.wrapping_mul(3));
                    i += 1;
                }
            })
        })
        .collect();
    for _ in 0..300 {
        tracer.set_current_tracer(TracerKind::Function).unwrap();
        tracer.set_current_tracer(TracerKind::Nop).unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    for thread in threads {
        thread.join().unwrap();
    }
}

#[test]
#[ignore = "the child process of the tests below"]
fn child() {
    let Some(mode) = std::env::var_os(MODE) else {
        return;
    };
    match mode.to_str() {
        Some("sound") => hammer(false),
        Some("torn") => hammer(true),
        Some("first-install") => {
            // The first install rewrites the compiled sites (jumps to
            // their out-of-line load and branch) to NOPs: a call after the
            // first and the second sync traps and resumes past the site.
            let before = traps();
            between_steps(Some(call_hammered));
            let tracer = Tracer::with_threads(TraceConfig::small(), 1)
                .and_then(Tracer::install)
                .unwrap();
            between_steps(None);
            assert_eq!(traps() - before, 2);
            assert!(matches!(site::status(), SiteStatus::Patched { .. }));
            let ours: Vec<_> = site::sites()
                .into_iter()
                .filter(|s| s.name == "hammered")
                .collect();
            assert_eq!(ours.len(), 1);
            assert_eq!(ours[0].form, Form::Nop);
            call_hammered();
            tracer.uninstall();
        }
        Some("fallback") => {
            // HOTKERN_TRACE_PATCH=0: the sites stay as compiled, and
            // tracing works through their load and branch.
            let tracer = Tracer::with_threads(TraceConfig::small(), 1)
                .and_then(Tracer::install)
                .unwrap();
            assert_eq!(site::status(), SiteStatus::Fallback(TextError::Disabled));
            tracer.set_ftrace_filter("hammered", false).unwrap();
            tracer.set_current_tracer(TracerKind::Function).unwrap();
            call_hammered();
            call_hammered();
            tracer.set_current_tracer(TracerKind::Nop).unwrap();
            call_hammered();
            assert!(site::sites().iter().all(|s| s.form == Form::Compiled));
            let function = tracer.event_id("ftrace", "function");
            let calls = tracer
                .drain_records()
                .iter()
                .filter(|r| Some(r.event_id) == function)
                .count();
            assert_eq!(calls, 2);
            tracer.uninstall();
        }
        other => panic!("unknown {MODE}: {other:?}"),
    }
}

/// Runs the child in `mode` (with `env` added); its exit status, or
/// `None` if it ran for a minute (killed then).
fn run_child(mode: &str, env: &[(&str, &str)]) -> (Option<ExitStatus>, String) {
    let log = std::env::temp_dir().join(format!(
        "hotkern-patch-child-{mode}-{}.log",
        std::process::id()
    ));
    let file = std::fs::File::create(&log).unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["child", "--exact", "--ignored", "--nocapture"])
        .env(MODE, mode)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(file.try_clone().unwrap())
        .stderr(file)
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break Some(status);
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let output = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    (status, output)
}

fn assert_clean_exit(mode: &str, env: &[(&str, &str)]) {
    let (status, output) = run_child(mode, env);
    assert!(
        status.is_some_and(|s| s.success()) && output.contains("1 passed"),
        "child {mode}: {status:?}\n{output}"
    );
}

#[test]
fn threads_running_through_sites_patched_soundly_never_fail() {
    assert_clean_exit("sound", &[]);
}

#[test]
fn the_first_install_rewrites_compiled_sites_under_running_calls() {
    assert_clean_exit("first-install", &[]);
}

#[test]
fn with_patching_off_the_sites_stay_compiled_and_still_trace() {
    assert_clean_exit("fallback", &[("HOTKERN_TRACE_PATCH", "0")]);
}

#[test]
fn a_torn_patch_is_caught() {
    let (status, output) = run_child("torn", &[]);
    // Threads that run a half-written jump land inside other code: a
    // signal (SIGSEGV, SIGILL, SIGBUS), a failed check, or a hang.
    eprintln!("torn child: {status:?}");
    assert!(
        !status.is_some_and(|s| s.success()),
        "a torn patch went unnoticed:\n{output}"
    );
}
