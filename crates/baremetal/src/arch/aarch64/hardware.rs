//! This kernel's arm64 hardware as the shared bare-metal kernel's
//! [`Arch`] (x86-64's `platform/hardware.rs`, item for item): the CPU
//! number from `TPIDR_EL1`, the wake-up SGI, `WFI`, the generic timer and
//! its tick, PSCI's starts and power-offs, and kernel threads a stack
//! switch away.

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
use crate::arch::{cpu, exceptions, gic, smp, tick, timer};

/// The arm64 kernel.
pub struct Arm64;

/// The shared bare-metal kernel on this hardware.
pub type Kernel = baremetal::Kernel<Arm64>;

/// The hotplug engine's platform on this hardware.
pub type KernelPlatform = baremetal::BareMetalPlatform<Arm64>;

/// How long a grace period (or the hotplug lock) may take before the run
/// reports a stall (x86-64's).
pub const GRACE_TIMEOUT_US: u64 = 5_000_000;

/// Failures outside the hotplug engine's operations, on the console.
pub static FAILURES: Failures = Failures::new(|what| println!("hotkern: hotplug platform: {what}"));

static STATE: State<Arm64> = State::new(GRACE_TIMEOUT_US * 1_000, &FAILURES);

impl Arch for Arm64 {
    type Thread = Kthread;
    const MAX_CPUS: usize = cpu::MAX_CPUS;

    fn state() -> &'static State<Self> {
        &STATE
    }

    fn current_cpu() -> CpuId {
        cpu::current_id().unwrap_or(CpuId(0))
    }

    fn now_ns() -> u64 {
        timer::nanos()
    }

    fn ticks() -> &'static Ticks {
        tick::sched_ticks()
    }

    fn set_tick(running: bool) {
        if running {
            tick::start_tick();
        } else {
            tick::stop_tick();
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
        // A wake-up since the last halt: turn again at once.
        if rung.swap(false, Ordering::AcqRel) {
            return;
        }
        enter();
        // IRQs masked since the loop's checks: a wake-up sent after them
        // is pending at the GIC and ends the `WFI` at once.
        cpu::wait_for_interrupt();
        rung.store(false, Ordering::Release);
        exit();
    }

    fn without_interrupts<R>(f: impl FnOnce() -> R) -> R {
        cpu::without_interrupts(f)
    }

    fn set_interrupts(on: bool) {
        if on {
            cpu::enable_interrupts();
        } else {
            cpu::disable_interrupts();
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

    /// A CPU parked idle is woken; any other gets PSCI `CPU_ON` into the
    /// secondary entry, which brings it to [`secondary_entry`].
    fn kick(cpu: CpuId) {
        if smp::is_parked_idle(cpu) {
            smp::ring(cpu);
        } else if let Err(error) = smp::kick(cpu, secondary_entry) {
            // The start's timeout reports the CPU missing.
            println!("hotkern: {error}");
        }
    }

    const POWER_TIMEOUT_NS: u64 = smp::TIMEOUT_US * 1_000;

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

/// Sets what the tick and the call SGI run: before the first CPU starts.
pub fn install_handlers() {
    exceptions::set_irq_handler(gic::interrupt);
    gic::set_timer_handler(tick::tick);
    gic::set_call_handler(smp::run_call);
    tick::set_tick_handler(Kernel::tick);
}

/// Where a CPU that PSCI started arrives, on its own stack with its MMU on,
/// with its number.
extern "C" fn secondary_entry(cpu: u64) -> ! {
    let cpu = CpuId(cpu as u32);
    // SAFETY: IRQs are masked (the entry masked them), `cpu` is this CPU's
    // own number (one start at a time).
    unsafe { cpu::init(cpu) };
    exceptions::load();
    if let Err(error) = gic::init_cpu() {
        panic!("cpu {}: {error}", cpu.0);
    }
    Kernel::arrive(cpu);
    Kernel::run(cpu)
}
