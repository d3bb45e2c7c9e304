//! A polled PL011 UART (Arm's PrimeCell UART, `-M virt`'s serial port):
//! the console's bytes.
//!
//! No interrupts: a byte is written once the transmit FIFO has room
//! (Arm's "PrimeCell UART (PL011) Technical Reference Manual", UARTFR).

use core::fmt;

/// Where `-M virt` puts its PL011 (QEMU's `hw/arm/virt.c`, `VIRT_UART`):
/// the one address used before the device tree is read, which then says
/// where the UART is.
pub const VIRT_UART: u64 = 0x0900_0000;

/// Data register.
const DATA: u64 = 0x00;
/// Flag register.
const FLAGS: u64 = 0x18;
/// Control register.
const CONTROL: u64 = 0x30;
/// UARTFR: the transmit FIFO is full.
const TRANSMIT_FULL: u32 = 1 << 5;
/// UARTCR: the UART, its transmitter and its receiver on.
const ENABLE: u32 = (1 << 0) | (1 << 8) | (1 << 9);
/// Polls of a full FIFO before a byte is given up (QEMU's is never full).
const MAX_POLLS: u32 = 1 << 20;

/// A PL011 at a physical (identity-mapped, Device memory) address.
pub struct Uart {
    base: u64,
}

impl Uart {
    /// The UART at `base`; nothing is written until [`Uart::init`].
    pub const fn new(base: u64) -> Self {
        Uart { base }
    }

    /// Turns the UART and its transmitter on (firmware may have left it
    /// off; QEMU's starts on).
    pub fn init(&mut self) {
        // SAFETY: `base` is the PL011's register block, in the boot map's
        // Device-memory GiB; UARTCR is a 32-bit register.
        unsafe { ((self.base + CONTROL) as *mut u32).write_volatile(ENABLE) };
    }

    fn send(&mut self, byte: u8) {
        for _ in 0..MAX_POLLS {
            // SAFETY: as in `init`; UARTFR reads have no side effect.
            let flags = unsafe { ((self.base + FLAGS) as *const u32).read_volatile() };
            if flags & TRANSMIT_FULL == 0 {
                break;
            }
            core::hint::spin_loop();
        }
        // SAFETY: as in `init`; a write to UARTDR queues one byte.
        unsafe { ((self.base + DATA) as *mut u32).write_volatile(u32::from(byte)) };
    }
}

impl fmt::Write for Uart {
    fn write_str(&mut self, text: &str) -> fmt::Result {
        for byte in text.bytes() {
            if byte == b'\n' {
                self.send(b'\r');
            }
            self.send(byte);
        }
        Ok(())
    }
}
