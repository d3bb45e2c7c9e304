//! The kernel console: the PL011 behind a lock, and the `println!` macro,
//! the same two entries as x86-64's (`println!` and [`emergency`]).
//!
//! The fault paths (exceptions, panics) write through [`emergency`], which
//! waits only a bounded time for the lock: the CPU that faulted may hold
//! it, and the kernel stops right after.

use core::fmt::{self, Write};

use spin::Mutex;

use crate::arch::pl011::{Uart, VIRT_UART};

static CONSOLE: Mutex<Uart> = Mutex::new(Uart::new(VIRT_UART));

/// Tries of the console lock before [`emergency`] writes without it.
const EMERGENCY_LOCK_TRIES: u32 = 1 << 20;

/// Programs the UART at `base`; call once before the first `println!`
/// (with [`VIRT_UART`]) and again if the device tree names another.
pub fn init(base: u64) {
    let mut console = CONSOLE.lock();
    *console = Uart::new(base);
    console.init();
}

/// Writes formatted text to the console (what `println!` expands to).
pub fn print(args: fmt::Arguments<'_>) {
    // Writing to the UART cannot fail; `Uart::write_str` always returns Ok.
    let _ = CONSOLE.lock().write_fmt(args);
}

/// Writes formatted text without the console lock, for the fault paths.
pub fn emergency(args: fmt::Arguments<'_>) {
    // A bounded wait, as on x86-64: reports of CPUs that crash together
    // come one after the other rather than mixed.
    for _ in 0..EMERGENCY_LOCK_TRIES {
        if let Some(mut console) = CONSOLE.try_lock() {
            let _ = console.write_fmt(args);
            return;
        }
        core::hint::spin_loop();
    }
    // The holder may be the code that faulted: a second handle on the
    // same registers, which keep no per-writer state.
    let base = VIRT_UART;
    let _ = Uart::new(base).write_fmt(args);
}

/// Prints to the console, with a newline.
macro_rules! println {
    () => { $crate::arch::console::print(format_args!("\n")) };
    ($($arg:tt)*) => { $crate::arch::console::print(format_args!("{}\n", format_args!($($arg)*))) };
}

// A path every layer imports (`use crate::arch::console::println`) instead
// of `#[macro_export]`, which would put the macro at the crate root.
pub(crate) use println;
