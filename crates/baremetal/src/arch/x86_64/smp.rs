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
//! wakes whom) is the shared kernel's [`Lifecycle`], whose words live here
//! ([`LIVES`]) because the calls read them; the platform moves them
//! (`crate::platform::power`) and gives [`kick`] the entry a started CPU
//! runs, so this layer knows nothing of the CPU loop above it.

use core::arch::asm;
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use hotkern_cpuhp::CpuId;
use hotkern_kernel::power::Lifecycle;
use hotkern_kernel::rcu::Activity;

use crate::arch::apic;
use crate::arch::cpu::{self, MAX_CPUS};
pub use crate::arch::cpu_states::{Park, SmpError};
use crate::arch::instructions;
use crate::arch::trampoline;
use crate::arch::tsc;

/// CPU 0: the boot CPU, which runs the runs and never goes offline.
pub const BOOT_CPU: CpuId = CpuId(0);

/// Bytes of each application processor's stack.
const AP_STACK_BYTES: usize = 32 * 1024;

/// A start waits this long for the first SIPI to take.
pub const SECOND_SIPI_US: u64 = 200;
/// A start, a call or an offline gives up after this long (TCG on a loaded
/// two-core host can keep a vCPU away for a long time).
pub const TIMEOUT_US: u64 = 5_000_000;

/// When a start not yet answered gets its second signal (the contract's
/// name for the SDM's second SIPI).
pub const KICK_AGAIN_AFTER_US: Option<u64> = Some(SECOND_SIPI_US);

/// How CPUs that go offline from now on park (`true`: [`Park::Idle`]).
static PARK_IDLE: AtomicBool = AtomicBool::new(false);
/// Starts through the trampoline (cold) and from an idle park, so far.
static COLD_STARTS: AtomicU64 = AtomicU64::new(0);
static PARKED_STARTS: AtomicU64 = AtomicU64::new(0);

/// How many CPU starts so far were cold (INIT-SIPI-SIPI) and how many woke
/// a CPU parked idle.
pub fn starts() -> (u64, u64) {
    (
        COLD_STARTS.load(Ordering::Relaxed),
        PARKED_STARTS.load(Ordering::Relaxed),
    )
}

/// The CPUs parked idle now, which a start wakes rather than INITs.
static PARKED_IDLE: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];

/// Sets how CPUs that go offline from now on park; CPUs parked already
/// stay as they are until started.
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

/// Whether `cpu` waits parked idle, so that a start is a wake-up IPI.
/// Read by the starting CPU after `cpu` reported dead: the parked CPU
/// sets it before it does, and clears it itself when it arrives.
pub fn is_parked_idle(cpu: CpuId) -> bool {
    PARKED_IDLE
        .get(cpu.index())
        .is_some_and(|parked| parked.load(Ordering::Acquire))
}

/// Parks the calling CPU, which has left its loop, the way [`park`] says:
/// `report_dead()` runs first (after the CPU is marked parked, so the CPU
/// that sees it dead sees how it waits). Returns only from an idle park,
/// once `started()` holds: the CPU then re-enters its loop.
pub fn park_here(cpu: CpuId, report_dead: impl FnOnce(), started: impl Fn() -> bool) {
    let idle = park() == Park::Idle;
    // Release: pairs with the acquire in `is_parked_idle`, made before the
    // death that the starter waits for.
    PARKED_IDLE[cpu.index()].store(idle, Ordering::Release);
    report_dead();
    if !idle {
        loop {
            // SAFETY: parks this CPU with interrupts off; only INIT (a new
            // start) takes it out.
            unsafe { asm!("cli", "hlt", options(nomem, nostack)) };
        }
    }
    while !started() {
        // SAFETY: `sti; hlt` opens interrupts only for the halt (the `sti`
        // shadow): a wake-up sent after the check is taken by the halt.
        // Only the wake-up IPI reaches a parked CPU (its tick is stopped,
        // calls go to running CPUs), and its handler only acknowledges.
        unsafe { asm!("sti", "hlt", "cli", options(nomem, nostack)) };
    }
    // Call sites patched while this CPU was parked were not synced here
    // (`crate::arch::text` syncs only running CPUs): serialise before
    // running them, as the wake-up's `iretq` already did.
    crate::arch::instructions::serialize();
    PARKED_IDLE[cpu.index()].store(false, Ordering::Release);
    PARKED_STARTS.fetch_add(1, Ordering::Relaxed);
}

/// Which CPUs run: the shared core's handshake, whose words the platform's
/// starts and parks move and whose `is_alive` the calls here read.
pub static LIVES: Lifecycle = Lifecycle::new();
static APIC_IDS: [AtomicU32; MAX_CPUS] = [const { AtomicU32::new(0) }; MAX_CPUS];
static CPU_COUNT: AtomicU32 = AtomicU32::new(1);

#[repr(C, align(16))]
struct Stack(UnsafeCell<[u8; AP_STACK_BYTES]>);

// SAFETY: each stack is used only by its own CPU, from its start until it
// parks; the next start of that CPU begins after it parked.
unsafe impl Sync for Stack {}

static STACKS: [Stack; MAX_CPUS] =
    [const { Stack(UnsafeCell::new([0; AP_STACK_BYTES])) }; MAX_CPUS];

/// One CPU's mailbox for [`call`]: the function, its argument and result,
/// and the numbers of the last call asked for and the last one done.
struct Mailbox {
    function: AtomicUsize,
    arg: AtomicU64,
    result: AtomicU64,
    requested: AtomicU64,
    done: AtomicU64,
    /// The CPU that posted the call: woken when it is done.
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

/// Records the CPUs: the boot CPU (the caller) as CPU 0, then every other
/// APIC id of `apic_ids`. Returns how many CPUs there are.
pub fn register(apic_ids: &[u32]) -> u32 {
    let boot = apic::id();
    APIC_IDS[0].store(boot, Ordering::Relaxed);
    LIVES.boot_cpu(0);
    let mut count = 1;
    for &id in apic_ids.iter().filter(|&&id| id != boot) {
        if count < MAX_CPUS {
            APIC_IDS[count].store(id, Ordering::Relaxed);
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

/// Every CPU known, online or not: CPU 0 (the boot CPU) first.
pub fn cpus() -> impl Iterator<Item = CpuId> {
    (0..cpu_count()).map(CpuId)
}

/// Every application processor known, online or not.
pub fn application_processors() -> impl Iterator<Item = CpuId> {
    (1..cpu_count()).map(CpuId)
}

/// CPUs online now.
pub fn online() -> u32 {
    (0..cpu_count() as usize)
        .filter(|&cpu| LIVES.is_alive(cpu))
        .count() as u32
}

/// CPU `cpu`'s APIC id.
pub fn apic_id(cpu: CpuId) -> u32 {
    APIC_IDS[cpu.index()].load(Ordering::Relaxed)
}

/// Runs `function(arg)` on CPU `cpu` from its IPI handler and returns the
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

/// Asks CPU `cpu` to run `function(arg)` from its IPI handler and returns
/// at once; [`finish`] waits for it. A CPU holds one call at a time: the
/// caller finishes each call before posting the next to the same CPU.
pub fn post(cpu: CpuId, function: fn(u64) -> u64, arg: u64) -> Result<Posted, SmpError> {
    if cpu.0 >= cpu_count() {
        return Err(SmpError::NoCpu(cpu));
    }
    let index = cpu.index();
    // A call to oneself would wait for a handler that cannot run.
    if !LIVES.is_alive(index) || cpu::current_id() == Some(cpu) {
        return Err(SmpError::WrongState(cpu));
    }
    let mailbox = &MAILBOXES[index];
    mailbox.function.store(function as usize, Ordering::Relaxed);
    mailbox.arg.store(arg, Ordering::Relaxed);
    mailbox
        .caller
        .store(cpu::current_id().unwrap_or(CpuId(0)).0, Ordering::Relaxed);
    let number = mailbox.requested.load(Ordering::Relaxed) + 1;
    // Release: pairs with the acquire in `run_call`, which then sees the
    // function and argument stored above.
    mailbox.requested.store(number, Ordering::Release);
    apic::send_fixed(apic_id(cpu), apic::CALL_VECTOR);
    Ok(Posted { cpu, number })
}

/// Waits until a posted call has run and returns its result. The caller
/// halts, woken by the CPU that ran the call (Linux spins here, in
/// `csd_lock_wait`; a spinning vCPU would hold a host core the callee
/// needs, and a stop-machine's members would be released one by one).
pub fn finish(call: Posted) -> Result<u64, SmpError> {
    let mailbox = &MAILBOXES[call.cpu.index()];
    let deadline = tsc::nanos().saturating_add(TIMEOUT_US * 1000);
    // Acquire: pairs with the release in `run_call`, so the result is there.
    let done = || mailbox.done.load(Ordering::Acquire) == call.number;
    if halt_until(&done, deadline) {
        Ok(mailbox.result.load(Ordering::Relaxed))
    } else {
        Err(SmpError::Timeout(call.cpu))
    }
}

/// Wakes CPU `cpu` from `hlt` (Linux's reschedule IPI): its idle loop looks
/// at its run queue again. Nothing happens to a CPU that is not running.
pub fn wake(cpu: CpuId) {
    let index = cpu.index();
    if index < cpu_count() as usize && LIVES.is_alive(index) {
        ring(cpu);
    }
}

/// Wake-ups sent to each CPU that its loop has not halted on yet: the
/// machine's doorbell, Linux's `need_resched` as its idle loop checks it
/// with interrupts off before it halts. A wake-up that lands while the
/// CPU is busy (its IPI taken by the running thread) leaves this set, so
/// the loop's next halt turns again at once instead of sleeping until
/// the tick.
pub static RUNG: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];

/// Marks a wake-up for CPU `cpu` and sends its IPI, whatever its state
/// (the [`Lifecycle`] wakes a CPU it asked to leave).
pub fn ring(cpu: CpuId) {
    if let Some(rung) = RUNG.get(cpu.index()) {
        // Release, before the IPI: the halt's swap (acquire) that finds
        // it also sees what the waker published before waking.
        rung.store(true, Ordering::Release);
        apic::send_fixed(apic_id(cpu), apic::WAKE_VECTOR);
    }
}

/// Whether CPU `cpu` is running (started and not parked): the CPUs a
/// stop-machine must gather and a grace period must hear from.
pub fn is_running(cpu: CpuId) -> bool {
    cpu.index() < cpu_count() as usize && LIVES.is_alive(cpu.index())
}

/// Runs the call in the running CPU's mailbox, if there is a new one.
fn run_call() {
    let Some(cpu) = cpu::current_id() else { return };
    let mailbox = &MAILBOXES[cpu.index()];
    let number = mailbox.requested.load(Ordering::Acquire);
    if mailbox.done.load(Ordering::Relaxed) == number {
        return;
    }
    let address = mailbox.function.load(Ordering::Relaxed);
    // SAFETY: `call` stored a `fn(u64) -> u64` there before publishing the
    // call's number (release), which this CPU read with acquire.
    let function: fn(u64) -> u64 = unsafe { core::mem::transmute(address) };
    let before = cpu::enter_activity(cpu, Activity::CrossCpuCall);
    let result = function(mailbox.arg.load(Ordering::Relaxed));
    cpu::enter_activity(cpu, before);
    mailbox.result.store(result, Ordering::Relaxed);
    // Read before `done` lets the caller post again.
    let caller = mailbox.caller.load(Ordering::Relaxed);
    mailbox.done.store(number, Ordering::Release);
    ring(CpuId(caller));
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

/// Halts until `condition` holds or the TSC passes `deadline_ns`; says
/// whether it held. The tick wakes the halt to look at the clock: a
/// deadline passes within a tick, unless the caller masked the tick (a
/// call handler).
pub fn halt_until(condition: &dyn Fn() -> bool, deadline_ns: u64) -> bool {
    instructions::without_interrupts(|| loop {
        if condition() {
            return true;
        }
        if tsc::nanos() >= deadline_ns {
            return false;
        }
        // SAFETY: `sti; hlt` opens interrupts only for the halt (the
        // `sti` shadow): a wake-up sent after the check above is taken
        // by the halt, not before it; `cli` closes them again.
        // Handlers that can run here take no lock (the wake-up only
        // acknowledges, the tick counts).
        unsafe { asm!("sti", "hlt", "cli", options(nomem, nostack)) };
    })
}

/// Sends CPU `cpu` (dead: parked or never started) INIT and SIPI into the
/// trampoline, which brings it to `entry(cpu)` on its own stack in long
/// mode.
pub fn kick(cpu: CpuId, entry: extern "C" fn(u64) -> !) {
    let index = cpu.index();
    let stack_top = STACKS[index].0.get() as u64 + AP_STACK_BYTES as u64;
    // SAFETY: only the boot CPU starts CPUs, and `cpu` is dead: it is
    // parked (or never ran), so nothing reads its row; the CPUs
    // starting beside it read only their own rows.
    unsafe { trampoline::install(index, apic_id(cpu), stack_top, entry, u64::from(cpu.0)) };
    apic::send_init(apic_id(cpu));
    apic::send_startup(apic_id(cpu), (trampoline::BASE >> 12) as u8);
    COLD_STARTS.fetch_add(1, Ordering::Relaxed);
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
    u64::from(apic_id(cpu))
}

/// The calling CPU's hardware number, read from the hardware (its local
/// APIC's id register), not from the per-CPU block.
pub fn own_hardware_id() -> u64 {
    u64::from(apic::id())
}
