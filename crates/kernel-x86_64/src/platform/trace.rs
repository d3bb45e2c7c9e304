//! The run's trace: a hotkern-trace tracer with one ring per CPU, markers
//! at the boot phases and from the application processors themselves, and
//! at the end a `trace.dat` (the format trace-cmd reads) sent raw on COM2.
//!
//! COM1 stays the console; the summary line carries the trace's size and
//! FNV-1a checksum, so `hotkern boot` can tell a complete file from a cut
//! one. Without a second UART (the scratch register test fails) the bytes
//! are dropped, and the summary still counts them.

use alloc::string::String;
use alloc::sync::Arc;
use core::fmt::{self, Write};
use core::sync::atomic::{AtomicPtr, AtomicU8, Ordering};

use hotkern_trace::control::view;
use hotkern_trace::function::TracerKind;
use hotkern_trace::platform::{Clock, CpuContext};
use hotkern_trace::ring::Mode;
use hotkern_trace::tracedat::write_trace_dat;
use hotkern_trace::{TraceConfig, Tracer};

use crate::arch::console::println;
use crate::arch::cpu;
use crate::arch::serial::Uart;
use crate::arch::smp;
use crate::arch::tsc;

/// The second 16550 (COM2): the trace's channel to the host.
const COM2: u16 = 0x2f8;
/// Ring bytes per CPU: a boot writes a few thousand events (most of them
/// hotplug callbacks and task migrations), well under this.
const BUFFER_KB: usize = 64;

hotkern_trace::define_event! {
    /// An application processor ran a cross-CPU call (on its own ring).
    pub cpu_call in hotkern {
        cpu: u32,
        apic_id: u32,
    }
    print "cpu=%u apic_id=%u", cpu, apic_id
}

hotkern_trace::define_event! {
    /// A hotplug step's callback ran (Linux's `cpuhp_enter` shows the same).
    pub cpuhp_callback in hotkern {
        cpu: u32,
        step: u32,
        up: u32,
    }
    print "cpu=%u step=%u up=%u", cpu, step, up
}

hotkern_trace::define_event! {
    /// A task moved off a dying CPU (Linux's `sched_migrate_task`).
    pub sched_migrate_task in hotkern {
        task: u64,
        from: u32,
    }
    print "task=%llu from=%u", task, from
}

/// The TSC in nanoseconds, with the kernel's PIT calibration.
struct TscNanos;

impl Clock for TscNanos {
    fn now_ns(&self) -> u64 {
        tsc::nanos()
    }
    fn name(&self) -> &'static str {
        "x86-tsc"
    }
}

/// The CPU from the per-CPU block; every CPU is one task (pid 0, as
/// ftrace shows its idle tasks).
struct TraceCpus {
    cpus: usize,
}

// SAFETY: `current_cpu` is the running CPU's own number from its `%gs`
// block, so each ring is written only by code on its CPU: the CPU's own
// thread of control and the interrupt handlers that nest on it.
unsafe impl CpuContext for TraceCpus {
    fn current_cpu(&self) -> Option<usize> {
        cpu::current_id()
            .map(hotkern_cpuhp::CpuId::index)
            .filter(|&id| id < self.cpus)
    }
    fn cpus(&self) -> usize {
        self.cpus
    }
    fn current_pid(&self) -> i32 {
        0
    }
    fn comm(&self, _pid: i32) -> Option<String> {
        None
    }
}

/// The installed tracer, once [`init`] ran.
static TRACER: AtomicPtr<Tracer> = AtomicPtr::new(core::ptr::null_mut());

fn tracer() -> Option<&'static Tracer> {
    let tracer = TRACER.load(Ordering::Acquire);
    // SAFETY: the pointer is null or an installed tracer, which is leaked
    // and so lives for the rest of the run.
    (!tracer.is_null()).then(|| unsafe { &*tracer })
}

/// The CPUs as the tracers see them, made once.
fn context() -> &'static TraceCpus {
    static CONTEXT: spin::Once<TraceCpus> = spin::Once::new();
    CONTEXT.call_once(|| TraceCpus {
        cpus: smp::cpu_count() as usize,
    })
}

/// A second tracer instance, installed beside the run's own (ftrace's
/// `instances/NAME`), with `buffer_kb` per CPU: rings that keep old
/// events ([`Mode::ProducerConsumer`]) for a check that must see every
/// event it caused, or that overwrite them ([`Mode::Overwrite`], ftrace's
/// default) for a measurement.
pub fn instance(
    buffer_kb: usize,
    mode: Mode,
) -> Result<&'static Tracer, hotkern_trace::TraceError> {
    let config = TraceConfig { buffer_kb, mode };
    Tracer::new(config, Arc::new(TscNanos), context()).and_then(Tracer::install)
}

/// Creates and installs the tracer, one ring per CPU the MADT listed.
/// Needs the heap; returns whether tracing is on.
pub fn init() -> bool {
    let context = context();
    let config = TraceConfig {
        buffer_kb: BUFFER_KB,
        mode: Mode::Overwrite,
    };
    match Tracer::new(config, Arc::new(TscNanos), context).and_then(Tracer::install) {
        Ok(tracer) => {
            for (name, event) in [
                ("cpu_call", &cpu_call::EVENT),
                ("cpuhp_callback", &cpuhp_callback::EVENT),
                ("sched_migrate_task", &sched_migrate_task::EVENT),
            ] {
                let id = hotkern_trace::event::register(event);
                if let Err(error) = tracer.set_event_enabled(id, true) {
                    println!("hotkern: trace event {name} not enabled: {error}");
                }
            }
            TRACER.store(tracer as *const Tracer as *mut Tracer, Ordering::Release);
            println!("hotkern: trace: {}", hotkern_trace::site::status());
            true
        }
        Err(error) => {
            println!("hotkern: no trace: {error}");
            false
        }
    }
}

/// A `trace_functions=` filter and whether it matched (`Err`: why not;
/// then no function is traced).
pub type FunctionFilter = (String, Result<(), String>);

/// What `trace_functions=` asked for.
static FUNCTION_FILTER: spin::Mutex<Option<FunctionFilter>> = spin::Mutex::new(None);
/// Function call sites patched in when the function tracer was last
/// turned on.
static FUNCTIONS_PATCHED: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(0);

/// Writes `filter` to the run's `set_ftrace_filter` (ftrace's syntax:
/// globs separated by spaces, `!glob`, `glob:mod:module`): only the
/// functions it selects are patched in when [`function_tracing`] turns
/// the tracer on. A filter that selects nothing is refused, as ftrace
/// refuses it; the run then traces no function at all (rather than every
/// one, as an empty filter would), and the summary says why.
pub fn set_function_filter(filter: &str) -> Result<(), String> {
    let result = match tracer() {
        None => Err(String::from("no tracer")),
        Some(tracer) => tracer
            .set_ftrace_filter(filter, false)
            .map_err(|error| alloc::format!("{error}")),
    };
    *FUNCTION_FILTER.lock() = Some((String::from(filter), result.clone()));
    result
}

/// The function filter and its outcome, and how many function sites the
/// tracer patched in: the summary's `trace` object.
pub fn function_filter() -> (Option<FunctionFilter>, usize) {
    (
        FUNCTION_FILTER.lock().clone(),
        FUNCTIONS_PATCHED.load(Ordering::Relaxed),
    )
}

/// Turns the `function` tracer on or off: every function marked
/// `#[hotkern_trace::function]` (or those `trace_functions=` selects)
/// then records its calls (with the symbol table trace-cmd needs to name
/// them in the trace.dat).
pub fn function_tracing(on: bool) {
    let Some(tracer) = tracer() else { return };
    if matches!(*FUNCTION_FILTER.lock(), Some((_, Err(_)))) {
        return;
    }
    let kind = if on {
        TracerKind::Function
    } else {
        TracerKind::Nop
    };
    if let Err(error) = tracer.set_current_tracer(kind) {
        println!("hotkern: function tracer not set: {error}");
    }
    if on {
        let patched = hotkern_trace::site::sites()
            .iter()
            .filter(|site| {
                site.kind == hotkern_trace::site::SiteKind::Function
                    && site.form == hotkern_trace::site::Form::Jump
            })
            .count();
        FUNCTIONS_PATCHED.store(patched, Ordering::Relaxed);
    }
}

/// A `trace_marker` line on the running CPU's ring, formatted on the stack
/// (interrupt handlers call this; it takes no lock and does not allocate).
pub fn marker(args: fmt::Arguments<'_>) {
    let Some(tracer) = tracer() else { return };
    let mut text = StackText::default();
    // A line longer than the buffer is cut, as trace_marker cuts it.
    let _ = text.write_fmt(args);
    let _ = tracer.write_marker(text.as_str());
}

/// Writes a marker line on the running CPU's ring.
macro_rules! trace_marker {
    ($($arg:tt)*) => { $crate::platform::trace::marker(format_args!($($arg)*)) };
}

// Imported by path (`use crate::platform::trace::trace_marker`), as
// `println!` is.
pub(crate) use trace_marker;

/// A line of text in a fixed buffer.
struct StackText {
    bytes: [u8; 160],
    len: usize,
}

impl Default for StackText {
    fn default() -> Self {
        StackText {
            bytes: [0; 160],
            len: 0,
        }
    }
}

impl StackText {
    fn as_str(&self) -> &str {
        core::str::from_utf8(&self.bytes[..self.len]).unwrap_or("")
    }
}

impl Write for StackText {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        let room = self.bytes.len() - self.len;
        let mut take = text.len().min(room);
        while !text.is_char_boundary(take) {
            take -= 1;
        }
        self.bytes[self.len..self.len + take].copy_from_slice(&text.as_bytes()[..take]);
        self.len += take;
        if take < text.len() {
            Err(fmt::Error)
        } else {
            Ok(())
        }
    }
}

/// What was shipped: the summary's `"trace"` object.
#[derive(Clone, Copy, Debug, Default)]
pub struct Shipped {
    /// Events in the file.
    pub events: usize,
    /// Events the rings overwrote or dropped.
    pub lost: u64,
    /// Bytes of the trace.dat sent on COM2.
    pub bytes: usize,
    /// FNV-1a (64-bit) of those bytes.
    pub fnv1a64: u64,
}

/// The four figures as the members of a JSON object, without its braces:
/// the host reads them from the summary's `"trace"` object and from a
/// crash dump's closing line alike.
impl fmt::Display for Shipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "\"events\":{},\"lost\":{},\"bytes\":{},\"fnv1a64\":\"{:016x}\"",
            self.events, self.lost, self.bytes, self.fnv1a64
        )
    }
}

/// Whether the rings have gone out on COM2: they go once, at the normal
/// end ([`ship`]) or in a crash dump ([`crash_dump`]), never both (a second
/// trace.dat appended to the first would make neither readable).
static WRITTEN_OUT: AtomicU8 = AtomicU8::new(NOT_WRITTEN);
const NOT_WRITTEN: u8 = 0;
const SHIPPING: u8 = 1;
const SHIPPED: u8 = 2;
const CRASH_DUMPING: u8 = 3;

/// Stops tracing, drains every ring and sends the trace.dat on COM2.
/// The other CPUs must not trace any more (they idle).
pub fn ship() -> Option<Shipped> {
    let tracer = tracer()?;
    WRITTEN_OUT
        .compare_exchange(NOT_WRITTEN, SHIPPING, Ordering::AcqRel, Ordering::Acquire)
        .ok()?;
    let shipped = write_out(tracer, |_| {});
    WRITTEN_OUT.store(SHIPPED, Ordering::Release);
    shipped
}

/// How long a crash dump lets writers that were mid-record finish, once
/// recording is off: a record takes well under a microsecond. What is still
/// uncommitted after it is left out (the ring's commit offset says what is
/// complete), so this wait only makes the dump fuller, never correct.
const SETTLE_NS: u64 = 1_000_000;

/// The crash dump (Linux's `ftrace_dump_on_oops`): stops recording on every
/// CPU, lets writers that were mid-record finish (a bounded wait), and
/// sends the rings on COM2 as [`ship`] does. `before_sending(bytes)` runs
/// once the file is built, before its first byte goes out (the console's
/// "dump begins" line). Fails, saying why, when there is no tracer or the
/// rings already went out (or were going out when the crash came).
pub fn crash_dump(before_sending: impl FnOnce(usize)) -> Result<Shipped, &'static str> {
    let tracer = tracer().ok_or("tracing was not on")?;
    tracer.set_tracing_on(false);
    WRITTEN_OUT
        .compare_exchange(
            NOT_WRITTEN,
            CRASH_DUMPING,
            Ordering::AcqRel,
            Ordering::Acquire,
        )
        .map_err(|state| match state {
            SHIPPING => "the crash came while the trace was being written out",
            _ => "the trace was already written out",
        })?;
    let settled = tsc::nanos().saturating_add(SETTLE_NS);
    while tsc::nanos() < settled {
        core::hint::spin_loop();
    }
    write_out(tracer, before_sending).ok_or("the trace.dat could not be built")
}

/// The one implementation of writing the rings out: recording off, every
/// ring drained (the reader takes only committed records, so a writer cut
/// off mid-record leaves nothing half-written in the file), the trace.dat
/// built and sent on COM2.
fn write_out(tracer: &Tracer, before_sending: impl FnOnce(usize)) -> Option<Shipped> {
    tracer.set_tracing_on(false);
    let lost = (0..tracer.cpus()).map(|cpu| tracer.lost(cpu)).sum();
    let pages = view::drain_pages(tracer);
    let events = view::trace_data_from_pages(tracer, &pages).event_count();
    // Version 6, uncompressed: the writer's default, and all `alloc` gives.
    let bytes = write_trace_dat(&view::trace_dat(tracer, pages), &Default::default()).ok()?;
    before_sending(bytes.len());
    let mut uart = Uart::new(COM2);
    uart.init();
    for &byte in &bytes {
        uart.write_byte(byte);
    }
    Some(Shipped {
        events,
        lost,
        bytes: bytes.len(),
        fnv1a64: fnv1a64(&bytes),
    })
}

/// FNV-1a, 64 bits: the checksum the host recomputes over the file.
fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}
