//! The contract's serial ports on arm64: the PL011 is the console
//! ([`pl011`](super::pl011)). `-M virt` has one UART, so the run trace goes
//! to a host file through semihosting instead ([`send_trace`]).

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

/// The run trace's raw bytes, to the host file `trace_file=` names on the
/// command line (semihosting's `SYS_WRITE`); dropped without one.
pub fn send_trace(bytes: &[u8]) {
    let path = super::devicetree::machine().ok().and_then(|machine| {
        machine
            .bootargs
            .split_ascii_whitespace()
            .find_map(|word| word.strip_prefix("trace_file="))
    });
    super::semihosting::send_trace(path, bytes);
}
