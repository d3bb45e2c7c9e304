//! The contract's serial ports on arm64: the PL011 is the console
//! ([`pl011`](super::pl011)). `-M virt` has one UART, so the run trace has
//! no channel of its own yet: [`send_trace`] drops its bytes.

use super::pl011::{Uart, VIRT_UART};

/// The console's UART type.
pub type ConsoleUart = Uart;

/// The console UART, not yet programmed.
pub const fn console() -> ConsoleUart {
    Uart::new(VIRT_UART)
}

/// A second handle on the console UART, for the fault path.
pub const fn console_programmed() -> ConsoleUart {
    Uart::new(VIRT_UART)
}

/// The run trace's raw bytes: no second UART on `-M virt`, so none are
/// sent (the summary says the trace shipped nothing).
pub fn send_trace(_bytes: &[u8]) {}
