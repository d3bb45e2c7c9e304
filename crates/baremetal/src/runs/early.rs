//! What the boot does early: the failures `crash=` asks for (once
//! tracing is on), the hypervisor's name, the exception table's
//! breakpoint check and the tick rate `hz=` sets.

use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use hotkern_kernel::tick::Hz;

use crate::arch::console::println;
use crate::arch::{clock, cpu, interrupts, smp, tick};
use crate::platform::trace::{trace_marker, TRACING};
use crate::platform::Kernel;
use crate::runs::checks::Checks;

/// The hypervisor's CPUID signature (`arch::cpu::hypervisor`) as text:
/// `KVMKVMKVM`, `TCGTCGTCGTCG`.
pub fn hypervisor_name(signature: &Option<[u8; 12]>) -> Option<&str> {
    signature
        .as_ref()
        .and_then(|signature| core::str::from_utf8(signature).ok())
        .map(|name| name.trim_end_matches('\0'))
}

/// Checks that a breakpoint goes through the exception table and
/// returns, unless under KVM.
pub fn check_breakpoint(hypervisor: Option<&str>, checks: &mut Checks) {
    // The nested KVM of the machines hotkern is developed on (PVM) cannot
    // deliver a guest's own int3 (an "emulation failure" stops QEMU).
    if hypervisor == Some("KVMKVMKVM") {
        checks.skip("a breakpoint goes through the IDT and returns", "under KVM");
    } else {
        interrupts::breakpoint();
        checks.check(
            "a breakpoint goes through the IDT and returns",
            interrupts::breakpoints() == 1,
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
            tick::set_hz(hz);
            Kernel::rcu().set_hz(hz);
        }
        Err(_) => println!("hotkern: hz={hz}: expected 100, 250, 300 or 1000; using 1000"),
    }
}

/// Fails on purpose, as `crash=KIND` on the command line asks, so that
/// `hotkern boot` can test how it reports each way a run ends, and the
/// crash dump it gets (`crash=check` fails a check at the end instead).
/// Runs once the tracer is on, after the boot's first markers.
/// `panic-all` panics on every CPU at once, to test the dump's claim;
/// `dump-panic` panics again inside the dump, to test its guard.
pub fn crash_on_request(kind: &str) {
    // The last event on this CPU's ring before the crash: the crash dump
    // must end with it (crates/cli/tests/boot_crash_dump.rs).
    trace_marker!("crash requested: {kind}");
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
        "panic-all" => panic_on_every_cpu(),
        "dump-panic" => {
            TRACING.panic_inside_dump();
            panic!("crash requested on the command line, with a panic inside the dump")
        }
        "hang" => {
            println!("hotkern: hanging on request");
            interrupts::halt_forever()
        }
        "check" => {}
        other => println!("hotkern: unknown crash kind {other:?}, ignored"),
    }
}

/// Application processors that wrote their marker and wait to panic.
static READY_TO_PANIC: AtomicU32 = AtomicU32::new(0);
/// Set by the boot CPU: every CPU panics now.
static PANIC_NOW: AtomicBool = AtomicBool::new(false);
/// The longest the CPUs wait for each other before panicking anyway.
const PANIC_ALL_WAIT_NS: u64 = 1_000_000_000;

/// `crash=panic-all`: every application processor writes a marker on its
/// own ring and waits; once all have, every CPU panics together, so that
/// several crash at once (only one may write the dump).
fn panic_on_every_cpu() -> ! {
    let processors = smp::application_processors().count() as u32;
    for processor in smp::application_processors() {
        // The call never returns: it is never finished, and its CPU's
        // mailbox is not used again.
        let _posted = smp::post(processor, panic_here, 0);
    }
    let deadline = clock::nanos().saturating_add(PANIC_ALL_WAIT_NS);
    while READY_TO_PANIC.load(Ordering::Acquire) < processors && clock::nanos() < deadline {
        core::hint::spin_loop();
    }
    PANIC_NOW.store(true, Ordering::Release);
    panic!("crash requested on the command line, on every CPU at once")
}

/// An application processor's part of `crash=panic-all` (a cross-CPU call).
fn panic_here(_: u64) -> u64 {
    let me = cpu::current_id().map_or(u32::MAX, |cpu| cpu.0);
    trace_marker!("crash requested: panic-all on cpu {me}");
    READY_TO_PANIC.fetch_add(1, Ordering::AcqRel);
    let deadline = clock::nanos().saturating_add(PANIC_ALL_WAIT_NS);
    while !PANIC_NOW.load(Ordering::Acquire) && clock::nanos() < deadline {
        core::hint::spin_loop();
    }
    panic!("crash requested on the command line, on every CPU at once")
}
