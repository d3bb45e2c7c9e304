//! The kernel console, shared by every architecture: the arch's console
//! UART ([`serial::ConsoleUart`]: COM1 on
//! x86-64, the PL011 on aarch64) behind a lock, the `println!` macro, and
//! the run trace's raw channel ([`send_trace`]).
//!
//! The fault paths (exceptions, panics) write through [`emergency`], which
//! waits only a bounded time for the lock: the CPU that faulted may hold
//! it, and the kernel stops right after.

use core::fmt::{self, Write};

use spin::Mutex;

use crate::arch::serial::{self, ConsoleUart};

static CONSOLE: Mutex<ConsoleUart> = Mutex::new(serial::console());

/// Tries of the console lock before [`emergency`] writes without it.
const EMERGENCY_LOCK_TRIES: u32 = 1 << 20;

/// Programs the UART; call once, before the first `println!`.
pub fn init() {
    CONSOLE.lock().init();
}

/// Writes formatted text to the console (what `println!` expands to).
pub fn print(args: fmt::Arguments<'_>) {
    // Writing to the UART cannot fail; `Uart::write_str` always returns Ok.
    let _ = CONSOLE.lock().write_fmt(args);
}

/// Writes formatted text without the console lock, for the fault paths.
pub fn emergency(args: fmt::Arguments<'_>) {
    // A bounded wait: CPUs that crash together then print their reports
    // one after the other, not mixed character by character; a holder
    // that never lets go (the CPU that crashed in `print`) costs a few
    // milliseconds per report.
    for _ in 0..EMERGENCY_LOCK_TRIES {
        if let Some(mut console) = CONSOLE.try_lock() {
            let _ = console.write_fmt(args);
            return;
        }
        core::hint::spin_loop();
    }
    // The lock is held, maybe by the code that faulted: a second handle on
    // the UART. Its registers keep no per-writer state, so interleaving with
    // the holder can only mix characters, never wedge the line.
    let _ = serial::console_programmed().write_fmt(args);
}

/// Sends raw bytes on the run trace's channel to the host (COM2 on
/// x86-64), apart from the console's text.
pub fn send_trace(bytes: &[u8]) {
    serial::send_trace(bytes);
}

/// Prints to the console, with a newline.
macro_rules! println {
    () => { $crate::arch::console::print(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::arch::console::print(format_args!("{}\n", format_args!($($arg)*))) };
}

// A path every layer imports (`use crate::arch::console::println`) instead
// of `#[macro_export]`, which would put the macro at the crate root.
pub(crate) use println;
