//! What the kernel does when it crashes (a panic or a fatal CPU exception),
//! after printing why and before QEMU exits: the trace's crash dump, as
//! Linux's `ftrace_dump_on_oops` writes the ftrace buffers from its oops
//! and panic paths.
//!
//! In order, on the first CPU to crash:
//!
//! 1. it claims the dump ([`OWNER`]); a CPU that crashes later waits (a
//!    bounded time) for that dump to finish, and a second crash on the
//!    claiming CPU itself (inside the dump) abandons the dump at once;
//! 2. the heap lock becomes a bounded wait (the crashed code may hold it);
//! 3. recording stops on every CPU, writers that were mid-record get a
//!    millisecond to commit, and what is committed is written out on COM2
//!    by the same code as at the normal end ([`trace::crash_dump`]);
//! 4. the console frames the dump: `hotkern: crash dump begins: N bytes`
//!    before its first byte, `hotkern: crash dump {json}` (events, lost,
//!    bytes, FNV-1a) after its last, or `hotkern: crash dump skipped:
//!    REASON` instead. `hotkern boot` takes a begin line without its end
//!    line, or bytes that do not match it, as a dump cut short.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::arch::console::emergency;
use crate::arch::{cpu, heap, tsc};
use crate::platform::trace;

/// The CPU writing the crash dump, plus one (0: no crash yet). A CPU
/// number, not a flag, so that a crash inside the dump is told apart from
/// a crash on another CPU.
static OWNER: AtomicU64 = AtomicU64::new(0);
/// Set when the owner is done (dump written, skipped or failed).
static DONE: AtomicBool = AtomicBool::new(false);

/// Set by `crash=dump-panic`: the dump panics once it has begun, to test
/// the second-crash guard.
static PANIC_INSIDE_DUMP: AtomicBool = AtomicBool::new(false);

/// Makes the next crash dump panic right after its begin line
/// (`crash=dump-panic`): the run must still end, reporting the dump as
/// abandoned, not recurse or hang.
pub fn panic_inside_dump() {
    PANIC_INSIDE_DUMP.store(true, Ordering::Release);
}

/// The owner value of a CPU that has no per-CPU block yet (a crash before
/// `cpu::init`): only the boot CPU runs then.
const EARLY_CPU: u64 = u64::MAX - 1;

/// How long a CPU that crashed second waits for the first one's dump
/// before ending the run itself: a dump of every ring (a few hundred KiB)
/// takes well under a second through QEMU's UART, even under TCG.
const OTHER_DUMP_WAIT_NS: u64 = 20_000_000_000;

/// Writes the crash dump (see the module documentation); returns when the
/// run may end. Runs on the crashing CPU, in the panic handler or the
/// exception handler, after the crash's own report.
pub fn on_crash() {
    let me = cpu::current_id().map_or(EARLY_CPU, |cpu| u64::from(cpu.0)) + 1;
    match OWNER.compare_exchange(0, me, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => {}
        Err(owner) if owner == me => {
            // A crash inside the dump: writing it again would crash again.
            emergency(format_args!(
                "hotkern: crash dump abandoned: a second crash while writing it\n"
            ));
            return;
        }
        Err(_) => {
            wait_for_other_dump();
            return;
        }
    }
    heap::enter_crash_mode();
    let dumped = trace::crash_dump(|bytes| {
        emergency(format_args!(
            "hotkern: crash dump begins: {bytes} bytes on COM2\n"
        ));
        if PANIC_INSIDE_DUMP.load(Ordering::Acquire) {
            panic!("a panic inside the crash dump, on request (crash=dump-panic)");
        }
    });
    match dumped {
        Ok(shipped) => emergency(format_args!("hotkern: crash dump {{{shipped}}}\n")),
        Err(reason) => emergency(format_args!("hotkern: crash dump skipped: {reason}\n")),
    }
    DONE.store(true, Ordering::Release);
}

/// Waits, a bounded time, for the CPU that crashed first to finish its
/// dump (it ends the run then; ending it here first would cut the dump).
fn wait_for_other_dump() {
    // Before calibration `nanos` counts TSC ticks: the wait is then a few
    // times shorter, still bounded.
    let deadline = tsc::nanos().saturating_add(OTHER_DUMP_WAIT_NS);
    while !DONE.load(Ordering::Acquire) && tsc::nanos() < deadline {
        core::hint::spin_loop();
    }
}
