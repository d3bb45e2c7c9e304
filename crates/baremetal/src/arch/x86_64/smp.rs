//! The other CPUs: kicking them into the trampoline (INIT-SIPI-SIPI),
//! calling a function on one of them (a fixed-vector IPI), waking one from
//! `hlt`, and the interrupt handlers all of that rests on.
//!
//! CPU numbers are the kernel's: 0 is the boot CPU, then the MADT's other
//! enabled CPUs in MADT order. Starts follow the SDM's MP initialisation
//! sequence as Linux's `arch/x86/kernel/smpboot.c` (`wakeup_secondary_cpu_via_init`)
//! does it, with the shortened waits that virtual CPUs allow: INIT, then a
//! SIPI at once, and a second SIPI only if the CPU has not answered in
//! 200 µs (a CPU already running ignores it).
//!
//! An offline CPU parks in one of two ways ([`Park`]), its tick stopped.
//! Powered off (the default, Linux's path): `cli; hlt`, which nothing but
//! INIT (or NMI, which the kernel never sends) ends, so bringing it back
//! is a fresh start through the trampoline, the same path as the first
//! one. Idle: it halts with interrupts open for the wake-up IPI alone (no
//! tick, no call: a call is posted only to a running CPU), as Linux's
//! `play_dead` leaves a CPU in its idle state, and a start is one IPI
//! ([`is_parked_idle`]): its stack, per-CPU area, IDT and local APIC are
//! as it left them.
//!
//! The handshake around a start and a stop (who writes which state, who
//! wakes whom) is the shared kernel's [`Lifecycle`](hotkern_kernel::power::Lifecycle), whose words live here
//! ([`LIVES`]) because the calls read them; the platform moves them
//! (`crate::platform::power`) and gives [`kick`] the entry a started CPU
//! runs, so this layer knows nothing of the CPU loop above it.

use core::arch::asm;

use hotkern_cpuhp::CpuId;
use hotkern_kernel::rcu::Activity;

use crate::arch::apic;
use crate::arch::cpu;
pub use crate::arch::cpu_states::{Park, SmpError};
use crate::arch::instructions;
#[allow(unused_imports)] // The contract's name; nothing above reads it yet.
pub use crate::arch::processors::park;
use crate::arch::processors::{self, Signals};
pub use crate::arch::processors::{
    application_processors, cpu_count, cpus, is_parked_idle, is_running, online, set_park, starts,
    Posted, LIVES, RUNG, TIMEOUT_US,
};
use crate::arch::trampoline;
use crate::arch::tsc;

/// CPU 0: the boot CPU, which runs the runs and never goes offline.
pub const BOOT_CPU: CpuId = CpuId(0);

/// A start waits this long for the first SIPI to take.
pub const SECOND_SIPI_US: u64 = 200;

/// When a start not yet answered gets its second signal (the contract's
/// name for the SDM's second SIPI).
pub const KICK_AGAIN_AFTER_US: Option<u64> = Some(SECOND_SIPI_US);

/// x86-64's operations under the shared CPU bookkeeping
/// ([`crate::arch::processors`]): fixed IPIs through the local APIC,
/// `sti; hlt; cli`, the TSC.
pub struct Apic;

impl Signals for Apic {
    fn send_call(cpu: CpuId) {
        apic::send_fixed(apic_id(cpu), apic::CALL_VECTOR);
    }

    fn send_wake(cpu: CpuId) {
        apic::send_fixed(apic_id(cpu), apic::WAKE_VECTOR);
    }

    fn halt_once() {
        // SAFETY: `sti; hlt` opens interrupts only for the halt (the
        // `sti` shadow): a wake-up sent after the caller's check is taken
        // by the halt, not before it; `cli` closes them again. Handlers
        // that can run here take no lock (the wake-up only acknowledges,
        // the tick counts).
        unsafe { asm!("sti", "hlt", "cli", options(nomem, nostack)) };
    }

    fn without_interrupts<R>(section: impl FnOnce() -> R) -> R {
        instructions::without_interrupts(section)
    }

    fn nanos() -> u64 {
        tsc::nanos()
    }

    fn current_id() -> Option<CpuId> {
        cpu::current_id()
    }

    fn enter_activity(cpu: CpuId, activity: Activity) -> Activity {
        cpu::enter_activity(cpu, activity)
    }

    fn power_off(_cpu: CpuId) -> ! {
        loop {
            // SAFETY: parks this CPU with interrupts off; only INIT (a new
            // start) takes it out.
            unsafe { asm!("cli", "hlt", options(nomem, nostack)) };
        }
    }

    fn leave_idle_park() {
        // Call sites patched while this CPU was parked were not synced
        // here (`crate::arch::text` syncs only running CPUs): serialise
        // before running them, as the wake-up's `iretq` already did.
        instructions::serialize();
    }
}

/// Parks the calling CPU, which has left its loop, the way [`park`] says
/// (powered off: `cli; hlt`, which only INIT ends).
pub fn park_here(cpu: CpuId, report_dead: impl FnOnce(), started: impl Fn() -> bool) {
    processors::park_here::<Apic>(cpu, report_dead, started);
}

/// Records the CPUs: the boot CPU (the caller) as CPU 0, then every other
/// APIC id of `apic_ids`. Returns how many CPUs there are.
pub fn register(apic_ids: &[u32]) -> u32 {
    let others = apic_ids.iter().map(|&id| u64::from(id));
    processors::register(u64::from(apic::id()), others)
}

/// CPU `cpu`'s APIC id.
pub fn apic_id(cpu: CpuId) -> u32 {
    processors::hardware_id(cpu) as u32
}

/// Runs `function(arg)` on CPU `cpu` from its IPI handler and returns the
/// result.
pub fn call(cpu: CpuId, function: fn(u64) -> u64, arg: u64) -> Result<u64, SmpError> {
    processors::call::<Apic>(cpu, function, arg)
}

/// Asks CPU `cpu` to run `function(arg)` from its IPI handler and returns
/// at once; [`finish`] waits for it.
pub fn post(cpu: CpuId, function: fn(u64) -> u64, arg: u64) -> Result<Posted, SmpError> {
    processors::post::<Apic>(cpu, function, arg)
}

/// Waits (halted, woken by the callee) until a posted call has run.
pub fn finish(call: Posted) -> Result<u64, SmpError> {
    processors::finish::<Apic>(call)
}

/// Wakes CPU `cpu` from `hlt`; nothing happens to one not running.
pub fn wake(cpu: CpuId) {
    processors::wake::<Apic>(cpu);
}

/// Marks a wake-up for CPU `cpu` and sends its IPI, whatever its state
/// (the shared core's `Lifecycle` wakes a CPU it asked to leave).
pub fn ring(cpu: CpuId) {
    processors::ring::<Apic>(cpu);
}

/// Halts until `condition` holds or the TSC passes `deadline_ns`.
pub fn halt_until(condition: &dyn Fn() -> bool, deadline_ns: u64) -> bool {
    processors::halt_until::<Apic>(condition, deadline_ns)
}

/// Runs the call in the running CPU's mailbox, if there is a new one.
fn run_call() {
    if let Some(cpu) = cpu::current_id() {
        processors::run_call::<Apic>(cpu);
    }
}

/// Every interrupt below the exceptions' range comes here (from
/// [`crate::arch::idt`]).
pub fn interrupt(vector: u8) {
    match vector {
        apic::TIMER_VECTOR => apic::tick(cpu::current_id().unwrap_or(CpuId(0))),
        apic::CALL_VECTOR => {
            run_call();
            apic::eoi();
        }
        apic::WAKE_VECTOR => apic::eoi(),
        // Spurious: no EOI (SDM: the APIC did not set an ISR bit).
        _ => {}
    }
}

/// Enables interrupts on the calling CPU.
pub fn enable_interrupts() {
    // SAFETY: the IDT is loaded and has gates for every vector the local
    // APIC may deliver (tick, call, spurious); the handlers take no lock.
    unsafe { asm!("sti", options(nomem, nostack)) };
}

/// Sends CPU `cpu` (dead: parked or never started) INIT and SIPI into the
/// trampoline, which brings it to `entry(cpu)` on its own stack in long
/// mode.
pub fn kick(cpu: CpuId, entry: extern "C" fn(u64) -> !) {
    let index = cpu.index();
    let stack_top = processors::stack_top(cpu);
    // SAFETY: only the boot CPU starts CPUs, and `cpu` is dead: it is
    // parked (or never ran), so nothing reads its row; the CPUs
    // starting beside it read only their own rows.
    unsafe { trampoline::install(index, apic_id(cpu), stack_top, entry, u64::from(cpu.0)) };
    apic::send_init(apic_id(cpu));
    apic::send_startup(apic_id(cpu), (trampoline::BASE >> 12) as u8);
    processors::count_cold_start();
}

/// The SDM's second SIPI (a CPU already running ignores it).
pub fn kick_again(cpu: CpuId) {
    apic::send_startup(apic_id(cpu), (trampoline::BASE >> 12) as u8);
}

/// Why the firmware's list of CPUs could not be read.
pub type DiscoveryError = crate::arch::acpi::AcpiError;

/// The firmware tables' self check: the check's name and whether the
/// parser refuses a bad table with a typed error.
pub fn firmware_check(info: &crate::arch::boot::BootInfo) -> Option<(&'static str, bool)> {
    Some((
        "the ACPI parser refuses a bad RSDP with a typed error",
        crate::arch::acpi::refuses_bad_tables(info.firmware_tables),
    ))
}

/// Finds the CPUs in the firmware's tables (the MADT) and registers
/// them; the count found. Without the tables only the boot CPU is
/// registered, and the error says why.
pub fn discover(info: &crate::arch::boot::BootInfo) -> Result<u32, DiscoveryError> {
    match crate::arch::acpi::cpus(info.firmware_tables) {
        Ok(cpus) => {
            crate::arch::console::println!("hotkern: MADT lists APIC ids {:?}", cpus.apic_ids());
            register(cpus.apic_ids());
            Ok(cpus.apic_ids().len() as u32)
        }
        Err(error) => {
            crate::arch::console::println!("hotkern: no CPUs from ACPI: {error}");
            register(&[]);
            Err(error)
        }
    }
}

/// The hardware's own number for `cpu` (its APIC id).
pub fn hardware_id(cpu: CpuId) -> u64 {
    processors::hardware_id(cpu)
}

/// The calling CPU's hardware number, read from the hardware (its local
/// APIC's id register), not from the per-CPU block.
pub fn own_hardware_id() -> u64 {
    u64::from(apic::id())
}
