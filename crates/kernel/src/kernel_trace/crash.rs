//! What a kernel does with its trace when it crashes (a panic or a fatal
//! CPU exception), after printing why and before it ends the run: the
//! crash dump, as Linux's `ftrace_dump_on_oops` writes the ftrace buffers
//! from its oops and panic paths.
//!
//! In order, on the first CPU to crash:
//!
//! 1. it claims the dump; a CPU that crashes later waits (a bounded time)
//!    for that dump to finish, and a second crash on the claiming CPU
//!    itself (inside the dump) abandons the dump at once;
//! 2. the heap lock becomes a bounded wait (the crashed code may hold it);
//! 3. recording stops on every CPU, writers that were mid-record get a
//!    millisecond to commit, and what is committed is written out on the
//!    sink by the same code as at the normal end ([`Tracing::ship`]);
//! 4. the console frames the dump: `hotkern: crash dump begins: N bytes on
//!    SINK` before its first byte, `hotkern: crash dump {json}` (events,
//!    lost, bytes, FNV-1a) after its last, or `hotkern: crash dump skipped:
//!    REASON` instead. `hotkern boot` takes a begin line without its end
//!    line, or bytes that do not match it, as a dump cut short.

use core::sync::atomic::Ordering;

use super::{Shipped, TracePlatform, Tracing, CRASH_DUMPING, NOT_WRITTEN, SHIPPING};

/// The owner value of a CPU that has no number yet (a crash before the
/// per-CPU block): only the boot CPU runs then.
const EARLY_CPU: u64 = u64::MAX - 1;

/// How long a CPU that crashed second waits for the first one's dump
/// before ending the run itself: a dump of every ring (a few hundred KiB)
/// takes well under a second through QEMU's UART, even under TCG.
const OTHER_DUMP_WAIT_NS: u64 = 20_000_000_000;

/// How long a crash dump lets writers that were mid-record finish, once
/// recording is off: a record takes well under a microsecond. What is
/// still uncommitted after it is left out (the ring's commit offset says
/// what is complete), so this wait only makes the dump fuller, never
/// correct.
const SETTLE_NS: u64 = 1_000_000;

impl<P: TracePlatform> Tracing<P> {
    /// Makes the next crash dump panic right after its begin line
    /// (`crash=dump-panic`): the run must still end, reporting the dump as
    /// abandoned, not recurse or hang.
    pub fn panic_inside_dump(&self) {
        self.panic_inside_dump.store(true, Ordering::Release);
    }

    /// Writes the crash dump (see the module documentation); returns when
    /// the run may end. Runs on the crashing CPU, in the panic handler or
    /// the exception handler, after the crash's own report.
    pub fn on_crash(&self) {
        let me = self
            .platform
            .current_cpu()
            .map_or(EARLY_CPU, |cpu| cpu as u64)
            + 1;
        match self
            .crash_owner
            .compare_exchange(0, me, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => {}
            Err(owner) if owner == me => {
                // A crash inside the dump: writing it again would crash again.
                self.platform.console_line(format_args!(
                    "hotkern: crash dump abandoned: a second crash while writing it\n"
                ));
                return;
            }
            Err(_) => {
                self.wait_for_other_dump();
                return;
            }
        }
        self.platform.enter_crash_mode();
        let dumped = self.crash_dump(|bytes| {
            self.platform.console_line(format_args!(
                "hotkern: crash dump begins: {bytes} bytes on {}\n",
                self.platform.sink_name()
            ));
            if self.panic_inside_dump.load(Ordering::Acquire) {
                panic!("a panic inside the crash dump, on request (crash=dump-panic)");
            }
        });
        match dumped {
            Ok(shipped) => self
                .platform
                .console_line(format_args!("hotkern: crash dump {{{shipped}}}\n")),
            Err(reason) => self
                .platform
                .console_line(format_args!("hotkern: crash dump skipped: {reason}\n")),
        }
        self.crash_done.store(true, Ordering::Release);
    }

    /// Stops recording on every CPU, lets writers that were mid-record
    /// finish (a bounded wait), and writes the rings out as
    /// [`ship`](Self::ship) does. Fails, saying why, when there is no
    /// tracer or the rings already went out (or were going out).
    fn crash_dump(&self, before_sending: impl FnOnce(usize)) -> Result<Shipped, &'static str> {
        let tracer = self.tracer().ok_or("tracing was not on")?;
        tracer.set_tracing_on(false);
        self.written_out
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
        self.wait_until(|| false, SETTLE_NS);
        self.write_out(tracer, before_sending)
            .ok_or("the trace.dat could not be built")
    }

    /// Waits, a bounded time, for the CPU that crashed first to finish its
    /// dump (it ends the run then; ending it here first would cut the dump).
    fn wait_for_other_dump(&self) {
        self.wait_until(
            || self.crash_done.load(Ordering::Acquire),
            OTHER_DUMP_WAIT_NS,
        );
    }

    /// Spins until `done` or `nanos` of the platform's clock passed.
    fn wait_until(&self, done: impl Fn() -> bool, nanos: u64) {
        let deadline = self.platform.now_ns().saturating_add(nanos);
        while !done() && self.platform.now_ns() < deadline {
            core::hint::spin_loop();
        }
    }
}
