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

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use hotkern_cpuhp::CpuId;
use hotkern_kernel::power::Lifecycle;
use hotkern_kernel::rcu::Activity;

use crate::arch::boot;
use crate::arch::cpu::{self, MAX_CPUS};
use crate::arch::gic;
use crate::arch::psci::{self, AffinityState};
use crate::arch::timer;

/// CPU 0: the boot CPU, which runs the runs and never goes offline.
pub const BOOT_CPU: CpuId = CpuId(0);

/// Bytes of each secondary CPU's stack.
const STACK_BYTES: usize = 32 * 1024;

/// A start, a call or an offline gives up after this long (x86-64's).
pub const TIMEOUT_US: u64 = 5_000_000;

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

pub use crate::arch::cpu_states::{Park, SmpError};

static PARK_IDLE: AtomicBool = AtomicBool::new(false);
static COLD_STARTS: AtomicU64 = AtomicU64::new(0);
static PARKED_STARTS: AtomicU64 = AtomicU64::new(0);
static PARKED_IDLE: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];

/// How many CPU starts so far were cold (`CPU_ON`) and how many woke a CPU
/// parked idle.
pub fn starts() -> (u64, u64) {
    (
        COLD_STARTS.load(Ordering::Relaxed),
        PARKED_STARTS.load(Ordering::Relaxed),
    )
}

/// Sets how CPUs that go offline from now on park.
pub fn set_park(park: Park) {
    PARK_IDLE.store(park == Park::Idle, Ordering::Relaxed);
}

/// How CPUs that go offline now park.
pub fn park() -> Park {
    if PARK_IDLE.load(Ordering::Relaxed) {
        Park::Idle
    } else {
        Park::PowerOff
    }
}

/// Whether `cpu` waits parked idle, so that a start is a wake-up SGI.
pub fn is_parked_idle(cpu: CpuId) -> bool {
    PARKED_IDLE
        .get(cpu.index())
        .is_some_and(|parked| parked.load(Ordering::Acquire))
}

/// Parks the calling CPU, which has left its loop, the way [`park`] says:
/// `report_dead()` runs first. Returns only from an idle park, once
/// `started()` holds. A powered-off CPU asks PSCI for `CPU_OFF` right
/// after it reported dead: the starter's [`kick`] waits for
/// `AFFINITY_INFO` to say it is off before it asks for `CPU_ON`.
pub fn park_here(cpu: CpuId, report_dead: impl FnOnce(), started: impl Fn() -> bool) {
    let idle = park() == Park::Idle;
    PARKED_IDLE[cpu.index()].store(idle, Ordering::Release);
    report_dead();
    if !idle {
        let error = psci::cpu_off();
        panic!("cpu {} could not power off: {error}", cpu.0);
    }
    while !started() {
        cpu::wait_for_interrupt();
    }
    PARKED_IDLE[cpu.index()].store(false, Ordering::Release);
    PARKED_STARTS.fetch_add(1, Ordering::Relaxed);
}

/// Which CPUs run: the shared core's handshake.
pub static LIVES: Lifecycle = Lifecycle::new();
static AFFINITIES: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];
static CPU_COUNT: AtomicU32 = AtomicU32::new(1);

#[repr(C, align(16))]
struct Stack(UnsafeCell<[u8; STACK_BYTES]>);

// SAFETY: each stack is used only by its own CPU, from its start until it
// parks; the next start of that CPU begins after it parked.
unsafe impl Sync for Stack {}

static STACKS: [Stack; MAX_CPUS] = [const { Stack(UnsafeCell::new([0; STACK_BYTES])) }; MAX_CPUS];

/// Records the CPUs: the caller (the boot CPU) as CPU 0, then every other
/// affinity of `affinities` in order. Returns how many CPUs there are.
pub fn register(affinities: &[u64]) -> u32 {
    let boot = cpu::affinity();
    AFFINITIES[0].store(boot, Ordering::Relaxed);
    LIVES.boot_cpu(0);
    let mut count = 1;
    for &affinity in affinities.iter().filter(|&&affinity| affinity != boot) {
        if count < MAX_CPUS {
            AFFINITIES[count].store(affinity, Ordering::Relaxed);
            count += 1;
        }
    }
    CPU_COUNT.store(count as u32, Ordering::Release);
    count as u32
}

/// CPUs known (online or not).
pub fn cpu_count() -> u32 {
    CPU_COUNT.load(Ordering::Acquire)
}

/// Every CPU known, CPU 0 first.
pub fn cpus() -> impl Iterator<Item = CpuId> {
    (0..cpu_count()).map(CpuId)
}

/// Every CPU but the boot CPU.
pub fn application_processors() -> impl Iterator<Item = CpuId> {
    (1..cpu_count()).map(CpuId)
}

/// CPUs online now.
pub fn online() -> u32 {
    (0..cpu_count() as usize)
        .filter(|&cpu| LIVES.is_alive(cpu))
        .count() as u32
}

/// CPU `cpu`'s affinity (x86-64's `apic_id`: what names it to the
/// hardware).
pub fn affinity(cpu: CpuId) -> u64 {
    AFFINITIES[cpu.index()].load(Ordering::Relaxed)
}

/// One CPU's mailbox (x86-64's): the function, its argument and result,
/// the numbers of the last call asked for and done, and the caller.
struct Mailbox {
    function: AtomicUsize,
    arg: AtomicU64,
    result: AtomicU64,
    requested: AtomicU64,
    done: AtomicU64,
    caller: AtomicU32,
}

static MAILBOXES: [Mailbox; MAX_CPUS] = [const {
    Mailbox {
        function: AtomicUsize::new(0),
        arg: AtomicU64::new(0),
        result: AtomicU64::new(0),
        requested: AtomicU64::new(0),
        done: AtomicU64::new(0),
        caller: AtomicU32::new(0),
    }
}; MAX_CPUS];

/// Runs `function(arg)` on CPU `cpu` from its call SGI and returns the
/// result.
pub fn call(cpu: CpuId, function: fn(u64) -> u64, arg: u64) -> Result<u64, SmpError> {
    let call = post(cpu, function, arg)?;
    finish(call)
}

/// A call posted to another CPU, to [`finish`].
#[must_use = "a posted call must be finished before its argument goes away"]
pub struct Posted {
    cpu: CpuId,
    number: u64,
}

/// Asks running CPU `cpu` to run `function(arg)` from its call SGI and
/// returns at once; one call at a time per CPU.
pub fn post(cpu: CpuId, function: fn(u64) -> u64, arg: u64) -> Result<Posted, SmpError> {
    if cpu.0 >= cpu_count() {
        return Err(SmpError::NoCpu(cpu));
    }
    let index = cpu.index();
    if !LIVES.is_alive(index) || cpu::current_id() == Some(cpu) {
        return Err(SmpError::WrongState(cpu));
    }
    let mailbox = &MAILBOXES[index];
    mailbox.function.store(function as usize, Ordering::Relaxed);
    mailbox.arg.store(arg, Ordering::Relaxed);
    mailbox
        .caller
        .store(cpu::current_id().unwrap_or(BOOT_CPU).0, Ordering::Relaxed);
    let number = mailbox.requested.load(Ordering::Relaxed) + 1;
    // Release: pairs with the acquire in `run_call`.
    mailbox.requested.store(number, Ordering::Release);
    gic::send_sgi(cpu, gic::CALL_SGI);
    Ok(Posted { cpu, number })
}

/// Waits (halted, woken by the callee) until a posted call has run.
pub fn finish(call: Posted) -> Result<u64, SmpError> {
    let mailbox = &MAILBOXES[call.cpu.index()];
    let deadline = timer::nanos().saturating_add(TIMEOUT_US * 1000);
    let done = || mailbox.done.load(Ordering::Acquire) == call.number;
    if halt_until(&done, deadline) {
        Ok(mailbox.result.load(Ordering::Relaxed))
    } else {
        Err(SmpError::Timeout(call.cpu))
    }
}

/// Runs the call in CPU `cpu`'s mailbox, if there is a new one: the call
/// SGI's handler.
pub fn run_call(cpu: CpuId) {
    let mailbox = &MAILBOXES[cpu.index()];
    let number = mailbox.requested.load(Ordering::Acquire);
    if mailbox.done.load(Ordering::Relaxed) == number {
        return;
    }
    let address = mailbox.function.load(Ordering::Relaxed);
    // SAFETY: `post` stored a `fn(u64) -> u64` there before publishing the
    // number (release), read here with acquire.
    let function: fn(u64) -> u64 = unsafe { core::mem::transmute(address) };
    let before = cpu::enter_activity(cpu, Activity::CrossCpuCall);
    let result = function(mailbox.arg.load(Ordering::Relaxed));
    cpu::enter_activity(cpu, before);
    mailbox.result.store(result, Ordering::Relaxed);
    let caller = mailbox.caller.load(Ordering::Relaxed);
    mailbox.done.store(number, Ordering::Release);
    ring(CpuId(caller));
}

/// Wakes running CPU `cpu` from `WFI`; nothing happens to one not running.
pub fn wake(cpu: CpuId) {
    if is_running(cpu) {
        ring(cpu);
    }
}

/// Wake-ups sent to each CPU that its loop has not halted on yet
/// (x86-64's doorbell).
pub static RUNG: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];

/// Marks a wake-up for CPU `cpu` and sends its SGI, whatever its state.
pub fn ring(cpu: CpuId) {
    if let Some(rung) = RUNG.get(cpu.index()) {
        rung.store(true, Ordering::Release);
        gic::send_sgi(cpu, gic::WAKE_SGI);
    }
}

/// Whether CPU `cpu` is running (started and not parked).
pub fn is_running(cpu: CpuId) -> bool {
    cpu.index() < cpu_count() as usize && LIVES.is_alive(cpu.index())
}

/// Unmasks IRQs on the calling CPU.
#[allow(dead_code)] // The contract's name; nothing above calls it yet.
pub fn enable_interrupts() {
    cpu::enable_interrupts();
}

/// Halts until `condition` holds or the clock passes `deadline_ns`; the
/// tick wakes the halt to look at the clock.
pub fn halt_until(condition: &dyn Fn() -> bool, deadline_ns: u64) -> bool {
    cpu::without_interrupts(|| loop {
        if condition() {
            return true;
        }
        if timer::nanos() >= deadline_ns {
            return false;
        }
        cpu::wait_for_interrupt();
    })
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
    let top = STACKS[index].0.get() as u64 + STACK_BYTES as u64;
    boot::SECONDARY_STACK_TOPS[index].store(top, Ordering::Relaxed);
    boot::SECONDARY_RUST_ENTRY.store(entry as usize as u64, Ordering::Relaxed);
    // The started CPU reads both with its MMU and caches off: make the
    // stores reach memory before the firmware starts it.
    // SAFETY: a barrier only.
    unsafe { core::arch::asm!("dsb sy", options(nostack)) };
    let start = boot::arm64_secondary_entry as *const () as u64;
    psci::cpu_on(target, start, u64::from(cpu.0)).map_err(|error| refused(cpu, error))?;
    COLD_STARTS.fetch_add(1, Ordering::Relaxed);
    Ok(())
}
