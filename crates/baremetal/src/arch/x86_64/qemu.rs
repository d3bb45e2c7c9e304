//! Leaving QEMU with a status: the `isa-debug-exit` device.
//!
//! `-device isa-debug-exit,iobase=0xf4,iosize=0x04` makes a write of `v` to
//! port 0xf4 end QEMU with exit status `(v << 1) | 1`.

pub use crate::arch::exit_code::Exit;
use crate::arch::instructions::{halt_forever, outl};

/// The port of QEMU's `isa-debug-exit` device.
pub const DEBUG_EXIT_PORT: u16 = 0xf4;

/// Ends the QEMU run with `status`. Without the exit device (another
/// machine, another hypervisor) the CPU halts instead.
pub fn exit(status: Exit) -> ! {
    // SAFETY: port 0xf4 is the debug-exit device QEMU is started with; on a
    // machine without it, a write to an unclaimed ISA port is ignored.
    unsafe { outl(DEBUG_EXIT_PORT, status as u32) };
    halt_forever()
}
