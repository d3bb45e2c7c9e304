//! hotkern on bare metal: an x86-64 kernel that QEMU boots directly (PVH)
//! and that runs hotkern's subsystems on real page frames.
//!
//! The boot path, in order: [`boot`] (32-bit PVH entry to long mode), the
//! console ([`console`], COM1), the start info ([`pvh`]), the CPU's own
//! descriptor tables ([`cpu`], [`idt`]), then `kernel_main`.
#![no_std]
#![no_main]

mod arch;
mod boot;
mod console;
mod cpu;
mod idt;
mod panic;
mod pvh;
mod qemu;
mod serial;

use qemu::{exit, Exit};

/// The first Rust code: called by the entry code in [`boot`] on the boot
/// stack, with the physical address of the PVH start info.
#[no_mangle]
extern "C" fn kernel_main(start_info: u32) -> ! {
    console::init();
    println!("hotkern: x86-64 kernel, PVH start info at {start_info:#x}");
    // SAFETY: the boot CPU, once, interrupts off (the PVH entry state).
    unsafe { cpu::init(0) };
    idt::init();
    idt::load();
    // SAFETY: the address came from %ebx at the PVH entry, and nothing has
    // allocated memory yet.
    let info = match unsafe { pvh::StartInfo::read(u64::from(start_info)) } {
        Ok(info) => info,
        Err(error) => panic!("PVH start info: {error}"),
    };
    println!(
        "hotkern: start info v{}, command line {:?}, {} memory map entries",
        info.version,
        info.cmdline(),
        info.regions().len()
    );
    for region in info.regions() {
        println!(
            "hotkern:   [{:#014x}, {:#014x}) type {}",
            region.start, region.end, region.kind
        );
    }
    arch::breakpoint();
    println!(
        "hotkern: exceptions: {} breakpoint(s) taken and returned",
        idt::breakpoints()
    );
    if let Some(crash) = info.option("crash") {
        crash_on_request(crash);
    }
    exit(Exit::Success)
}

/// Fails on purpose, as `crash=KIND` on the command line asks, so that
/// `hotkern boot` can test how it reports each way a run ends.
fn crash_on_request(kind: &str) {
    println!("hotkern: crashing on request: {kind}");
    match kind {
        "page-fault" => {
            // 1 TiB: canonical, but outside the identity map (the only PML4
            // entry covers the first 512 GiB).
            let unmapped = 0x100_0000_0000_u64 as *const u64;
            // SAFETY: not sound on purpose: the read faults, and the page
            // fault handler ends the run before anything uses the value.
            let value = unsafe { core::ptr::read_volatile(unmapped) };
            println!("hotkern: read {value:#x} from an unmapped address");
        }
        "panic" => panic!("crash requested on the command line"),
        "hang" => arch::halt_forever(),
        other => println!("hotkern: unknown crash kind {other:?}, ignored"),
    }
}
