//! The other CPUs' bookkeeping, one definition for every architecture's
//! `smp`: which CPUs there are and their hardware names, their stacks,
//! how an offline one parks, the mailboxes of cross-CPU calls, and the
//! wake-up doorbell. What differs per architecture is a handful of
//! hardware operations ([`Signals`]): sending the call and the wake-up
//! interrupts, halting once, powering a CPU off, the clock; each `smp`
//! implements them and wraps the generic functions here under the
//! contract's names.
//!
//! ```ignore
//! // In an architecture's smp.rs:
//! pub fn call(cpu: CpuId, function: fn(u64) -> u64, arg: u64) -> Result<u64, SmpError> {
//!     processors::call::<Hardware>(cpu, function, arg)
//! }
//! ```

use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use hotkern_cpuhp::CpuId;
use hotkern_kernel::power::Lifecycle;
use hotkern_kernel::rcu::Activity;

use crate::arch::cpu::MAX_CPUS;
use crate::arch::cpu_states::{Park, SmpError};

/// Bytes of each secondary CPU's stack.
pub const STACK_BYTES: usize = 32 * 1024;

/// A start, a call or an offline gives up after this long (TCG on a loaded
/// two-core host can keep a vCPU away for a long time).
pub const TIMEOUT_US: u64 = 5_000_000;

/// The hardware operations the shared bookkeeping needs from an
/// architecture.
pub trait Signals {
    /// Sends CPU `cpu` the cross-CPU call interrupt.
    fn send_call(cpu: CpuId);
    /// Sends CPU `cpu` the wake-up interrupt.
    fn send_wake(cpu: CpuId);
    /// With interrupts masked: waits for one interrupt, lets it be taken,
    /// and returns with interrupts masked again (so that a wake-up sent
    /// after the caller's last check still ends the wait).
    fn halt_once();
    /// Runs `section` with interrupts masked.
    fn without_interrupts<R>(section: impl FnOnce() -> R) -> R;
    /// The free-running clock in nanoseconds.
    fn nanos() -> u64;
    /// The running CPU's number, once its per-CPU block is set.
    fn current_id() -> Option<CpuId>;
    /// Records what CPU `cpu` does now; returns what it did before.
    fn enter_activity(cpu: CpuId, activity: Activity) -> Activity;
    /// Powers the calling CPU `cpu` off; only a cold start brings it back.
    fn power_off(cpu: CpuId) -> !;
    /// Runs on a CPU woken from an idle park before it re-enters its
    /// loop (x86-64 serialises: text may have been patched meanwhile).
    fn leave_idle_park() {}
}

/// Which CPUs run: the shared core's handshake, whose words the platform's
/// starts and parks move and whose `is_alive` the calls here read.
pub static LIVES: Lifecycle = Lifecycle::new();
static HARDWARE_IDS: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];
static CPU_COUNT: AtomicU32 = AtomicU32::new(1);

/// Records the CPUs: the boot CPU (the caller, hardware name `boot`) as
/// CPU 0, then every other hardware name of `hardware_ids` in order.
/// Returns how many CPUs there are.
pub fn register(boot: u64, hardware_ids: impl Iterator<Item = u64>) -> u32 {
    HARDWARE_IDS[0].store(boot, Ordering::Relaxed);
    LIVES.boot_cpu(0);
    let mut count = 1;
    for id in hardware_ids.filter(|&id| id != boot) {
        if count < MAX_CPUS {
            HARDWARE_IDS[count].store(id, Ordering::Relaxed);
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

/// Every CPU but the boot CPU, online or not.
pub fn application_processors() -> impl Iterator<Item = CpuId> {
    (1..cpu_count()).map(CpuId)
}

/// CPUs online now.
pub fn online() -> u32 {
    (0..cpu_count() as usize)
        .filter(|&cpu| LIVES.is_alive(cpu))
        .count() as u32
}

/// CPU `cpu`'s hardware name (x86-64's APIC id, aarch64's affinity).
pub fn hardware_id(cpu: CpuId) -> u64 {
    HARDWARE_IDS[cpu.index()].load(Ordering::Relaxed)
}

/// Whether CPU `cpu` is running (started and not parked): the CPUs a
/// stop-machine must gather and a grace period must hear from.
pub fn is_running(cpu: CpuId) -> bool {
    cpu.index() < cpu_count() as usize && LIVES.is_alive(cpu.index())
}

#[repr(C, align(16))]
struct Stack(UnsafeCell<[u8; STACK_BYTES]>);

// SAFETY: each stack is used only by its own CPU, from its start until it
// parks; the next start of that CPU begins after it parked.
unsafe impl Sync for Stack {}

static STACKS: [Stack; MAX_CPUS] = [const { Stack(UnsafeCell::new([0; STACK_BYTES])) }; MAX_CPUS];

/// The top of CPU `cpu`'s own stack, for its start.
pub fn stack_top(cpu: CpuId) -> u64 {
    STACKS[cpu.index()].0.get() as u64 + STACK_BYTES as u64
}

/// How CPUs that go offline from now on park (`true`: [`Park::Idle`]).
static PARK_IDLE: AtomicBool = AtomicBool::new(false);
/// Cold starts and starts from an idle park, so far.
static COLD_STARTS: AtomicU64 = AtomicU64::new(0);
static PARKED_STARTS: AtomicU64 = AtomicU64::new(0);
/// The CPUs parked idle now, which a start wakes rather than starts cold.
static PARKED_IDLE: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];

/// How many CPU starts so far were cold and how many woke a CPU parked
/// idle.
pub fn starts() -> (u64, u64) {
    (
        COLD_STARTS.load(Ordering::Relaxed),
        PARKED_STARTS.load(Ordering::Relaxed),
    )
}

/// Counts a cold start (the architecture's `kick` calls it).
pub fn count_cold_start() {
    COLD_STARTS.fetch_add(1, Ordering::Relaxed);
}

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

/// Whether `cpu` waits parked idle, so that a start is a wake-up.
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
pub fn park_here<H: Signals>(cpu: CpuId, report_dead: impl FnOnce(), started: impl Fn() -> bool) {
    let idle = park() == Park::Idle;
    // Release: pairs with the acquire in `is_parked_idle`, made before the
    // death that the starter waits for.
    PARKED_IDLE[cpu.index()].store(idle, Ordering::Release);
    report_dead();
    if !idle {
        H::power_off(cpu);
    }
    // Only the wake-up reaches a parked CPU (its tick is stopped, calls go
    // to running CPUs), and its handler only acknowledges.
    while !started() {
        H::halt_once();
    }
    H::leave_idle_park();
    PARKED_IDLE[cpu.index()].store(false, Ordering::Release);
    PARKED_STARTS.fetch_add(1, Ordering::Relaxed);
}

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

/// Runs `function(arg)` on CPU `cpu` from its call interrupt and returns
/// the result.
pub fn call<H: Signals>(cpu: CpuId, function: fn(u64) -> u64, arg: u64) -> Result<u64, SmpError> {
    let call = post::<H>(cpu, function, arg)?;
    finish::<H>(call)
}

/// A call posted to another CPU, to [`finish`].
#[must_use = "a posted call must be finished before its argument goes away"]
pub struct Posted {
    cpu: CpuId,
    number: u64,
}

/// Asks CPU `cpu` to run `function(arg)` from its call interrupt and
/// returns at once; [`finish`] waits for it. A CPU holds one call at a
/// time: the caller finishes each call before posting the next to the
/// same CPU.
pub fn post<H: Signals>(
    cpu: CpuId,
    function: fn(u64) -> u64,
    arg: u64,
) -> Result<Posted, SmpError> {
    if cpu.0 >= cpu_count() {
        return Err(SmpError::NoCpu(cpu));
    }
    let index = cpu.index();
    // A call to oneself would wait for a handler that cannot run.
    if !LIVES.is_alive(index) || H::current_id() == Some(cpu) {
        return Err(SmpError::WrongState(cpu));
    }
    let mailbox = &MAILBOXES[index];
    mailbox.function.store(function as usize, Ordering::Relaxed);
    mailbox.arg.store(arg, Ordering::Relaxed);
    mailbox
        .caller
        .store(H::current_id().unwrap_or(CpuId(0)).0, Ordering::Relaxed);
    let number = mailbox.requested.load(Ordering::Relaxed) + 1;
    // Release: pairs with the acquire in `run_call`, which then sees the
    // function and argument stored above.
    mailbox.requested.store(number, Ordering::Release);
    H::send_call(cpu);
    Ok(Posted { cpu, number })
}

/// Waits until a posted call has run and returns its result. The caller
/// halts, woken by the CPU that ran the call (Linux spins here, in
/// `csd_lock_wait`; a spinning vCPU would hold a host core the callee
/// needs, and a stop-machine's members would be released one by one).
pub fn finish<H: Signals>(call: Posted) -> Result<u64, SmpError> {
    let mailbox = &MAILBOXES[call.cpu.index()];
    let deadline = H::nanos().saturating_add(TIMEOUT_US * 1000);
    // Acquire: pairs with the release in `run_call`, so the result is there.
    let done = || mailbox.done.load(Ordering::Acquire) == call.number;
    if halt_until::<H>(&done, deadline) {
        Ok(mailbox.result.load(Ordering::Relaxed))
    } else {
        Err(SmpError::Timeout(call.cpu))
    }
}

/// Runs the call in CPU `cpu`'s mailbox, if there is a new one: the call
/// interrupt's handler on that CPU.
pub fn run_call<H: Signals>(cpu: CpuId) {
    let mailbox = &MAILBOXES[cpu.index()];
    let number = mailbox.requested.load(Ordering::Acquire);
    if mailbox.done.load(Ordering::Relaxed) == number {
        return;
    }
    let address = mailbox.function.load(Ordering::Relaxed);
    // SAFETY: `post` stored a `fn(u64) -> u64` there before publishing the
    // call's number (release), which this CPU read with acquire.
    let function: fn(u64) -> u64 = unsafe { core::mem::transmute(address) };
    let before = H::enter_activity(cpu, Activity::CrossCpuCall);
    let result = function(mailbox.arg.load(Ordering::Relaxed));
    H::enter_activity(cpu, before);
    mailbox.result.store(result, Ordering::Relaxed);
    // Read before `done` lets the caller post again.
    let caller = mailbox.caller.load(Ordering::Relaxed);
    mailbox.done.store(number, Ordering::Release);
    ring::<H>(CpuId(caller));
}

/// Wake-ups sent to each CPU that its loop has not halted on yet: the
/// machine's doorbell, Linux's `need_resched` as its idle loop checks it
/// with interrupts off before it halts. A wake-up that lands while the
/// CPU is busy (its interrupt taken by the running thread) leaves this
/// set, so the loop's next halt turns again at once instead of sleeping
/// until the tick.
pub static RUNG: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];

/// Wakes CPU `cpu` from its halt (Linux's reschedule IPI): its idle loop
/// looks at its run queue again. Nothing happens to a CPU not running.
pub fn wake<H: Signals>(cpu: CpuId) {
    if is_running(cpu) {
        ring::<H>(cpu);
    }
}

/// Marks a wake-up for CPU `cpu` and sends its interrupt, whatever its
/// state (the [`Lifecycle`] wakes a CPU it asked to leave).
pub fn ring<H: Signals>(cpu: CpuId) {
    if let Some(rung) = RUNG.get(cpu.index()) {
        // Release, before the interrupt: the halt's swap (acquire) that
        // finds it also sees what the waker published before waking.
        rung.store(true, Ordering::Release);
        H::send_wake(cpu);
    }
}

/// Halts until `condition` holds or the clock passes `deadline_ns`; says
/// whether it held. The tick wakes the halt to look at the clock: a
/// deadline passes within a tick, unless the caller masked the tick (a
/// call handler).
pub fn halt_until<H: Signals>(condition: &dyn Fn() -> bool, deadline_ns: u64) -> bool {
    H::without_interrupts(|| loop {
        if condition() {
            return true;
        }
        if H::nanos() >= deadline_ns {
            return false;
        }
        H::halt_once();
    })
}
