//! A polled 16550 UART driver, for the console on COM1 and the run
//! trace's bytes on COM2 ([`send_on_com2`]).
//!
//! No interrupts: the kernel writes a byte once the transmit holding
//! register is empty. QEMU's UART is always ready at once, so the wait costs
//! one port read per byte.

use core::fmt;

use crate::arch::instructions::{inb, outb};

/// The first PC serial port, where QEMU's `-serial stdio` is.
pub const COM1: u16 = 0x3f8;
/// The second 16550: the trace.dat's channel to the host.
pub const COM2: u16 = 0x2f8;

const DATA: u16 = 0;
const INTERRUPT_ENABLE: u16 = 1;
const FIFO_CONTROL: u16 = 2;
const LINE_CONTROL: u16 = 3;
const MODEM_CONTROL: u16 = 4;
const LINE_STATUS: u16 = 5;
const SCRATCH: u16 = 7;

/// Divisor latch access (line control bit 7).
const DLAB: u8 = 0x80;
/// Line status: the transmit holding register is empty.
const THR_EMPTY: u8 = 0x20;

/// Line-status polls before a byte is given up: about a second on real
/// hardware (one port read is about a microsecond), where a byte at 115200
/// baud needs 87 µs; QEMU's UART is always ready.
const MAX_POLLS: u32 = 1 << 20;

/// A 16550 at an I/O port base.
pub struct Uart {
    base: u16,
    present: bool,
}

impl Uart {
    /// A UART at `base`, not yet programmed.
    pub const fn new(base: u16) -> Self {
        Uart {
            base,
            present: false,
        }
    }

    /// A handle on a UART that [`init`](Self::init) already programmed.
    pub const fn programmed(base: u16) -> Self {
        Uart {
            base,
            present: true,
        }
    }

    /// Programs 115200 baud, 8N1, FIFOs on, interrupts off. A missing UART
    /// (the scratch register does not hold a value) is remembered, and
    /// writes to it are dropped instead of waiting forever.
    pub fn init(&mut self) {
        let base = self.base;
        // SAFETY: these are the 16550's own registers at `base` (COM1 on a
        // PC); programming them affects only the serial line.
        unsafe {
            outb(base + SCRATCH, 0x5a);
            self.present = inb(base + SCRATCH) == 0x5a;
            outb(base + INTERRUPT_ENABLE, 0);
            outb(base + LINE_CONTROL, DLAB);
            outb(base + DATA, 1);
            outb(base + INTERRUPT_ENABLE, 0);
            outb(base + LINE_CONTROL, 0x03);
            outb(base + FIFO_CONTROL, 0xc7);
            outb(base + MODEM_CONTROL, 0x03);
        }
    }

    /// Sends one byte, waiting for room (a bounded wait: see [`MAX_POLLS`]).
    pub fn write_byte(&mut self, byte: u8) {
        if !self.present {
            return;
        }
        // SAFETY: reading the line status and writing the data register of
        // the UART we programmed; reading the status has no side effect.
        unsafe {
            let mut polls = 0u32;
            while inb(self.base + LINE_STATUS) & THR_EMPTY == 0 {
                polls += 1;
                if polls == MAX_POLLS {
                    // A line that never drains (a wedged device): drop
                    // this and later bytes rather than hang a crash path.
                    self.present = false;
                    return;
                }
                core::hint::spin_loop();
            }
            outb(self.base + DATA, byte);
        }
    }
}

impl fmt::Write for Uart {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        for byte in text.bytes() {
            // Terminals and log files alike expect CR LF on a serial line.
            if byte == b'\n' {
                self.write_byte(b'\r');
            }
            self.write_byte(byte);
        }
        Ok(())
    }
}

/// Sends raw bytes on COM2, programming it first. Without a second UART
/// (the scratch register test fails) or on a line that never drains, the
/// bytes are dropped: the host then sees the trace's size not match.
pub fn send_on_com2(bytes: &[u8]) {
    let mut uart = Uart::new(COM2);
    uart.init();
    for &byte in bytes {
        uart.write_byte(byte);
    }
}

/// The console's UART, as the arch contract names it: COM1.
pub type ConsoleUart = Uart;

/// The console's UART, not yet programmed (`console::init` programs it).
pub const fn console() -> ConsoleUart {
    Uart::new(COM1)
}

/// A second handle on the console's UART once programmed, for the fault
/// paths that cannot wait for the console's lock.
pub const fn console_programmed() -> ConsoleUart {
    Uart::programmed(COM1)
}

/// The run trace's channel: COM2, apart from the console.
pub fn send_trace(bytes: &[u8]) {
    send_on_com2(bytes);
}
