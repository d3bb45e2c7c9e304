//! The tick: each CPU's virtual timer, re-armed at every interrupt for
//! the next one, `HZ` times a second (x86-64's local APIC timer in
//! periodic mode), and the shared loop's [`Ticks`] that say when a jiffy's
//! work is due.

use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use hotkern_cpuhp::CpuId;
use hotkern_kernel::tick::{Hz, Ticks};

use crate::arch::cpu::{self, MAX_CPUS};
use crate::arch::timer;

/// The timer's name on the console.
pub const TIMER_NAME: &str = "generic timer";

/// Starts the tick on the boot CPU; the timer's rate in Hz (the counter's,
/// which needs no measuring).
pub fn start_on_boot_cpu(_clock_hz: u64) -> u64 {
    start();
    timer::frequency()
}

/// Ticks per second (Linux's `CONFIG_HZ`), from `hz=` ([`set_hz`]).
static TICK_HZ: AtomicU64 = AtomicU64::new(Hz::DEFAULT.get() as u64);
/// Each CPU's scheduler tick as the shared loop keeps it.
static SCHED_TICKS: Ticks = Ticks::new(Hz::DEFAULT);
/// Whether each CPU's timer is to be re-armed.
static RUNNING: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];
/// Ticks taken per CPU.
static TICKS: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];
/// What a tick runs beyond counting, set at boot.
static TICK_HANDLER: AtomicUsize = AtomicUsize::new(0);

/// Sets the tick rate.
pub fn set_hz(hz: Hz) {
    TICK_HZ.store(u64::from(hz.get()), Ordering::Relaxed);
    SCHED_TICKS.set_hz(hz);
}

/// Ticks per second.
pub fn hz() -> u64 {
    TICK_HZ.load(Ordering::Relaxed)
}

/// The scheduler ticks of every CPU.
pub fn sched_ticks() -> &'static Ticks {
    &SCHED_TICKS
}

fn counts_per_tick() -> u64 {
    (timer::frequency() / hz().max(1)).max(1)
}

fn current() -> CpuId {
    cpu::current_id().unwrap_or(CpuId(0))
}

/// Starts the calling CPU's tick.
pub fn start() {
    let cpu = current();
    SCHED_TICKS.start(cpu.index(), timer::nanos());
    RUNNING[cpu.index()].store(1, Ordering::Relaxed);
    timer::arm(counts_per_tick());
}

/// Stops the calling CPU's tick.
pub fn stop() {
    let cpu = current();
    SCHED_TICKS.stop(cpu.index());
    RUNNING[cpu.index()].store(0, Ordering::Relaxed);
    timer::disarm();
}

/// Sets what a tick runs beyond counting (the platform's shared tick).
pub fn set_tick_handler(handler: fn(CpuId)) {
    TICK_HANDLER.store(handler as usize, Ordering::Release);
}

/// The virtual timer's interrupt on CPU `cpu`: count, re-arm, run the
/// handler.
pub fn tick(cpu: CpuId) {
    if let Some(ticks) = TICKS.get(cpu.index()) {
        ticks.fetch_add(1, Ordering::Relaxed);
    }
    // The timer's condition stays asserted until re-armed or stopped.
    if RUNNING[cpu.index() % MAX_CPUS].load(Ordering::Relaxed) != 0 {
        timer::arm(counts_per_tick());
    } else {
        timer::disarm();
    }
    let address = TICK_HANDLER.load(Ordering::Acquire);
    if address != 0 {
        // SAFETY: only `set_tick_handler` stores here, a `fn(CpuId)`.
        let handler: fn(CpuId) = unsafe { core::mem::transmute(address) };
        handler(cpu);
    }
}

/// Ticks CPU `cpu` took.
pub fn ticks(cpu: CpuId) -> u64 {
    TICKS
        .get(cpu.index())
        .map_or(0, |ticks| ticks.load(Ordering::Relaxed))
}
