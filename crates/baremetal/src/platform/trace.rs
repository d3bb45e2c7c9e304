//! The run trace on this kernel: the shared core's (`hotkern_kernel::
//! kernel_trace`: rings, tracepoints, markers, the function filter, the
//! trace.dat shipped once or as a crash dump) over what only this
//! hardware gives it: the TSC, the CPU from its `%gs` block, COM2 for the
//! trace's bytes, the lock-free console path and the heap's bounded wait.
//! COM1 stays the console; the summary line carries the trace's size and
//! FNV-1a checksum, so `hotkern boot` can tell a complete file from a cut
//! one.

use core::fmt;

pub use hotkern_kernel::kernel_trace::events::cpu_call;
pub use hotkern_kernel::kernel_trace::Shipped;
use hotkern_kernel::kernel_trace::{TracePlatform, Tracing};

use crate::arch::{clock, console, cpu, heap, smp};

/// Ring bytes per CPU: a boot writes a few thousand events (most of them
/// hotplug callbacks and task migrations), well under this.
const BUFFER_KB: usize = 64;

/// This kernel as the run trace's platform.
pub struct KernelTrace;

// SAFETY: `current_cpu` is the running CPU's own number from its `%gs`
// block, so each ring is written only by code on its CPU.
unsafe impl TracePlatform for KernelTrace {
    fn now_ns(&self) -> u64 {
        clock::nanos()
    }
    fn clock_name(&self) -> &'static str {
        clock::TRACE_CLOCK
    }
    fn current_cpu(&self) -> Option<usize> {
        cpu::current_id().map(hotkern_cpuhp::CpuId::index)
    }
    fn cpus(&self) -> usize {
        smp::cpu_count() as usize
    }
    fn send_trace(&self, bytes: &[u8]) {
        console::send_trace(bytes);
    }
    fn console_line(&self, line: fmt::Arguments<'_>) {
        console::emergency(line);
    }
    fn enter_crash_mode(&self) {
        heap::enter_crash_mode();
    }
}

/// The run's trace; `TRACING.start()` once the heap is up.
pub static TRACING: Tracing<KernelTrace> = Tracing::new(KernelTrace, BUFFER_KB);

/// Writes a marker line on the running CPU's ring.
macro_rules! trace_marker {
    ($($arg:tt)*) => { $crate::platform::trace::TRACING.marker(format_args!($($arg)*)) };
}

// Imported by path (`use crate::platform::trace::trace_marker`), as
// `println!` is.
pub(crate) use trace_marker;
