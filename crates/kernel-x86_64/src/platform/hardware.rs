//! This kernel's hardware as the shared bare-metal kernel's [`Arch`]
//! ([`hotkern_kernel::baremetal`], which runs the CPU loop, the step
//! table, the per-CPU threads and the tasks over it): the CPU number from
//! the per-CPU block, the wake-up IPI, `sti; hlt`, the TSC and the local
//! APIC timer's tick, parks with interrupts off, and kernel threads that
//! are a stack switch away.

use core::arch::asm;
use core::fmt;
use core::sync::atomic::Ordering;

use hotkern_cpuhp::CpuId;
use hotkern_kernel::baremetal::{self, Arch, State};
use hotkern_kernel::power::Lifecycle;
use hotkern_kernel::rcu::{Activity, GracePeriods};
use hotkern_kernel::tick::Ticks;

use crate::arch::kthread::{self, Kthread};
use crate::arch::{apic, cpu, instructions, smp, tsc};
use crate::platform::{hotplug_thread, power, rcu, trace};

/// The x86-64 kernel.
pub struct X86_64;

/// The shared bare-metal kernel on this hardware.
pub type Kernel = baremetal::Kernel<X86_64>;

static STATE: State<X86_64> = State::new();

impl Arch for X86_64 {
    type Thread = Kthread;
    type Rcu = rcu::Controller;
    const MAX_CPUS: usize = cpu::MAX_CPUS;

    fn state() -> &'static State<Self> {
        &STATE
    }

    /// The bootstrap CPU before its per-CPU area is set up is CPU 0.
    fn current_cpu() -> CpuId {
        cpu::current_id().unwrap_or(CpuId(0))
    }

    fn now_ns() -> u64 {
        tsc::nanos()
    }

    fn ticks() -> &'static Ticks {
        apic::sched_ticks()
    }

    fn set_tick(running: bool) {
        if running {
            apic::start_tick();
        } else {
            apic::stop_tick();
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
        // SAFETY: the loop runs with interrupts off, and `sti; hlt` opens
        // them only for the halt (the `sti` shadow makes the pair atomic):
        // an IPI sent after the loop's checks wakes the halt instead of
        // being taken before it; `cli` closes them again for `exit` and
        // the next turn. The handlers take no lock this CPU holds.
        unsafe { asm!("sti", "hlt", "cli", options(nomem, nostack)) };
        // Whatever rang is looked at now. A ring after this store sends
        // an IPI that stays pending while interrupts are off and wakes
        // the next halt at once.
        rung.store(false, Ordering::Release);
        exit();
    }

    fn without_interrupts<R>(f: impl FnOnce() -> R) -> R {
        instructions::without_interrupts(f)
    }

    fn set_interrupts(on: bool) {
        if on {
            smp::enable_interrupts();
        } else {
            // SAFETY: masking interrupts on the calling CPU hides nothing
            // from it: what arrives stays pending until they open.
            unsafe { asm!("cli", options(nomem, nostack)) };
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

    fn grace_periods() -> &'static GracePeriods {
        &rcu::GRACE_PERIODS
    }

    fn rcu() -> &'static rcu::Controller {
        &rcu::Controller
    }

    fn run_hotplug_thread(cpu: CpuId) {
        hotplug_thread::run_thread(cpu);
    }

    fn marker(line: fmt::Arguments<'_>) {
        trace::TRACING.marker(line);
    }

    /// A CPU parked idle is woken; any other gets INIT and SIPI into the
    /// trampoline, which brings it to [`power::ap_entry`].
    fn kick(cpu: CpuId) {
        if smp::is_parked_idle(cpu) {
            smp::ring(cpu);
        } else {
            smp::kick(cpu, power::ap_entry);
        }
    }

    /// The SDM's second SIPI (a CPU already running ignores it), or the
    /// wake-up again.
    fn kick_again(cpu: CpuId) {
        if smp::is_parked_idle(cpu) {
            smp::ring(cpu);
        } else {
            smp::kick_again(cpu);
        }
    }

    const KICK_AGAIN_AFTER_NS: Option<u64> = Some(smp::SECOND_SIPI_US * 1000);
}
