//! This kernel's hardware as the shared bare-metal kernel's [`Arch`]
//! ([`hotkern_kernel::baremetal`], which runs the CPU loop, the step
//! table, the per-CPU threads and the tasks over it), through the arch
//! contract only ([`crate::arch`]): the CPU number from the per-CPU
//! block, the wake-up, the wait for an interrupt, the clock and the
//! tick, parks with interrupts off, and kernel threads that are a stack
//! switch away. The same impl serves every architecture.

use core::fmt;
use core::sync::atomic::Ordering;

use hotkern_cpuhp::CpuId;
use hotkern_kernel::baremetal::{self, Arch, State};
use hotkern_kernel::failures::Failures;
use hotkern_kernel::power::Lifecycle;
use hotkern_kernel::rcu::Activity;
use hotkern_kernel::tick::Ticks;

use crate::arch::console::println;
use crate::arch::kthread::{self, Kthread};
use crate::arch::{clock, cpu, interrupts, smp, tick};
use crate::platform::trace::{self, trace_marker};

/// This kernel's hardware, whichever architecture it was built for.
pub struct Hardware;

/// The shared bare-metal kernel on this hardware.
pub type Kernel = baremetal::Kernel<Hardware>;

/// The hotplug engine's platform on this hardware.
pub type KernelPlatform = baremetal::BareMetalPlatform<Hardware>;

/// How long a grace period (or the hotplug lock) may take before the
/// run reports a stall.
pub const GRACE_TIMEOUT_US: u64 = 5_000_000;

/// Failures outside the hotplug engine's operations (a grace period that
/// stalled, the hotplug lock that did not settle), on the console as they
/// come and counted against the run's checks.
pub static FAILURES: Failures = Failures::new(|what| println!("hotkern: hotplug platform: {what}"));

static STATE: State<Hardware> = State::new(GRACE_TIMEOUT_US * 1_000, &FAILURES);

impl Arch for Hardware {
    type Thread = Kthread;
    const MAX_CPUS: usize = cpu::MAX_CPUS;

    fn state() -> &'static State<Self> {
        &STATE
    }

    /// The bootstrap CPU before its per-CPU area is set up is CPU 0.
    fn current_cpu() -> CpuId {
        cpu::current_id().unwrap_or(CpuId(0))
    }

    fn now_ns() -> u64 {
        clock::nanos()
    }

    fn ticks() -> &'static Ticks {
        tick::sched_ticks()
    }

    fn set_tick(running: bool) {
        if running {
            tick::start();
        } else {
            tick::stop();
        }
    }

    fn lives() -> &'static Lifecycle {
        &smp::LIVES
    }

    fn ring(cpu: CpuId) {
        smp::ring(cpu);
    }

    fn halt_until(condition: &dyn Fn() -> bool, deadline_ns: u64) -> bool {
        smp::halt_until(condition, deadline_ns)
    }

    fn halt(cpu: CpuId, enter: &dyn Fn(), exit: &dyn Fn()) {
        let rung = &smp::RUNG[cpu.index()];
        // A wake-up since the last halt: turn again at once (checked with
        // interrupts off, so one sent after this check wakes the halt).
        if rung.swap(false, Ordering::AcqRel) {
            return;
        }
        enter();
        // The loop runs with interrupts off, and the wait opens them only
        // for itself, atomically: a wake-up sent after the loop's checks
        // ends the wait instead of being taken before it; they are closed
        // again for `exit` and the next turn. The handlers take no lock
        // this CPU holds.
        interrupts::wait_for_interrupt();
        // Whatever rang is looked at now. A ring after this store sends
        // an IPI that stays pending while interrupts are off and wakes
        // the next halt at once.
        rung.store(false, Ordering::Release);
        exit();
    }

    fn without_interrupts<R>(f: impl FnOnce() -> R) -> R {
        interrupts::without_interrupts(f)
    }

    fn set_interrupts(on: bool) {
        if on {
            interrupts::enable();
        } else {
            interrupts::disable();
        }
    }

    fn park_here(cpu: CpuId, report_dead: &dyn Fn(), started: &dyn Fn() -> bool) {
        smp::park_here(cpu, report_dead, started);
    }

    fn activity(cpu: CpuId) -> Activity {
        cpu::activity(cpu)
    }

    fn enter_activity(cpu: CpuId, activity: Activity) -> Activity {
        cpu::enter_activity(cpu, activity)
    }

    fn spawn_thread(name: &'static str, cpu: CpuId, body: fn(CpuId)) -> Kthread {
        Kthread::new(name, cpu, body)
    }

    fn switches_on(cpu: CpuId) -> u64 {
        kthread::switches_on(cpu)
    }

    fn cpu_count() -> usize {
        smp::cpu_count() as usize
    }

    fn marker(line: fmt::Arguments<'_>) {
        trace::TRACING.marker(line);
    }

    /// A CPU parked idle is woken; any other is started by the arch
    /// (x86-64: INIT and SIPI into the trampoline), which brings it to
    /// [`ap_entry`].
    fn kick(cpu: CpuId) {
        if smp::is_parked_idle(cpu) {
            smp::ring(cpu);
        } else {
            smp::kick(cpu, ap_entry);
        }
    }

    /// The arch's second start signal (x86-64: the SDM's second SIPI,
    /// which a CPU already running ignores), or the wake-up again.
    fn kick_again(cpu: CpuId) {
        if smp::is_parked_idle(cpu) {
            smp::ring(cpu);
        } else {
            smp::kick_again(cpu);
        }
    }

    const KICK_AGAIN_AFTER_NS: Option<u64> = match smp::KICK_AGAIN_AFTER_US {
        Some(us) => Some(us * 1000),
        None => None,
    };
    const POWER_TIMEOUT_NS: u64 = smp::TIMEOUT_US * 1_000;

    /// A call in the CPU's mailbox, run by its call IPI's handler.
    type Call = smp::Posted;

    fn post_call(cpu: CpuId, function: fn(u64) -> u64) -> Result<smp::Posted, &'static str> {
        smp::post(cpu, function, 0).map_err(|error| error.cause())
    }

    fn finish_call(call: smp::Posted) -> Result<(), &'static str> {
        smp::finish(call).map(drop).map_err(|error| error.cause())
    }

    fn console(line: fmt::Arguments<'_>) {
        println!("{line}");
    }
}

/// Where an application processor arrives from the arch's start code,
/// with its CPU number.
extern "C" fn ap_entry(cpu: u64) -> ! {
    // The start code hands over the number `smp::kick` stored for it.
    let cpu = CpuId(cpu as u32);
    // SAFETY: this CPU runs with interrupts off (the start code cleared
    // them), `cpu` is its own number (one start at a time), and a CPU that
    // was online before parked for good before this start.
    unsafe { cpu::init_secondary(cpu) };
    Kernel::arrive(cpu);
    trace_marker!("cpu {} online, APIC id {}", cpu.0, smp::own_hardware_id());
    Kernel::run(cpu)
}
