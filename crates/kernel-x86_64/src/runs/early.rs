//! What the boot does before it starts the other CPUs: the start info on
//! the console, the failures `crash=` asks for, the hypervisor's name, the
//! IDT's breakpoint check and the tick rate `hz=` sets.

use hotkern_kernel::tick::Hz;

use crate::arch::apic;
use crate::arch::console::println;
use crate::arch::idt;
use crate::arch::instructions;
use crate::arch::pvh::{self, StartInfo};
use crate::platform::rcu;
use crate::runs::checks::Checks;

/// Prints the start info: its version, the command line, the RSDP and
/// the memory map.
pub fn print_start_info(info: &StartInfo) {
    println!(
        "hotkern: start info v{}, command line {:?}, ACPI RSDP at {:#x}, {} memory map entries",
        info.version,
        info.cmdline(),
        info.rsdp,
        info.regions().len()
    );
    for region in info.regions() {
        println!(
            "hotkern:   [{:#014x}, {:#014x}) {}",
            region.start,
            region.end,
            match region.kind {
                pvh::E820_RAM => "RAM",
                2 => "reserved",
                3 => "ACPI",
                4 => "ACPI NVS",
                _ => "other",
            }
        );
    }
}

/// The hypervisor's CPUID signature (`instructions::hypervisor`) as text:
/// `KVMKVMKVM`, `TCGTCGTCGTCG`.
pub fn hypervisor_name(signature: &Option<[u8; 12]>) -> Option<&str> {
    signature
        .as_ref()
        .and_then(|signature| core::str::from_utf8(signature).ok())
        .map(|name| name.trim_end_matches('\0'))
}

/// Checks that a breakpoint goes through the IDT and returns, unless
/// under KVM.
pub fn check_breakpoint(hypervisor: Option<&str>, checks: &mut Checks) {
    // The nested KVM of the machines hotkern is developed on (PVM) cannot
    // deliver a guest's own int3 (an "emulation failure" stops QEMU).
    if hypervisor == Some("KVMKVMKVM") {
        checks.skip("a breakpoint goes through the IDT and returns", "under KVM");
    } else {
        instructions::breakpoint();
        checks.check(
            "a breakpoint goes through the IDT and returns",
            idt::breakpoints() == 1,
        );
    }
}

/// Sets the tick's rate from `hz=` (100, 250, 300 or 1000), as Linux's
/// CONFIG_HZ: it times grace periods and timers.
pub fn set_hz(hz: &str) {
    match hz
        .parse()
        .map_err(|_| 0)
        .and_then(|hz| Hz::new(hz).map_err(|e| e.0))
    {
        Ok(hz) => {
            apic::set_hz(hz);
            rcu::set_hz(hz);
        }
        Err(_) => println!("hotkern: hz={hz}: expected 100, 250, 300 or 1000; using 1000"),
    }
}

/// Fails on purpose, as `crash=KIND` on the command line asks, so that
/// `hotkern boot` can test how it reports each way a run ends
/// (`crash=check` fails a check at the end instead).
pub fn crash_on_request(kind: &str) {
    match kind {
        "page-fault" => {
            println!("hotkern: crashing on request: {kind}");
            // 1 TiB: canonical, but outside the identity map (the only PML4
            // entry covers the first 512 GiB).
            let unmapped = 0x100_0000_0000_u64 as *const u64;
            // SAFETY: not sound on purpose: the read faults, and the page
            // fault handler ends the run before anything uses the value.
            let value = unsafe { core::ptr::read_volatile(unmapped) };
            println!("hotkern: read {value:#x} from an unmapped address");
        }
        "panic" => panic!("crash requested on the command line"),
        "hang" => {
            println!("hotkern: hanging on request");
            instructions::halt_forever()
        }
        "check" => {}
        other => println!("hotkern: unknown crash kind {other:?}, ignored"),
    }
}
