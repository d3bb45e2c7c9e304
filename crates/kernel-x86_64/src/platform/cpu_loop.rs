//! An online CPU's loop: the shared core's turns ([`hotkern_kernel::idle`])
//! over this kernel ([`KernelLoop`]), a park when asked to go offline, and
//! the tick the local APIC timer's interrupt runs ([`tick`]).

use core::arch::asm;
use core::sync::atomic::{AtomicUsize, Ordering};
use hotkern_cpuhp::CpuId;

use hotkern_kernel::idle::{self, CpuLoop};
use hotkern_kernel::kthread::Role;
use hotkern_kernel::power::Life;
use hotkern_kernel::rcu::Activity;
use hotkern_kernel::tick::Ticks;

use crate::arch::apic;
use crate::arch::cpu;
use crate::arch::kthread;
use crate::arch::smp;
use crate::arch::tsc;
use crate::platform::cpus::KernelCpus;
use crate::platform::hotplug_thread;
use crate::platform::rcu;
use crate::platform::steps;
use crate::platform::subsystems;
use crate::platform::trace::trace_marker;

/// The local APIC timer's tick on `cpu` (handed to
/// [`apic::set_tick_handler`] at boot): the shared tick, RCU's among it.
/// A tick that was pending as the CPU stopped its timer and is taken in
/// its idle park (or one of a CPU not arrived yet) is dropped: the CPU is
/// offline for RCU and the timers.
pub fn tick(cpu: CpuId) {
    if smp::LIVES.is_alive(cpu.index()) {
        idle::tick(&KernelLoop, cpu, tsc::nanos());
    }
}

/// The last of a start, cold or from an idle park: the tick, awake for
/// RCU before anyone can see it online and give it work, then alive.
pub fn arrive(cpu: CpuId) {
    apic::start_tick();
    idle::start(&KernelLoop, cpu);
    cpu::enter_activity(cpu, Activity::IdleLoop);
    smp::LIVES.arrive(&KernelCpus, cpu.index());
}

/// An online application processor's loop: the shared loop's turns
/// ([`hotkern_kernel::idle`]), and a park when asked to go offline (at the
/// top of a turn, never from inside a thread).
pub fn run(cpu: CpuId) -> ! {
    let index = cpu.index();
    loop {
        // SAFETY: interrupts stay off from here to the halt's `sti; hlt`
        // (see `KernelLoop::halt`), so an IPI sent after a check is taken
        // by the halt; the switches to threads need them off too.
        unsafe { asm!("cli", options(nomem, nostack)) };
        if smp::LIVES.should_die(index) {
            apic::stop_tick();
            idle::stop(&KernelLoop, cpu);
            trace_marker!("cpu {index} parks offline");
            smp::park_here(
                cpu,
                || {
                    smp::LIVES.die(&KernelCpus, index);
                },
                || smp::LIVES.life(index) == Life::Kicked,
            );
            arrive(cpu);
            trace_marker!("cpu {index} online from its idle park");
            continue;
        }
        if let Some(work) = loop_work() {
            smp::enable_interrupts();
            work(cpu);
            // SAFETY: back to the loop's state: interrupts off.
            unsafe { asm!("cli", options(nomem, nostack)) };
        }
        idle::turn(&KernelLoop, cpu);
    }
}

/// Work every application processor's loop runs, interrupts on, at the
/// top of its next turn (0: none): a `fn(CpuId)` that returns when done.
static LOOP_WORK: AtomicUsize = AtomicUsize::new(0);

/// Has every application processor run `work` from its loop, with
/// interrupts on (so it takes cross-CPU calls while it runs), until
/// cleared with `None`; wakes them. Kernel code that must run in a loop
/// on every CPU at once, as the trace patching check's callers do.
pub fn set_loop_work(work: Option<fn(CpuId)>) {
    LOOP_WORK.store(work.map_or(0, |work| work as usize), Ordering::Release);
    if work.is_some() {
        for cpu in smp::application_processors() {
            smp::wake(cpu);
        }
    }
}

fn loop_work() -> Option<fn(CpuId)> {
    let address = LOOP_WORK.load(Ordering::Acquire);
    // SAFETY: only `set_loop_work` stores here, a `fn(CpuId)` or 0.
    (address != 0).then(|| unsafe { core::mem::transmute::<usize, fn(CpuId)>(address) })
}

/// This kernel's CPUs inside the shared loop. Cross-CPU calls and
/// stop-machine run from the call IPI's handler, not from the loop; what
/// the loop runs first is the hotplug thread (an operation waits for it),
/// then the step table's threads with work. Tasks run inside `kworker`, a
/// few slices per switch, and the loop halts after every turn, busy or
/// not ([`CpuLoop::HALT_WHEN_BUSY`]): four busy vCPUs that never halt on a
/// two-core host stall each other's rendezvous. The halt's deadline needs
/// no timer of its own: the local APIC timer interrupts at HZ, and timers
/// expire only at ticks.
pub struct KernelLoop;

impl KernelLoop {
    /// Runs `step` and says whether it switched to one of `cpu`'s threads.
    fn switched(cpu: CpuId, step: impl FnOnce(CpuId)) -> bool {
        let before = kthread::switches_on(cpu);
        step(cpu);
        kthread::switches_on(cpu) != before
    }
}

impl CpuLoop for KernelLoop {
    const HALT_WHEN_BUSY: bool = true;

    fn now_ns(&self) -> u64 {
        tsc::nanos()
    }

    fn ticks(&self) -> &Ticks {
        apic::sched_ticks()
    }

    fn run_calls(&self, cpu: CpuId) -> Option<bool> {
        Some(Self::switched(cpu, hotplug_thread::run_thread))
    }

    /// The loop runs only while the CPU is online; going offline, it
    /// parks at the top of a turn.
    fn is_online(&self, _cpu: CpuId) -> bool {
        true
    }

    fn run_kthreads(&self, cpu: CpuId, now_ns: u64) -> bool {
        Self::switched(cpu, |cpu| steps::run_threads(cpu, now_ns))
    }

    fn run_task(&self, _cpu: CpuId) -> bool {
        false
    }

    /// Only a CPU whose `ksoftirqd` exists can hold timers; asking first
    /// also keeps the timer bases, which allocate, from being made before
    /// the heap is (the loop starts with the CPU, early in boot).
    fn next_timer(&self, cpu: CpuId) -> Option<u64> {
        if !subsystems::has_thread(cpu, Role::Softirq) {
            return None;
        }
        subsystems::subsystems().timers.next_deadline(cpu.index())
    }

    fn rcu_quiescent(&self, cpu: CpuId) {
        rcu::RCU.quiescent(cpu);
    }

    fn rcu_tick(&self, cpu: CpuId) {
        rcu::RCU.tick(cpu);
    }

    /// As [`KernelLoop::next_timer`]: only with an `rcuc` thread.
    fn rcu_needs_cpu(&self, cpu: CpuId) -> bool {
        subsystems::has_thread(cpu, Role::RcuCallbacks) && subsystems::rcu_pending(cpu) > 0
    }

    fn rcu_enter_idle(&self, cpu: CpuId) {
        rcu::RCU.enter_idle(cpu);
    }

    fn rcu_exit_idle(&self, cpu: CpuId) {
        rcu::RCU.exit_idle(cpu);
    }

    fn halt(&self, cpu: CpuId, _deadline_ns: Option<u64>, enter: &dyn Fn(), exit: &dyn Fn()) {
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
}
