//! The panic handler: print the message and where it came from, then end
//! the QEMU run with [`Exit::Panic`].

use core::panic::PanicInfo;

use crate::console::emergency;
use crate::cpu;
use crate::qemu::{exit, Exit};

#[panic_handler]
fn panic(info: &PanicInfo<'_>) -> ! {
    let cpu = cpu::current_id().map_or(-1, i64::from);
    match info.location() {
        Some(location) => emergency(format_args!(
            "\nhotkern: panic on cpu {cpu} at {}:{}:{}: {}\n",
            location.file(),
            location.line(),
            location.column(),
            info.message()
        )),
        None => emergency(format_args!(
            "\nhotkern: panic on cpu {cpu}: {}\n",
            info.message()
        )),
    }
    exit(Exit::Panic)
}
