//! The other CPUs: starting them through PSCI (`CPU_ON`), powering an
//! offline one off (`CPU_OFF`, confirmed with `AFFINITY_INFO` before the
//! next start), calling a function on one of them (the call SGI), waking
//! one from `WFI` (the wake-up SGI), with the same names and the same
//! handshake as x86-64's `smp` module so that the layers above see one
//! kind of CPU.
//!
//! CPU numbers are the kernel's: 0 is the boot CPU, then the device
//! tree's other CPUs by affinity. An offline CPU parks in one of two ways
//! ([`Park`]): powered off (the default, Linux's `cpu_die` →
//! `psci_cpu_die`), so that bringing it back is a fresh `CPU_ON` into
//! [`boot::arm64_secondary_entry`]; or idle, `WFI` with IRQs open for the
//! wake-up SGI alone, so that a start is one SGI ([`is_parked_idle`]).

use core::sync::atomic::Ordering;

use hotkern_cpuhp::CpuId;
use hotkern_kernel::rcu::Activity;

use crate::arch::boot;
use crate::arch::cpu;
pub use crate::arch::cpu_states::{Park, SmpError};
use crate::arch::gic;
#[allow(unused_imports)] // The contract's name; nothing above reads it yet.
pub use crate::arch::processors::park;
use crate::arch::processors::{self, Signals};
pub use crate::arch::processors::{
    application_processors, cpu_count, cpus, is_parked_idle, is_running, online, set_park, starts,
    Posted, LIVES, RUNG, TIMEOUT_US,
};
use crate::arch::psci::{self, AffinityState};
use crate::arch::timer;

/// CPU 0: the boot CPU, which runs the runs and never goes offline.
pub const BOOT_CPU: CpuId = CpuId(0);

/// How long a start waits before [`kick_again`]: never, as PSCI needs no
/// second signal (x86-64 sends its second SIPI after 200 µs).
pub const KICK_AGAIN_AFTER_US: Option<u64> = None;

/// Why the CPUs could not be read from the firmware.
pub type DiscoveryError = crate::arch::devicetree::MachineError;

/// Records the CPUs the device tree lists (the boot CPU first); how many
/// it lists.
pub fn discover(_info: &crate::arch::boot::BootInfo) -> Result<u32, DiscoveryError> {
    let machine = crate::arch::devicetree::machine()?;
    crate::arch::console::println!(
        "hotkern: the device tree lists CPU affinities {:x?}",
        machine.cpus()
    );
    register(machine.cpus());
    Ok(machine.cpu_count as u32)
}

/// The firmware reader's own check: the device tree reader refuses bad
/// blobs with typed errors.
pub fn firmware_check(_info: &crate::arch::boot::BootInfo) -> Option<(&'static str, bool)> {
    Some((
        "the device tree reader refuses a bad blob with a typed error",
        crate::arch::fdt::refuses_bad_trees(),
    ))
}

/// CPU `cpu`'s hardware name: its affinity.
pub fn hardware_id(cpu: CpuId) -> u64 {
    affinity(cpu)
}

/// The calling CPU's affinity.
pub fn own_hardware_id() -> u64 {
    cpu::affinity()
}

/// Nothing: a `CPU_ON` the firmware accepted needs no second signal.
pub fn kick_again(_cpu: CpuId) {}

/// aarch64's operations under the shared CPU bookkeeping
/// ([`crate::arch::processors`]): SGIs through the GIC, `wfi`, CNTVCT,
/// PSCI `CPU_OFF`.
pub struct Gic;

impl Signals for Gic {
    fn send_call(cpu: CpuId) {
        gic::send_sgi(cpu, gic::CALL_SGI);
    }

    fn send_wake(cpu: CpuId) {
        gic::send_sgi(cpu, gic::WAKE_SGI);
    }

    fn halt_once() {
        cpu::wait_for_interrupt();
    }

    fn without_interrupts<R>(section: impl FnOnce() -> R) -> R {
        cpu::without_interrupts(section)
    }

    fn nanos() -> u64 {
        timer::nanos()
    }

    fn current_id() -> Option<CpuId> {
        cpu::current_id()
    }

    fn enter_activity(cpu: CpuId, activity: Activity) -> Activity {
        cpu::enter_activity(cpu, activity)
    }

    /// PSCI `CPU_OFF` right after the CPU reported dead: the starter's
    /// [`kick`] waits for `AFFINITY_INFO` to say it is off before it asks
    /// for `CPU_ON`.
    fn power_off(cpu: CpuId) -> ! {
        let error = psci::cpu_off();
        panic!("cpu {} could not power off: {error}", cpu.0);
    }
}

/// Parks the calling CPU, which has left its loop, the way [`park`] says.
pub fn park_here(cpu: CpuId, report_dead: impl FnOnce(), started: impl Fn() -> bool) {
    processors::park_here::<Gic>(cpu, report_dead, started);
}

/// Records the CPUs: the caller (the boot CPU) as CPU 0, then every other
/// affinity of `affinities` in order. Returns how many CPUs there are.
pub fn register(affinities: &[u64]) -> u32 {
    processors::register(cpu::affinity(), affinities.iter().copied())
}

/// CPU `cpu`'s affinity (x86-64's `apic_id`: what names it to the
/// hardware).
pub fn affinity(cpu: CpuId) -> u64 {
    processors::hardware_id(cpu)
}

/// Runs `function(arg)` on CPU `cpu` from its call SGI and returns the
/// result.
pub fn call(cpu: CpuId, function: fn(u64) -> u64, arg: u64) -> Result<u64, SmpError> {
    processors::call::<Gic>(cpu, function, arg)
}

/// Asks running CPU `cpu` to run `function(arg)` from its call SGI and
/// returns at once; one call at a time per CPU.
pub fn post(cpu: CpuId, function: fn(u64) -> u64, arg: u64) -> Result<Posted, SmpError> {
    processors::post::<Gic>(cpu, function, arg)
}

/// Waits (halted, woken by the callee) until a posted call has run.
pub fn finish(call: Posted) -> Result<u64, SmpError> {
    processors::finish::<Gic>(call)
}

/// Runs the call in CPU `cpu`'s mailbox, if there is a new one: the call
/// SGI's handler.
pub fn run_call(cpu: CpuId) {
    processors::run_call::<Gic>(cpu);
}

/// Wakes running CPU `cpu` from `WFI`; nothing happens to one not running.
pub fn wake(cpu: CpuId) {
    processors::wake::<Gic>(cpu);
}

/// Marks a wake-up for CPU `cpu` and sends its SGI, whatever its state.
pub fn ring(cpu: CpuId) {
    processors::ring::<Gic>(cpu);
}

/// Halts until `condition` holds or the clock passes `deadline_ns`.
pub fn halt_until(condition: &dyn Fn() -> bool, deadline_ns: u64) -> bool {
    processors::halt_until::<Gic>(condition, deadline_ns)
}

/// Unmasks IRQs on the calling CPU.
#[allow(dead_code)] // The contract's name; nothing above calls it yet.
pub fn enable_interrupts() {
    cpu::enable_interrupts();
}

/// Starts CPU `cpu` (dead: powered off or never started) with PSCI
/// `CPU_ON` into the secondary entry, which brings it to `entry(cpu)` on
/// its own stack with the MMU on. A CPU that reported dead may not be off
/// yet (its `CPU_OFF` comes after the report): `AFFINITY_INFO` is asked
/// until it says off, as Linux's `psci_cpu_kill` does.
/// A PSCI refusal, said on the console, as the contract's error.
fn refused(cpu: CpuId, error: psci::PsciError) -> SmpError {
    crate::arch::console::println!("hotkern: cpu {}: {error}", cpu.0);
    SmpError::WrongState(cpu)
}

/// A start that fails is said on the console; the start's timeout then
/// reports the CPU missing.
pub fn kick(cpu: CpuId, entry: extern "C" fn(u64) -> !) {
    if let Err(error) = power_on(cpu, entry) {
        crate::arch::console::println!("hotkern: {error}");
    }
}

fn power_on(cpu: CpuId, entry: extern "C" fn(u64) -> !) -> Result<(), SmpError> {
    let index = cpu.index();
    if index == 0 || index >= cpu_count() as usize {
        return Err(SmpError::NoCpu(cpu));
    }
    let target = affinity(cpu);
    let deadline = timer::nanos().saturating_add(TIMEOUT_US * 1000);
    loop {
        match psci::affinity_info(target) {
            Ok(AffinityState::Off) => break,
            Ok(_) if timer::nanos() < deadline => core::hint::spin_loop(),
            Ok(_) => return Err(SmpError::WrongState(cpu)),
            Err(error) => return Err(refused(cpu, error)),
        }
    }
    let top = processors::stack_top(cpu);
    boot::SECONDARY_STACK_TOPS[index].store(top, Ordering::Relaxed);
    boot::SECONDARY_RUST_ENTRY.store(entry as usize as u64, Ordering::Relaxed);
    // The started CPU reads both with its MMU and caches off: make the
    // stores reach memory before the firmware starts it.
    // SAFETY: a barrier only.
    unsafe { core::arch::asm!("dsb sy", options(nostack)) };
    let start = boot::arm64_secondary_entry as *const () as u64;
    psci::cpu_on(target, start, u64::from(cpu.0)).map_err(|error| refused(cpu, error))?;
    processors::count_cold_start();
    Ok(())
}
