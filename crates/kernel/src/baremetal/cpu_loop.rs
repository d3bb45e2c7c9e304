//! An online CPU's loop on a bare-metal kernel: the shared turns
//! ([`crate::idle`]) over [`Kernel`], a park when asked to go offline,
//! the tick the timer interrupt runs, and work every CPU's loop runs at
//! once ([`LoopWork`]).
//!
//! Cross-CPU calls and stop-machine run from the call interrupt's
//! handler, not from the loop; what the loop runs first is the hotplug
//! thread (an operation waits for it), then the step table's threads with
//! work. Tasks run inside `kworker`, a few slices per switch, and the
//! loop halts after every turn, busy or not ([`CpuLoop::HALT_WHEN_BUSY`]):
//! four busy virtual CPUs that never halt on a two-core host stall each
//! other's rendezvous. The halt's deadline needs no timer of its own: the
//! tick interrupts at HZ, and timers expire only at ticks.

use hotkern_cpuhp::CpuId;

use super::{Arch, Kernel};
use crate::idle::{self, CpuLoop};
use crate::kthread::Role;
use crate::power::Life;
use crate::rcu::Activity;
use crate::sync::Ordering;
use crate::tick::Ticks;

/// Work every CPU's loop but the caller's runs, interrupts on, at the top
/// of its next turn: kernel code that must run in a loop on every CPU at
/// once (as the trace patching check's callers do), until cleared.
pub type LoopWork = fn(CpuId);

impl<A: Arch> Kernel<A> {
    /// The timer interrupt's tick on `cpu`: the shared tick, RCU's among
    /// it. A tick that was pending as the CPU stopped its timer and is
    /// taken in its park (or one of a CPU not arrived yet) is dropped:
    /// the CPU is offline for RCU and the timers.
    pub fn tick(cpu: CpuId) {
        if A::lives().is_alive(cpu.index()) {
            idle::tick(&Self::HANDLE, cpu, A::now_ns());
        }
    }

    /// The last of a start, cold or from an idle park: the tick, awake
    /// for RCU before anyone can see it online and give it work, then
    /// alive.
    pub fn arrive(cpu: CpuId) {
        A::set_tick(true);
        idle::start(&Self::HANDLE, cpu);
        A::enter_activity(cpu, Activity::IdleLoop);
        A::lives().arrive(&Self::HANDLE, cpu.index());
    }

    /// An online CPU's loop: the shared turns, and a park when asked to
    /// go offline (at the top of a turn, never from inside a thread).
    /// Interrupts stay off from the top of a turn to the halt, so a
    /// wake-up sent after a check is taken by the halt.
    pub fn run(cpu: CpuId) -> ! {
        let index = cpu.index();
        loop {
            A::set_interrupts(false);
            if A::lives().should_die(index) {
                A::set_tick(false);
                idle::stop(&Self::HANDLE, cpu);
                A::marker(format_args!("cpu {index} parks offline"));
                A::park_here(
                    cpu,
                    &|| {
                        A::lives().die(&Self::HANDLE, index);
                    },
                    &|| A::lives().life(index) == Life::Kicked,
                );
                Self::arrive(cpu);
                A::marker(format_args!("cpu {index} online from its idle park"));
                continue;
            }
            if let Some(work) = Self::loop_work() {
                A::set_interrupts(true);
                work(cpu);
                A::set_interrupts(false);
            }
            idle::turn(&Self::HANDLE, cpu);
        }
    }

    /// Has every other CPU's loop run `work` with interrupts on (so it
    /// takes cross-CPU calls while it runs) until cleared with `None`;
    /// wakes them.
    pub fn set_loop_work(work: Option<LoopWork>) {
        let address = work.map_or(0, |work| work as usize);
        A::state().loop_work.store(address, Ordering::Release);
        if work.is_some() {
            let me = A::current_cpu();
            for cpu in (0..A::MAX_CPUS).map(crate::cpuset::cpu_id) {
                if cpu != me {
                    Self::wake(cpu);
                }
            }
        }
    }

    fn loop_work() -> Option<LoopWork> {
        let address = A::state().loop_work.load(Ordering::Acquire);
        // SAFETY: only `set_loop_work` stores here, a `fn(CpuId)` or 0.
        (address != 0).then(|| unsafe { core::mem::transmute::<usize, LoopWork>(address) })
    }

    /// Runs `step` and says whether it switched to one of `cpu`'s threads.
    fn switched(cpu: CpuId, step: impl FnOnce(CpuId)) -> bool {
        let before = A::switches_on(cpu);
        step(cpu);
        A::switches_on(cpu) != before
    }
}

impl<A: Arch> CpuLoop for Kernel<A> {
    const HALT_WHEN_BUSY: bool = true;

    fn now_ns(&self) -> u64 {
        A::now_ns()
    }

    fn ticks(&self) -> &Ticks {
        A::ticks()
    }

    fn run_calls(&self, cpu: CpuId) -> Option<bool> {
        Some(Self::switched(cpu, Self::run_hotplug_thread))
    }

    /// The loop runs only while the CPU is online; going offline, it
    /// parks at the top of a turn.
    fn is_online(&self, _cpu: CpuId) -> bool {
        true
    }

    fn run_kthreads(&self, cpu: CpuId, now_ns: u64) -> bool {
        Self::switched(cpu, |cpu| Self::run_threads(cpu, now_ns))
    }

    fn run_task(&self, _cpu: CpuId) -> bool {
        false
    }

    /// Only a CPU whose `ksoftirqd` exists can hold timers; asking first
    /// also keeps the timer bases, which allocate, from being made before
    /// the heap is (the loop starts with the CPU, early in boot).
    fn next_timer(&self, cpu: CpuId) -> Option<u64> {
        if !Self::has_thread(cpu, Role::Softirq) {
            return None;
        }
        Self::mechanisms().timers.next_deadline(cpu.index())
    }

    // The RCU reports are not `#[hotkern_trace::function]`: every turn
    // and every tick runs them, and a function trace would hold little
    // else.

    fn rcu_quiescent(&self, cpu: CpuId) {
        Self::rcu().quiescent(cpu);
    }

    fn rcu_tick(&self, cpu: CpuId) {
        Self::rcu().tick(cpu);
    }

    /// As [`Kernel::next_timer`]: only with an `rcuc` thread.
    fn rcu_needs_cpu(&self, cpu: CpuId) -> bool {
        Self::has_thread(cpu, Role::RcuCallbacks) && Self::rcu_pending(cpu) > 0
    }

    fn rcu_enter_idle(&self, cpu: CpuId) {
        Self::rcu().enter_idle(cpu);
    }

    fn rcu_exit_idle(&self, cpu: CpuId) {
        Self::rcu().exit_idle(cpu);
    }

    fn halt(&self, cpu: CpuId, _deadline_ns: Option<u64>, enter: &dyn Fn(), exit: &dyn Fn()) {
        A::halt(cpu, enter, exit);
    }
}
