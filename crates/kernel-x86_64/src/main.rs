//! hotkern on bare metal: an x86-64 kernel that QEMU boots directly (PVH)
//! and that runs hotkern's subsystems on real page frames.
//!
//! The boot path, in order: [`boot`] (32-bit PVH entry to long mode), the
//! console ([`console`], COM1), then `kernel_main`.
#![no_std]
#![no_main]

mod arch;
mod boot;
mod console;
mod qemu;
mod serial;

use qemu::{exit, Exit};

/// The first Rust code: called by the entry code in [`boot`] on the boot
/// stack, with the physical address of the PVH start info.
#[no_mangle]
extern "C" fn kernel_main(start_info: u32) -> ! {
    console::init();
    println!("hotkern: x86-64 kernel, PVH start info at {start_info:#x}");
    exit(Exit::Success)
}

#[panic_handler]
fn panic(info: &core::panic::PanicInfo<'_>) -> ! {
    console::emergency(format_args!("\nhotkern: panic: {info}\n"));
    exit(Exit::Panic)
}
