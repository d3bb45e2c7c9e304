//! A kernel on real CPUs, written once for every architecture: the shared
//! mechanisms' one instance ([`State`]), and the shared core's traits
//! implemented over it — the CPU loop ([`CpuLoop`]), the step table's
//! kernel ([`StepKernel`]), the per-CPU threads' kernel
//! ([`KthreadKernel`]), the CPUs that wait and wake ([`Cpus`]) and the
//! scheduler's glue — by [`Kernel`], a handle generic over the
//! architecture.
//!
//! What stays each architecture's is [`Arch`]: which CPU am I, wake a CPU
//! (an IPI), halt until woken, the clock and the tick, park a CPU that
//! left its loop, make and switch to a kernel thread, and the one place
//! that keeps the [`State`] (a `static`). The user-mode machine is not a
//! bare-metal kernel (its CPUs are OS threads, its kernel a value it can
//! make many of), so it implements the same core traits over its own
//! instance instead.
//!
//! What an architecture writes, in outline (the x86-64 kernel's
//! `platform/hardware.rs` is the whole of one):
//!
//! ```text
//! pub struct Arm64;
//! pub type Kernel = hotkern_kernel::baremetal::Kernel<Arm64>;
//! static FAILURES: Failures = Failures::new(print_line);
//! static STATE: State<Arm64> = State::new(GRACE_TIMEOUT_NS, &FAILURES);
//! impl Arch for Arm64 { /* the CPU number, the SGI, wfi, the generic
//!                          timer, PSCI, a thread's stack switch */ }
//! // Each CPU, once started: Kernel::arrive(cpu); Kernel::run(cpu)
//! ```
//!
//! [`CpuLoop`]: crate::idle::CpuLoop
//! [`StepKernel`]: crate::steps::StepKernel
//! [`KthreadKernel`]: crate::smpboot::KthreadKernel

mod cpu_loop;
mod engine;
mod hotplug;
mod pool;
mod sched;
mod steps;

use alloc::boxed::Box;
use core::fmt;
use core::marker::PhantomData;

use hotkern_cpuhp::{CpuId, CpuSet};

use crate::cpuset::MAX_CPUS;
use crate::failures::Failures;
use crate::hotplug::{Control, HotplugThreads, PostedCalls};
use crate::kthread::{Role, Thread};
use crate::pagecache::PageCaches;
use crate::platform::Cpus;
use crate::power::{Lifecycle, Power};
use crate::rcu::caller_driven::{CallerDriven, RunningCpus};
use crate::rcu::Activity;
use crate::subsystems::Subsystems;
use crate::sync::{AtomicUsize, Mutex};
use crate::tasks::{Interrupts, TaskStatus};
use crate::tick::Ticks;

pub use cpu_loop::LoopWork;
pub use engine::BareMetalPlatform;
pub use pool::PoolError;

/// What a work item, timer or RCU callback runs on a bare-metal kernel.
pub type Job = Box<dyn FnOnce() + Send>;

/// What a task's slices run: called once per slice on the CPU given, with
/// interrupts off, until it returns [`TaskStatus::Done`]. The boot
/// scenario makes it, so the kernel runs slices without knowing what
/// they do.
pub type Body = Box<dyn FnMut(CpuId) -> TaskStatus + Send>;

/// A task on a bare-metal kernel.
pub type Task = crate::tasks::Task<Body>;

/// The shared mechanisms on a bare-metal kernel.
pub type Mechanisms<A> = Subsystems<Job, Task, <A as Arch>::Thread>;

/// What only the hardware can do, and where the architecture keeps the
/// kernel's one [`State`]. Every method is called on the CPU it speaks
/// of unless it names another.
pub trait Arch: Sized + Send + Sync + 'static {
    /// A kernel thread: its stack and saved context.
    type Thread: Thread + Send + Sync + 'static;
    /// CPUs the kernel has room for.
    const MAX_CPUS: usize;
    /// The CPU that boots and runs the controller: it never goes offline,
    /// and its queue takes what no other CPU's does.
    const BOOT_CPU: CpuId = CpuId(0);

    /// The kernel's one [`State`] (a `static` of the architecture's).
    fn state() -> &'static State<Self>;
    /// The calling CPU (the boot CPU before its per-CPU area exists).
    fn current_cpu() -> CpuId;
    /// The clock, in nanoseconds.
    fn now_ns() -> u64;
    /// Each CPU's scheduler tick.
    fn ticks() -> &'static Ticks;
    /// Starts (or stops) the calling CPU's tick interrupt.
    fn set_tick(running: bool);
    /// The start/stop handshake every CPU's life goes through.
    fn lives() -> &'static Lifecycle;
    /// Marks a wake-up for `cpu` and interrupts it, whatever its state.
    fn ring(cpu: CpuId);
    /// Halts the caller until `condition` holds or the clock passes
    /// `deadline_ns`; says whether it held.
    fn halt_until(condition: &dyn Fn() -> bool, deadline_ns: u64) -> bool;
    /// The loop's halt: returns at once if `cpu` was rung since its last
    /// halt; else calls `enter`, sleeps with interrupts open only for the
    /// sleep, and calls `exit` (interrupts are off on entry and exit).
    fn halt(cpu: CpuId, enter: &dyn Fn(), exit: &dyn Fn());
    /// Runs `f` with the caller's interrupts off.
    fn without_interrupts<R>(f: impl FnOnce() -> R) -> R;
    /// Turns the caller's interrupts on (`true`) or off.
    fn set_interrupts(on: bool);
    /// Parks the calling CPU, which left its loop: `report_dead` runs
    /// once it is parked; returns (from an idle park) once `started`
    /// holds, and never from a cold park (a new start re-enters).
    fn park_here(cpu: CpuId, report_dead: &dyn Fn(), started: &dyn Fn() -> bool);
    /// What `cpu` runs now, for a stall report.
    fn activity(cpu: CpuId) -> Activity;
    /// Records that the caller now runs `activity`; returns the one before.
    fn enter_activity(cpu: CpuId, activity: Activity) -> Activity;
    /// A new kernel thread named `name` on `cpu`, parked, that runs
    /// `body(cpu)` each time its CPU switches to it.
    fn spawn_thread(name: &'static str, cpu: CpuId, body: fn(CpuId)) -> Self::Thread;
    /// Switches to a kernel thread `cpu` made so far: a loop compares two
    /// readings to know whether it ran a thread.
    fn switches_on(cpu: CpuId) -> u64;
    /// CPUs there are (started or not).
    fn cpu_count() -> usize;
    /// A line in the run's trace.
    fn marker(_line: fmt::Arguments<'_>) {}
    /// Starts `cpu`, which is dead (never started, or parked): a cold
    /// start or the wake-up of an idle park ([`Power::kick`]).
    fn kick(cpu: CpuId);
    /// The start again, for a CPU not up after
    /// [`Arch::KICK_AGAIN_AFTER_NS`] ([`Power::kick_again`]).
    fn kick_again(cpu: CpuId) {
        Self::kick(cpu);
    }
    /// How long a start waits before it kicks again, if it does.
    const KICK_AGAIN_AFTER_NS: Option<u64> = None;
    /// How long a CPU may take to arrive or leave.
    const POWER_TIMEOUT_NS: u64;
    /// Whether `cpu` is one the architecture starts and stops; why not.
    /// The default: every CPU there is but the boot CPU.
    fn check_power(cpu: CpuId) -> Result<(), &'static str> {
        if cpu == Self::BOOT_CPU || cpu.index() >= Self::cpu_count() {
            Err("no such CPU")
        } else {
            Ok(())
        }
    }
    /// A cross-CPU call in flight, posted by [`Arch::post_call`].
    type Call: Send;
    /// Makes running CPU `cpu` run `function(0)` from its call
    /// interrupt's handler, interrupts off; does not wait for it.
    fn post_call(cpu: CpuId, function: fn(u64) -> u64) -> Result<Self::Call, &'static str>;
    /// Waits for a posted call to finish.
    fn finish_call(call: Self::Call) -> Result<(), &'static str>;
    /// A line on the console.
    fn console(line: fmt::Arguments<'_>);
}

/// The shared mechanisms' one instance on a bare-metal kernel: made at
/// compile time (`const`), each part made once the heap exists.
pub struct State<A: Arch> {
    mechanisms: spin::Once<Mechanisms<A>>,
    scheduler: spin::Once<sched::Parts<A>>,
    pages: spin::Once<PageCaches>,
    control: spin::Once<Control>,
    hotplug_threads: spin::Once<HotplugThreads<A::Thread>>,
    rcu: CallerDriven<Kernel<A>>,
    /// The stop-machine calls posted to each member, until released.
    calls: PostedCalls<A::Call, MAX_CPUS>,
    /// CPUs whose trace buffer is in use (the rings are made at boot for
    /// every CPU; the step marks which are in use).
    trace_buffers: Mutex<CpuSet>,
    /// CPUs whose sysfs nodes would exist (there is no sysfs on bare
    /// metal; the audit counts them).
    sysfs: Mutex<CpuSet>,
    /// Where the next placement starts looking (round robin).
    next: AtomicUsize,
    /// Work every CPU's loop runs at its next turn ([`LoopWork`]).
    loop_work: AtomicUsize,
}

impl<A: Arch> State<A> {
    /// Nothing made yet; a grace period that takes longer than
    /// `rcu_timeout_ns` is a stall, and one `call_rcu` meets is recorded
    /// in `failures`.
    pub const fn new(rcu_timeout_ns: u64, failures: &'static Failures) -> Self {
        State {
            mechanisms: spin::Once::new(),
            scheduler: spin::Once::new(),
            pages: spin::Once::new(),
            control: spin::Once::new(),
            hotplug_threads: spin::Once::new(),
            rcu: CallerDriven::new(Kernel::HANDLE, rcu_timeout_ns, failures),
            calls: PostedCalls::new(),
            trace_buffers: Mutex::new(CpuSet::EMPTY),
            sysfs: Mutex::new(CpuSet::EMPTY),
            next: AtomicUsize::new(0),
            loop_work: AtomicUsize::new(0),
        }
    }
}

/// The architecture's interrupts-off section, as the scheduler's locks
/// take it (handlers take queue locks: the dying step closes one).
pub struct Irqs<A>(PhantomData<fn() -> A>);

impl<A: Arch> Interrupts for Irqs<A> {
    fn without_interrupts<R>(section: impl FnOnce() -> R) -> R {
        A::without_interrupts(section)
    }
}

/// The kernel on architecture `A`: a handle (it holds nothing) through
/// which the shared core's traits reach [`Arch::state`].
pub struct Kernel<A>(PhantomData<fn() -> A>);

impl<A> Kernel<A> {
    /// The handle.
    pub const HANDLE: Kernel<A> = Kernel(PhantomData);
}

impl<A: Arch> Kernel<A> {
    /// The shared mechanisms, made at the first call (which must come
    /// after the heap's).
    pub fn mechanisms() -> &'static Mechanisms<A> {
        A::state()
            .mechanisms
            .call_once(|| Subsystems::new(A::MAX_CPUS))
    }

    /// The shared mechanisms if made: what a CPU's loop, which starts
    /// before the heap exists, asks for.
    pub fn mechanisms_if_made() -> Option<&'static Mechanisms<A>> {
        A::state().mechanisms.get()
    }

    /// The online mask (Linux's `cpu_online_mask`); empty until the
    /// scheduler's boot.
    pub fn online_mask() -> CpuSet {
        Self::mechanisms_if_made().map_or(CpuSet::EMPTY, |s| s.online.load())
    }

    /// The active mask; empty until the scheduler's boot.
    pub fn active_mask() -> CpuSet {
        Self::mechanisms_if_made().map_or(CpuSet::EMPTY, |s| s.active.load())
    }

    /// RCU callbacks queued on `cpu`.
    pub fn rcu_pending(cpu: CpuId) -> usize {
        Self::mechanisms_if_made().map_or(0, |s| s.rcu_callbacks.pending(cpu.index()))
    }

    /// RCU callbacks no CPU's list took, waiting in the limbo.
    pub fn rcu_waiting() -> usize {
        Self::mechanisms_if_made().map_or(0, |s| s.limbo.callbacks())
    }

    /// Whether `cpu` has its thread `role`.
    pub fn has_thread(cpu: CpuId, role: Role) -> bool {
        Self::mechanisms_if_made().is_some_and(|s| s.kthreads.exists(cpu.index(), role))
    }

    /// Runs `cpu`'s RCU callbacks whose grace period ended: its `rcuc`
    /// thread's work, done by the controller itself for the boot CPU,
    /// which has no idle loop while it controls. Returns how many ran.
    pub fn run_rcu_callbacks(cpu: CpuId) -> usize {
        crate::smpboot::run_rcu_callbacks(&Self::HANDLE, cpu)
    }

    /// Rings `cpu` if it is alive: a wake-up for a CPU that is not
    /// running has nothing to wake (its start or its loop looks anyway).
    pub fn wake(cpu: CpuId) {
        if A::lives().is_alive(cpu.index()) {
            A::ring(cpu);
        }
    }

    /// Makes the per-CPU page caches over `pool`'s frames (once).
    pub fn set_pages(pool: crate::frames::FramePool) -> &'static PageCaches {
        A::state()
            .pages
            .call_once(|| PageCaches::new(A::MAX_CPUS, pool))
    }

    /// The per-CPU page caches, once made.
    pub fn pages() -> Option<&'static PageCaches> {
        A::state().pages.get()
    }
}

/// The CPUs as the shared mechanisms see them: every caller is a CPU, a
/// wake-up is an interrupt, a wait halts. The stop-machine, grace
/// periods, the hotplug lock and the CPU handshake wait and wake
/// through it.
impl<A: Arch> Cpus for Kernel<A> {
    fn current(&self) -> Option<CpuId> {
        Some(A::current_cpu())
    }

    fn wake(&self, cpu: CpuId) {
        A::ring(cpu);
    }

    fn wake_threads(&self) {}

    fn wait_until(&self, condition: &dyn Fn() -> bool) {
        self.wait_until_deadline(condition, u64::MAX);
    }

    fn now_ns(&self) -> u64 {
        A::now_ns()
    }

    /// The tick wakes the halt to look at the clock: a deadline passes
    /// within a tick, unless the caller masked the tick (a call handler).
    fn wait_until_deadline(&self, condition: &dyn Fn() -> bool, deadline_ns: u64) -> bool {
        A::halt_until(condition, deadline_ns)
    }

    fn activity(&self, cpu: CpuId) -> Activity {
        A::activity(cpu)
    }
}

/// The starts go through the architecture's kick, and the
/// [`Lifecycle`] handshake around it.
impl<A: Arch> Power for Kernel<A> {
    fn kick(&self, cpu: CpuId) {
        A::kick(cpu);
    }

    fn kick_again(&self, cpu: CpuId) {
        A::kick_again(cpu);
    }

    fn kick_again_after_ns(&self) -> Option<u64> {
        A::KICK_AGAIN_AFTER_NS
    }
}

/// A grace period waits for the CPUs started and not parked.
impl<A: Arch> RunningCpus for Kernel<A> {
    fn cpu_count(&self) -> usize {
        A::cpu_count()
    }

    fn is_running(&self, cpu: CpuId) -> bool {
        cpu.index() < A::cpu_count() && A::lives().is_alive(cpu.index())
    }
}
