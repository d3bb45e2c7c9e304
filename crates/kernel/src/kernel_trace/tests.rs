//! The run trace over a fake platform: a sink that keeps (or cuts) the
//! bytes, a console that keeps its lines, a clock that moves a millisecond
//! per reading (so bounded waits end at once), a CPU number set by hand.
//! Only the thread that made a fake is on a CPU: tracepoints other tests
//! fire on their threads (the hotplug engine's `cpuhp_callback`) find no
//! CPU and are dropped, as the rings' one-writer-per-CPU rule needs.

use std::boxed::Box;
use std::string::{String, ToString};
use std::sync::Mutex;
use std::vec::Vec;

use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

use super::{fnv1a64, Shipped, TracePlatform, Tracing};

pub(crate) struct Fake {
    sink: Mutex<Vec<u8>>,
    /// The sink drops every byte past this many (a wedged line).
    cut_after: usize,
    console: Mutex<Vec<String>>,
    clock: AtomicU64,
    cpu: AtomicUsize,
    crash_mode: AtomicBool,
    thread: std::thread::ThreadId,
}

// SAFETY: only the thread that made the fake has a CPU, so each ring has
// one writer.
unsafe impl TracePlatform for Fake {
    fn now_ns(&self) -> u64 {
        self.clock.fetch_add(1_000_000, Ordering::Relaxed)
    }
    fn current_cpu(&self) -> Option<usize> {
        (std::thread::current().id() == self.thread).then(|| self.cpu.load(Ordering::Relaxed))
    }
    fn cpus(&self) -> usize {
        2
    }
    fn send_trace(&self, bytes: &[u8]) {
        let mut sink = self.sink.lock().unwrap();
        let room = self.cut_after.saturating_sub(sink.len());
        sink.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }
    fn console_line(&self, line: core::fmt::Arguments<'_>) {
        self.console.lock().unwrap().push(line.to_string());
    }
    fn enter_crash_mode(&self) {
        self.crash_mode.store(true, Ordering::Relaxed);
    }
}

/// A started trace whose sink keeps `cut_after` bytes, with two markers;
/// the calling thread is its CPU 0.
pub(crate) fn started(cut_after: usize) -> &'static Tracing<Fake> {
    let fake = Fake {
        sink: Mutex::new(Vec::new()),
        cut_after,
        console: Mutex::new(Vec::new()),
        clock: AtomicU64::new(0),
        cpu: AtomicUsize::new(0),
        crash_mode: AtomicBool::new(false),
        thread: std::thread::current().id(),
    };
    let tracing: &'static Tracing<Fake> = Box::leak(Box::new(Tracing::new(fake, 16)));
    tracing.start().expect("the tracer starts");
    tracing.marker(format_args!("first marker on cpu {}", 0));
    tracing.marker(format_args!("second marker"));
    tracing
}

/// How many events of `name` the rings of `tracing` hold, not consumed.
pub(crate) fn events_named(tracing: &Tracing<Fake>, name: &str) -> usize {
    let (_, event) = super::events::ALL
        .iter()
        .find(|(each, _)| *each == name)
        .expect("a kernel tracepoint");
    let id = event.id();
    let data = hotkern_trace::control::view::peek(tracing.tracer().unwrap());
    data.entries
        .iter()
        .filter(|entry| {
            matches!(entry, hotkern_trace::output::Entry::Event(record) if record.event_id() == id)
        })
        .count()
}

fn sink(tracing: &Tracing<Fake>) -> Vec<u8> {
    tracing.platform.sink.lock().unwrap().clone()
}

fn console(tracing: &Tracing<Fake>) -> Vec<String> {
    tracing.platform.console.lock().unwrap().clone()
}

#[test]
fn ship_sends_one_readable_trace_dat_with_its_size_and_checksum() {
    let tracing = started(usize::MAX);
    let shipped = tracing.ship().expect("shipped");
    let bytes = sink(tracing);
    assert_eq!(shipped.bytes, bytes.len());
    assert_eq!(shipped.fnv1a64, fnv1a64(&bytes));
    assert_eq!(shipped.lost, 0);
    let mut file = hotkern_tracedat::TraceFile::from_bytes(bytes).expect("a trace.dat");
    let records: Vec<_> = file.records().unwrap().collect::<Result<_, _>>().unwrap();
    assert_eq!(records.len(), shipped.events);
    let has = |text: &[u8]| {
        records
            .iter()
            .any(|record| record.data.windows(text.len()).any(|w| w == text))
    };
    assert!(has(b"first marker on cpu 0") && has(b"second marker"));
}

#[test]
fn the_trace_ships_once() {
    let tracing = started(usize::MAX);
    assert!(tracing.ship().is_some());
    let once = sink(tracing).len();
    assert_eq!(tracing.ship(), None, "a second ship sends nothing");
    assert_eq!(sink(tracing).len(), once);
}

#[test]
fn a_crash_dump_is_framed_by_its_size_and_checksum() {
    let tracing = started(usize::MAX);
    tracing.on_crash();
    let bytes = sink(tracing);
    let shipped = Shipped {
        events: 2,
        lost: 0,
        bytes: bytes.len(),
        fnv1a64: fnv1a64(&bytes),
    };
    assert!(tracing.platform.crash_mode.load(Ordering::Relaxed));
    assert_eq!(
        console(tracing),
        [
            std::format!(
                "hotkern: crash dump begins: {} bytes on COM2\n",
                bytes.len()
            ),
            std::format!("hotkern: crash dump {{{shipped}}}\n"),
        ]
    );
    assert_eq!(tracing.ship(), None, "no trace.dat after a crash dump");
}

#[test]
fn a_crash_after_the_ship_is_skipped() {
    let tracing = started(usize::MAX);
    tracing.ship().unwrap();
    let shipped = sink(tracing).len();
    tracing.on_crash();
    assert_eq!(sink(tracing).len(), shipped, "nothing appended to the file");
    assert_eq!(
        console(tracing),
        ["hotkern: crash dump skipped: the trace was already written out\n"]
    );
}

#[test]
fn a_second_crash_inside_the_dump_abandons_it_and_another_cpu_waits_bounded() {
    let tracing = started(usize::MAX);
    tracing.panic_inside_dump();
    // The dump panics after its begin line; the panic handler then
    // crashes into `on_crash` again on the same CPU.
    let first = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| tracing.on_crash()));
    assert!(first.is_err());
    tracing.on_crash();
    let lines = console(tracing);
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(lines[0].starts_with("hotkern: crash dump begins: "));
    assert_eq!(
        lines[1],
        "hotkern: crash dump abandoned: a second crash while writing it\n"
    );
    assert!(sink(tracing).is_empty(), "no byte after the second crash");
    // A crash on another CPU waits for the (never finishing) dump, a
    // bounded time, and writes nothing.
    tracing.platform.cpu.store(1, Ordering::Relaxed);
    let before = tracing.platform.clock.load(Ordering::Relaxed);
    tracing.on_crash();
    let waited = tracing.platform.clock.load(Ordering::Relaxed) - before;
    assert!(
        (20_000_000_000..21_000_000_000).contains(&waited),
        "{waited}"
    );
    assert_eq!(console(tracing).len(), 2);
}

#[test]
fn a_cut_sink_leaves_the_full_size_and_checksum_for_the_host_to_check() {
    let tracing = started(1000);
    let shipped = tracing.ship().unwrap();
    let received = sink(tracing);
    assert_eq!(received.len(), 1000);
    assert!(shipped.bytes > 1000, "the figures are the whole file's");
    assert_ne!(shipped.fnv1a64, fnv1a64(&received));
}

#[test]
fn markers_are_cut_at_a_character_boundary_and_filters_are_kept() {
    let tracing = started(usize::MAX);
    // 159 ASCII bytes and a two-byte character: the character is cut whole.
    tracing.marker(format_args!("{}é and more", "x".repeat(159)));
    assert!(tracing
        .set_function_filter("no_function_has_this_name*")
        .is_err());
    let (filter, patched) = tracing.function_filter();
    let (text, outcome) = filter.unwrap();
    assert_eq!(text, "no_function_has_this_name*");
    assert!(outcome.is_err());
    assert_eq!(patched, 0);
    let shipped = tracing.ship().unwrap();
    let mut file = hotkern_tracedat::TraceFile::from_bytes(sink(tracing)).unwrap();
    let cut = "x".repeat(159);
    let found = file.records().unwrap().any(|record| {
        let data = record.unwrap().data;
        data.windows(cut.len()).any(|w| w == cut.as_bytes()) && !data.contains(&0xc3)
    });
    assert!(found && shipped.events == 3);
}
