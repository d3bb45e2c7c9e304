//! A CPU's loop, written once for both platforms: one turn of it runs what
//! the CPU has to do, in the order Linux's scheduler and idle task do it,
//! and reports to RCU in one place; when nothing is runnable it idles
//! as Linux's `do_idle` does (kernel/sched/idle.c).
//!
//! One [`turn`]:
//!
//! 1. Cross-CPU calls and stop-machine's handler (Linux's
//!    `flush_smp_call_function_queue` and the stopper, which run before
//!    anything else the CPU picks). A call may take the CPU down (its
//!    dying steps run in a stop-machine): the turn then ends there.
//! 2. A quiescent state: the CPU is between two things it runs
//!    ([`GracePeriods::quiescent`], Linux's `rcu_qs` at a context switch).
//! 3. On an online CPU, the tick if due ([`tick`]: jiffies, RCU's tick;
//!    timers become due from it and their softirq thread has work), then
//!    each kernel thread with work, then one task slice, with a
//!    quiescent state after the threads and after the task (each is a
//!    context switch back to the loop).
//! 4. With nothing run, idle ([`idle`]): stop the tick if no timer and
//!    no RCU callback needs it (`tick_nohz_idle_stop_tick`, which asks
//!    `rcu_needs_cpu`), enter RCU's extended quiescent state
//!    (`ct_idle_enter`), halt until woken or until the next timer or
//!    tick, leave the extended quiescent state and restart the tick.
//!
//! The loop's edges are shared too: [`stop`] as a CPU leaves its loop
//! (powered off, parked) and [`start`] as it enters it.
//!
//! What is genuinely each platform's is the [`CpuLoop`] trait: how a
//! kernel thread is switched to (an OS thread handed the vCPU; a stack
//! switch), how a task slice runs (the machine runs one from the loop;
//! bare metal runs tasks inside its `kworker`), how calls arrive (a
//! queue the loop drains; an IPI handler plus the hotplug thread), and
//! how the CPU halts without losing a wake-up (a doorbell's condvar;
//! `sti; hlt` after a check made under `cli`). The RCU and tick state
//! are the platform's instances of the shared [`GracePeriods`] and
//! [`Ticks`]; the trait forwards to them so that a platform keeps its
//! own way of naming them (a `static` on bare metal, a field in the
//! machine).
//!
//! [`GracePeriods::quiescent`]: crate::rcu::GracePeriods::quiescent
//! [`GracePeriods`]: crate::rcu::GracePeriods
//!
//! ```
//! use hotkern_cpuhp::CpuId;
//! use hotkern_kernel::idle::{turn, CpuLoop, Turn};
//! use hotkern_kernel::tick::{Hz, Ticks};
//! use std::cell::RefCell;
//!
//! /// A CPU with one task slice to run, recording what its loop does.
//! struct Cpu {
//!     ticks: Ticks,
//!     tasks: RefCell<u32>,
//!     log: RefCell<Vec<&'static str>>,
//! }
//!
//! impl CpuLoop for Cpu {
//!     fn now_ns(&self) -> u64 { 0 }
//!     fn ticks(&self) -> &Ticks { &self.ticks }
//!     fn run_calls(&self, _: CpuId) -> Option<bool> { Some(false) }
//!     fn is_online(&self, _: CpuId) -> bool { true }
//!     fn run_kthreads(&self, _: CpuId, _: u64) -> bool { false }
//!     fn run_task(&self, _: CpuId) -> bool {
//!         let mut tasks = self.tasks.borrow_mut();
//!         let ran = *tasks > 0;
//!         if ran { *tasks -= 1; self.log.borrow_mut().push("task"); }
//!         ran
//!     }
//!     fn next_timer(&self, _: CpuId) -> Option<u64> { None }
//!     fn rcu_quiescent(&self, _: CpuId) { self.log.borrow_mut().push("qs"); }
//!     fn rcu_tick(&self, _: CpuId) {}
//!     fn rcu_needs_cpu(&self, _: CpuId) -> bool { false }
//!     fn rcu_enter_idle(&self, _: CpuId) { self.log.borrow_mut().push("eqs"); }
//!     fn rcu_exit_idle(&self, _: CpuId) { self.log.borrow_mut().push("awake"); }
//!     fn halt(&self, _: CpuId, _: Option<u64>, enter: &dyn Fn(), exit: &dyn Fn()) {
//!         enter();
//!         exit();
//!     }
//! }
//!
//! let cpu = Cpu {
//!     ticks: Ticks::new(Hz::DEFAULT),
//!     tasks: RefCell::new(1),
//!     log: RefCell::new(Vec::new()),
//! };
//! assert_eq!(turn(&cpu, CpuId(0)), Turn::Ran);
//! assert_eq!(turn(&cpu, CpuId(0)), Turn::Idled);
//! assert_eq!(
//!     *cpu.log.borrow(),
//!     ["qs", "task", "qs", "qs", "qs", "eqs", "awake"]
//! );
//! ```

use hotkern_cpuhp::CpuId;

use crate::tick::Ticks;

/// What one platform's CPU does inside the shared loop: the parts only the
/// platform can do. CPU numbers are indices (`CpuId::index`). Every method
/// is called by the CPU `cpu` itself, from its loop.
pub trait CpuLoop {
    /// Whether a turn that ran something still halts before the next
    /// one. Linux does not (a busy CPU never idles); bare metal does,
    /// because its tasks run in bounded pieces inside a kernel thread and
    /// virtual CPUs that never halt keep each other off a small host's
    /// cores. Its tick keeps running through such a halt.
    const HALT_WHEN_BUSY: bool = false;

    /// The platform's clock in nanoseconds, as [`Ticks`] and the timer
    /// bases count it.
    fn now_ns(&self) -> u64;

    /// The platform's per-CPU ticks.
    fn ticks(&self) -> &Ticks;

    /// Runs the cross-CPU calls waiting for `cpu` and joins a stop-machine
    /// that asks for it; returns whether anything ran, or `None` if the
    /// CPU must leave its loop now (its dying steps ran).
    fn run_calls(&self, cpu: CpuId) -> Option<bool>;

    /// Whether `cpu` runs kernel threads and tasks (it is in the online
    /// mask); a CPU coming up or going down only answers calls.
    fn is_online(&self, cpu: CpuId) -> bool;

    /// Switches to each of `cpu`'s kernel threads that has work (timers
    /// due at the tick before `now_ns`, work items, ready RCU callbacks),
    /// each for one bounded piece of it; returns whether any ran.
    fn run_kthreads(&self, cpu: CpuId, now_ns: u64) -> bool;

    /// Runs one slice of a task from `cpu`'s run queue; returns whether
    /// one ran (always false where tasks run inside a kernel thread).
    fn run_task(&self, cpu: CpuId) -> bool;

    /// The deadline of `cpu`'s earliest timer, if it has one.
    fn next_timer(&self, cpu: CpuId) -> Option<u64>;

    /// `cpu` passed a quiescent state ([`crate::rcu::GracePeriods::quiescent`]).
    fn rcu_quiescent(&self, cpu: CpuId);

    /// RCU's part of `cpu`'s tick ([`crate::rcu::GracePeriods::tick`]).
    fn rcu_tick(&self, cpu: CpuId);

    /// Whether `cpu` holds RCU callbacks waiting for a grace period, and
    /// so must keep its tick while idle (Linux's `rcu_needs_cpu`).
    fn rcu_needs_cpu(&self, cpu: CpuId) -> bool;

    /// `cpu` enters RCU's extended quiescent state
    /// ([`crate::rcu::GracePeriods::enter_idle`]).
    fn rcu_enter_idle(&self, cpu: CpuId);

    /// `cpu` leaves it ([`crate::rcu::GracePeriods::exit_idle`]).
    fn rcu_exit_idle(&self, cpu: CpuId);

    /// Sleeps until `cpu` is woken ([`crate::platform::Cpus::wake`]) or,
    /// at the latest, soon after the clock reaches `deadline_ns`; a
    /// wake-up already pending makes it return at once. Calls `enter`
    /// just before sleeping and `exit` just after (a platform that sees
    /// the pending wake-up first may call neither), with no wake-up
    /// lost in between: under the doorbell's lock; with interrupts off
    /// around `sti; hlt`. So a CPU is idle for RCU only while it sleeps.
    fn halt(&self, cpu: CpuId, deadline_ns: Option<u64>, enter: &dyn Fn(), exit: &dyn Fn());
}

/// How a turn of the loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Turn {
    /// It ran something (and, with [`CpuLoop::HALT_WHEN_BUSY`], halted
    /// once, keeping the tick).
    Ran,
    /// It found nothing to run and idled.
    Idled,
    /// A call took the CPU down: it leaves its loop.
    Left,
}

/// One turn of `cpu`'s loop (see the module documentation).
pub fn turn<C: CpuLoop + ?Sized>(platform: &C, cpu: CpuId) -> Turn {
    let Some(mut busy) = platform.run_calls(cpu) else {
        return Turn::Left;
    };
    platform.rcu_quiescent(cpu);
    if platform.is_online(cpu) {
        // One clock read for the tick and the kernel threads' look.
        let now = platform.now_ns();
        tick(platform, cpu, now);
        if platform.run_kthreads(cpu, now) {
            platform.rcu_quiescent(cpu);
            busy = true;
        }
        busy |= platform.run_task(cpu);
        platform.rcu_quiescent(cpu);
    }
    if !busy {
        idle(platform, cpu, true);
        Turn::Idled
    } else {
        if C::HALT_WHEN_BUSY {
            idle(platform, cpu, false);
        }
        Turn::Ran
    }
}

/// `cpu`'s tick, if due at `now_ns`: RCU's tick runs from it (timers are
/// due from it too, which their kernel thread sees). Called by the loop
/// at each turn and, on a platform with a tick interrupt, by the
/// interrupt; [`Ticks::due`] makes each jiffy tick once.
pub fn tick<C: CpuLoop + ?Sized>(platform: &C, cpu: CpuId, now_ns: u64) -> bool {
    let due = platform.ticks().due(cpu.index(), now_ns);
    if due {
        platform.rcu_tick(cpu);
    }
    due
}

/// `cpu` halts: when `nothing_runnable`, its tick stops unless RCU needs
/// it (dyntick-idle); it then sleeps in RCU's extended quiescent state
/// until woken or until its next timer expires or, if still running, its
/// next tick, and restarts its tick once awake.
pub fn idle<C: CpuLoop + ?Sized>(platform: &C, cpu: CpuId, nothing_runnable: bool) {
    let ticks = platform.ticks();
    let timer = platform
        .next_timer(cpu)
        .map(|deadline| ticks.hz().expiry(deadline));
    if nothing_runnable && !platform.rcu_needs_cpu(cpu) {
        ticks.stop(cpu.index());
    }
    let wake = match (timer, ticks.next(cpu.index())) {
        (Some(timer), Some(tick)) => Some(timer.min(tick)),
        (timer, tick) => timer.or(tick),
    };
    platform.halt(cpu, wake, &|| platform.rcu_enter_idle(cpu), &|| {
        platform.rcu_exit_idle(cpu)
    });
    ticks.start(cpu.index(), platform.now_ns());
}

/// `cpu` leaves its loop (powered off, parked): its tick stops and it is
/// quiescent for RCU until [`start`], as a CPU that is not running is.
/// Called by `cpu` itself as it stops; may be repeated.
pub fn stop<C: CpuLoop + ?Sized>(platform: &C, cpu: CpuId) {
    platform.ticks().stop(cpu.index());
    platform.rcu_enter_idle(cpu);
}

/// `cpu` enters its loop (powered on, or at each turn of a loop that may
/// have stopped): awake for RCU before it runs anything, so that a grace
/// period that starts from now waits for it, and its tick running.
/// Called by `cpu` itself; may be repeated.
pub fn start<C: CpuLoop + ?Sized>(platform: &C, cpu: CpuId) {
    platform.rcu_exit_idle(cpu);
    platform.ticks().start(cpu.index(), platform.now_ns());
}

#[cfg(all(test, not(loom)))]
mod tests;
