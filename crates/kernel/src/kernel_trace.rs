//! A kernel's run trace, written once for every platform: a hotkern-trace
//! [`Tracer`] with one ring per CPU, markers, the kernel's tracepoints
//! ([`events`]), the `set_ftrace_filter` / `function` tracer glue, and the
//! end of the run — the `trace.dat` (the format trace-cmd reads) sent once
//! on a byte sink with its size and FNV-1a checksum ([`Tracing::ship`]),
//! or, when the kernel crashes first, the same file as a crash dump framed
//! by console lines ([`Tracing::on_crash`], Linux's `ftrace_dump_on_oops`).
//!
//! What only the hardware can do comes from a small trait,
//! [`TracePlatform`]: the clock, the current CPU, the sink (COM2 on x86),
//! the console line writer for the crash framing, and making the heap
//! lock a bounded wait before a dump. Patching call sites stays where the
//! platform installs it (`hotkern_trace::site`'s text hook).
//!
//! The trace goes out once: at the normal end or in a crash dump, never
//! both (a second trace.dat appended to the first would make neither
//! readable). The host tells a complete file from a cut one by the size
//! and checksum the console carries, so a sink that drops bytes is seen.
//!
//! ```
//! use hotkern_kernel::kernel_trace::{TracePlatform, Tracing};
//! use std::sync::Mutex;
//!
//! struct Fake(Mutex<Vec<u8>>);
//! // SAFETY: one CPU, and only this thread traces.
//! unsafe impl TracePlatform for Fake {
//!     fn now_ns(&self) -> u64 { 0 }
//!     fn current_cpu(&self) -> Option<usize> { Some(0) }
//!     fn cpus(&self) -> usize { 1 }
//!     fn send_trace(&self, bytes: &[u8]) { self.0.lock().unwrap().extend_from_slice(bytes) }
//!     fn console_line(&self, _line: core::fmt::Arguments<'_>) {}
//! }
//!
//! static TRACING: Tracing<Fake> = Tracing::new(Fake(Mutex::new(Vec::new())), 16);
//! assert!(TRACING.start().is_ok());
//! TRACING.marker(format_args!("hello from cpu {}", 0));
//! let shipped = TRACING.ship().unwrap();
//! assert_eq!(shipped.bytes, TRACING.platform().0.lock().unwrap().len());
//! assert!(TRACING.ship().is_none(), "the trace goes out once");
//! ```

mod crash;
pub mod events;
mod text;

use alloc::string::String;
use alloc::sync::Arc;
use core::fmt::{self, Write};
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, AtomicU8, AtomicUsize, Ordering};

use hotkern_trace::control::view;
use hotkern_trace::function::TracerKind;
use hotkern_trace::platform::{Clock, CpuContext};
use hotkern_trace::ring::Mode;
use hotkern_trace::site::{Form, SiteKind};
use hotkern_trace::tracedat::write_trace_dat;
use hotkern_trace::{TraceConfig, TraceError, Tracer};

use crate::sync::Mutex;

/// What a platform gives the run trace: only what the hardware can do.
///
/// # Safety
///
/// [`current_cpu`](Self::current_cpu) must name the CPU the caller runs
/// on, so that each ring is written only by code on its own CPU (its own
/// thread of control and the interrupt handlers that nest on it): the
/// rings are lock-free on that promise.
pub unsafe trait TracePlatform: Send + Sync + 'static {
    /// The trace clock, in nanoseconds.
    fn now_ns(&self) -> u64;
    /// The clock's name in the trace.dat (`trace_clock`).
    fn clock_name(&self) -> &'static str {
        "local"
    }
    /// The running CPU's number; `None` before it has one.
    fn current_cpu(&self) -> Option<usize>;
    /// How many CPUs get a ring (asked once, when the tracer starts).
    fn cpus(&self) -> usize;
    /// Sends trace.dat bytes to the host; bytes it cannot send are dropped
    /// (the host sees the size or checksum not match), never waited on
    /// forever: a crash dump runs through here.
    fn send_trace(&self, bytes: &[u8]);
    /// The sink's name in the crash framing (`... bytes on COM2`).
    fn sink_name(&self) -> &'static str {
        "COM2"
    }
    /// Writes a console line without taking locks a crashed CPU may hold.
    fn console_line(&self, line: fmt::Arguments<'_>);
    /// Makes every later allocation wait a bounded time for the heap lock
    /// (the crashed code may hold it); called once, before a crash dump.
    fn enter_crash_mode(&self) {}
}

/// A `trace_functions=` filter and whether it matched (`Err`: why not;
/// then no function is traced).
pub type FunctionFilter = (String, Result<(), String>);

/// What was written out: the summary's `"trace"` object.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Shipped {
    /// Events in the file.
    pub events: usize,
    /// Events the rings overwrote or dropped.
    pub lost: u64,
    /// Bytes of the trace.dat handed to the sink.
    pub bytes: usize,
    /// FNV-1a (64-bit) of those bytes.
    pub fnv1a64: u64,
}

/// The four figures as the members of a JSON object, without its braces:
/// the host reads them from the summary's `"trace"` object and from a
/// crash dump's closing line alike.
///
/// ```
/// let shipped = hotkern_kernel::kernel_trace::Shipped { events: 1, lost: 0, bytes: 2, fnv1a64: 3 };
/// assert_eq!(
///     shipped.to_string(),
///     r#""events":1,"lost":0,"bytes":2,"fnv1a64":"0000000000000003""#
/// );
/// ```
impl fmt::Display for Shipped {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "\"events\":{},\"lost\":{},\"bytes\":{},\"fnv1a64\":\"{:016x}\"",
            self.events, self.lost, self.bytes, self.fnv1a64
        )
    }
}

/// Where the rings are: not written out, going out at the normal end,
/// gone out, or going out in a crash dump.
const NOT_WRITTEN: u8 = 0;
const SHIPPING: u8 = 1;
const SHIPPED: u8 = 2;
const CRASH_DUMPING: u8 = 3;

/// A platform's run trace; a kernel keeps one in a `static`.
pub struct Tracing<P> {
    platform: P,
    buffer_kb: usize,
    cpus: AtomicUsize,
    /// The installed tracer, once [`start`](Self::start) ran (leaked, so
    /// it lives for the rest of the run).
    tracer: AtomicPtr<Tracer>,
    function_filter: Mutex<Option<FunctionFilter>>,
    functions_patched: AtomicUsize,
    written_out: AtomicU8,
    /// The CPU writing the crash dump, plus one (0: no crash yet).
    crash_owner: AtomicU64,
    crash_done: AtomicBool,
    panic_inside_dump: AtomicBool,
}

impl<P: TracePlatform> Tracing<P> {
    /// A run trace over `platform`, `buffer_kb` of ring per CPU; nothing
    /// records until [`start`](Self::start).
    pub const fn new(platform: P, buffer_kb: usize) -> Self {
        Tracing {
            platform,
            buffer_kb,
            cpus: AtomicUsize::new(0),
            tracer: AtomicPtr::new(core::ptr::null_mut()),
            function_filter: Mutex::new(None),
            functions_patched: AtomicUsize::new(0),
            written_out: AtomicU8::new(NOT_WRITTEN),
            crash_owner: AtomicU64::new(0),
            crash_done: AtomicBool::new(false),
            panic_inside_dump: AtomicBool::new(false),
        }
    }

    /// The platform this trace runs over.
    pub fn platform(&self) -> &P {
        &self.platform
    }

    /// The installed tracer, once [`start`](Self::start) succeeded.
    pub fn tracer(&self) -> Option<&'static Tracer> {
        let tracer = self.tracer.load(Ordering::Acquire);
        // SAFETY: the pointer is null or an installed tracer, which is
        // leaked and so lives for the rest of the program.
        (!tracer.is_null()).then(|| unsafe { &*tracer })
    }

    /// Creates and installs the run's tracer (overwriting rings, as
    /// ftrace's default) with the kernel's [`events`] on. Needs the heap.
    pub fn start(&'static self) -> Result<&'static Tracer, TraceError> {
        let tracer = self.instance(self.buffer_kb, Mode::Overwrite)?;
        for (name, event) in events::ALL {
            let id = hotkern_trace::event::register(event);
            if let Err(error) = tracer.set_event_enabled(id, true) {
                self.platform.console_line(format_args!(
                    "hotkern: trace event {name} not enabled: {error}\n"
                ));
            }
        }
        self.tracer
            .store(tracer as *const Tracer as *mut Tracer, Ordering::Release);
        Ok(tracer)
    }

    /// A further tracer instance beside the run's own (ftrace's
    /// `instances/NAME`), `buffer_kb` per CPU, keeping old events
    /// ([`Mode::ProducerConsumer`]) or overwriting them ([`Mode::Overwrite`]).
    pub fn instance(
        &'static self,
        buffer_kb: usize,
        mode: Mode,
    ) -> Result<&'static Tracer, TraceError> {
        if self.cpus.load(Ordering::Acquire) == 0 {
            self.cpus.store(self.platform.cpus(), Ordering::Release);
        }
        let clock = Arc::new(PlatformClock(self));
        Tracer::new(TraceConfig { buffer_kb, mode }, clock, self).and_then(Tracer::install)
    }

    /// A `trace_marker` line on the running CPU's ring, formatted on the
    /// stack (interrupt handlers call this: no lock, no allocation). A
    /// line longer than 160 bytes is cut, as `trace_marker` cuts it.
    pub fn marker(&self, args: fmt::Arguments<'_>) {
        let Some(tracer) = self.tracer() else { return };
        let mut line = text::StackText::default();
        let _ = line.write_fmt(args);
        let _ = tracer.write_marker(line.as_str());
    }

    /// Writes `filter` to the run's `set_ftrace_filter` (ftrace's syntax:
    /// globs separated by spaces, `!glob`, `glob:mod:module`): only the
    /// functions it selects are patched in by [`function_tracing`](Self::function_tracing).
    /// A filter that selects nothing is refused, as ftrace refuses it; the
    /// run then traces no function at all (rather than every one, as an
    /// empty filter would), and [`function_filter`](Self::function_filter) says why.
    pub fn set_function_filter(&self, filter: &str) -> Result<(), String> {
        let result = match self.tracer() {
            None => Err(String::from("no tracer")),
            Some(tracer) => tracer
                .set_ftrace_filter(filter, false)
                .map_err(|error| alloc::format!("{error}")),
        };
        *self.function_filter.lock() = Some((String::from(filter), result.clone()));
        result
    }

    /// The function filter and its outcome, and how many function sites
    /// were patched in: the summary's `trace` object.
    pub fn function_filter(&self) -> (Option<FunctionFilter>, usize) {
        (
            self.function_filter.lock().clone(),
            self.functions_patched.load(Ordering::Relaxed),
        )
    }

    /// Turns the `function` tracer on or off: every function marked
    /// `#[hotkern_trace::function]` (or those the filter selects) then
    /// records its calls. A refused filter keeps it off.
    pub fn function_tracing(&self, on: bool) {
        let Some(tracer) = self.tracer() else { return };
        if matches!(*self.function_filter.lock(), Some((_, Err(_)))) {
            return;
        }
        let kind = if on {
            TracerKind::Function
        } else {
            TracerKind::Nop
        };
        if let Err(error) = tracer.set_current_tracer(kind) {
            self.platform
                .console_line(format_args!("hotkern: function tracer not set: {error}\n"));
        }
        if on {
            let patched = hotkern_trace::site::sites()
                .iter()
                .filter(|site| site.kind == SiteKind::Function && site.form == Form::Jump)
                .count();
            self.functions_patched.store(patched, Ordering::Relaxed);
        }
    }

    /// Stops tracing, drains every ring and sends the trace.dat on the
    /// sink, once: `None` without a tracer or when the rings already went
    /// out (or are going out in a crash dump). The other CPUs must not
    /// trace any more.
    pub fn ship(&self) -> Option<Shipped> {
        let tracer = self.tracer()?;
        self.written_out
            .compare_exchange(NOT_WRITTEN, SHIPPING, Ordering::AcqRel, Ordering::Acquire)
            .ok()?;
        let shipped = self.write_out(tracer, |_| {});
        self.written_out.store(SHIPPED, Ordering::Release);
        shipped
    }

    /// The one implementation of writing the rings out: recording off,
    /// every ring drained (the reader takes only committed records, so a
    /// writer cut off mid-record leaves nothing half-written in the file),
    /// the trace.dat built, `before_sending(size)` told, the bytes sent.
    fn write_out(&self, tracer: &Tracer, before_sending: impl FnOnce(usize)) -> Option<Shipped> {
        tracer.set_tracing_on(false);
        let lost = (0..tracer.cpus()).map(|cpu| tracer.lost(cpu)).sum();
        let pages = view::drain_pages(tracer);
        let events = view::trace_data_from_pages(tracer, &pages).event_count();
        // Version 6, uncompressed: the writer's default, and all `alloc` gives.
        let bytes = write_trace_dat(&view::trace_dat(tracer, pages), &Default::default()).ok()?;
        before_sending(bytes.len());
        self.platform.send_trace(&bytes);
        Some(Shipped {
            events,
            lost,
            bytes: bytes.len(),
            fnv1a64: fnv1a64(&bytes),
        })
    }
}

/// The platform's clock, as the tracer takes it.
struct PlatformClock<P: 'static>(&'static Tracing<P>);

impl<P: TracePlatform> Clock for PlatformClock<P> {
    fn now_ns(&self) -> u64 {
        self.0.platform.now_ns()
    }
    fn name(&self) -> &'static str {
        self.0.platform.clock_name()
    }
}

// SAFETY: `current_cpu` is the platform's, which `TracePlatform`'s
// contract makes the running CPU; numbers past the rings are refused.
unsafe impl<P: TracePlatform> CpuContext for Tracing<P> {
    fn current_cpu(&self) -> Option<usize> {
        let cpus = self.cpus.load(Ordering::Acquire);
        self.platform.current_cpu().filter(|&cpu| cpu < cpus)
    }
    fn cpus(&self) -> usize {
        self.cpus.load(Ordering::Acquire)
    }
    /// Every CPU is one task, pid 0, as ftrace shows its idle tasks.
    fn current_pid(&self) -> i32 {
        0
    }
    fn comm(&self, _pid: i32) -> Option<String> {
        None
    }
}

/// FNV-1a, 64 bits: the checksum the host recomputes over the file.
///
/// ```
/// use hotkern_kernel::kernel_trace::fnv1a64;
/// assert_eq!(fnv1a64(b""), 0xcbf2_9ce4_8422_2325);
/// assert_eq!(fnv1a64(b"a"), 0xaf63_dc4c_8601_ec8c);
/// ```
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
pub(crate) mod tests;
