//! Kernel threads on real CPUs, one definition for every architecture:
//! each with its own stack, switched to and from its CPU's idle loop by
//! a context switch that saves the registers the ABI asks a callee to
//! keep. Each architecture's `kthread` supplies that switch
//! (`hotkern_switch`), the entry trampoline (`hotkern_kthread_entry`,
//! which calls [`kthread_main`] with the thread's address from a
//! callee-saved register) and the layout of a new thread's first frame
//! ([`SwitchFrame`]); it names the thread type `Kthread`:
//!
//! ```ignore
//! pub type Kthread = crate::arch::threads::Kthread<Frame>;
//! ```
//!
//! Threads are per CPU and cooperative, as Linux's smpboot threads are in
//! effect (`cpuhp/N`, `kworker/N`): the idle loop switches to a thread
//! that has work, the thread does a bounded piece of it and switches back.
//! Switches happen with interrupts off; a thread opens them only between
//! pieces of work. A CPU parks only from its idle loop, never inside a
//! thread, so an offline CPU's threads are all suspended at a switch and
//! resume there when the CPU comes back (its idle loop starts on a fresh
//! stack; the threads' own stacks are untouched).
//!
//! Who writes what: a thread's saved stack pointer is written only by the
//! switch on its own CPU. Whether a thread has work is its owner's
//! business (the shared core's kernel-thread table, the hotplug thread's
//! mailbox).

use alloc::boxed::Box;
use alloc::vec;
use core::cell::UnsafeCell;
use core::marker::PhantomData;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use hotkern_cpuhp::CpuId;
use hotkern_kernel::kthread::Thread;
use hotkern_kernel::rcu::Activity;

use crate::arch::cpu::{self, MAX_CPUS};

/// Bytes of each kernel thread's stack.
const STACK_BYTES: usize = 16 * 1024;

/// What a thread does each time it runs: a bounded piece of work, then it
/// goes back to its CPU's idle loop.
pub type Body = fn(CpuId);

/// The layout of a thread's first frame, which the architecture's switch
/// pops the first time it loads the thread.
pub trait SwitchFrame {
    /// Writes a never-run thread's first frame below `top` (16-byte
    /// aligned), whose return address is the entry trampoline; returns
    /// the stack pointer the switch loads.
    ///
    /// # Safety
    /// The frame's bytes below `top` must be the thread's own stack,
    /// unused yet.
    unsafe fn build(top: u64) -> u64;

    /// Writes `thread` into the frame at `saved` (built by [`build`](Self::build),
    /// not run yet) where the trampoline reads it.
    ///
    /// # Safety
    /// `saved` must be such a frame.
    unsafe fn place(saved: u64, thread: u64);
}

/// One kernel thread.
pub struct Kthread<F> {
    /// `cpuhp/N`, `kworker/N`.
    pub name: &'static str,
    /// The CPU it belongs to.
    pub cpu: CpuId,
    /// What its CPU runs while it runs, for a stall report: named once
    /// here, not at every switch.
    activity: Activity,
    body: Body,
    /// The stack pointer saved by the last switch away from it.
    saved: UnsafeCell<u64>,
    /// A parked thread is not switched to (Linux's `kthread_park`): the
    /// hotplug steps park a CPU's threads as it goes and unpark them once
    /// it is back.
    parked: AtomicBool,
    /// Whether it has been switched to once (and its address placed).
    started: AtomicBool,
    _stack: Box<[u8]>,
    _frame: PhantomData<F>,
}

// SAFETY: `saved` is written only by the switch on the thread's own CPU,
// with interrupts off (see the module documentation); everything else is
// atomic or read-only.
unsafe impl<F> Sync for Kthread<F> {}
// SAFETY: as above; the stack is plain memory owned by the thread.
unsafe impl<F> Send for Kthread<F> {}

/// The stack pointer each CPU's idle loop saved when it switched to a
/// thread.
struct IdleContext(UnsafeCell<u64>);

// SAFETY: each slot is used only by its own CPU, with interrupts off.
unsafe impl Sync for IdleContext {}

static IDLE: [IdleContext; MAX_CPUS] = [const { IdleContext(UnsafeCell::new(0)) }; MAX_CPUS];

/// Switches from an idle loop into a thread, per CPU.
static SWITCHES: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];

/// Switches from an idle loop into a thread so far, over every CPU.
pub fn switches() -> u64 {
    SWITCHES
        .iter()
        .map(|count| count.load(Ordering::Relaxed))
        .sum()
}

/// Switches from CPU `cpu`'s idle loop into one of its threads so far:
/// the loop compares it before and after a step to know whether a thread
/// ran.
pub fn switches_on(cpu: CpuId) -> u64 {
    SWITCHES
        .get(cpu.index())
        .map_or(0, |count| count.load(Ordering::Relaxed))
}

extern "C" {
    /// The architecture's switch: saves the callee-saved registers on the
    /// current stack, stores the stack pointer in `*save`, loads `load` as
    /// the stack pointer and restores the registers saved there.
    fn hotkern_switch(save: *mut u64, load: u64);
}

/// A thread's life: run its body each time it is switched to, then go
/// back to the idle loop. Never returns; the architecture's entry
/// trampoline calls it.
pub extern "C" fn kthread_main<F>(thread: *const Kthread<F>) -> ! {
    // SAFETY: the thread's address was placed in its frame by its first
    // switch, where it lives until freed (in the shared table's `Arc`); it
    // is freed only once its CPU is offline and no idle loop holds it,
    // that is, while it is suspended at a switch and never resumed again.
    let thread = unsafe { &*thread };
    loop {
        (thread.body)(thread.cpu);
        thread.yield_to_idle();
    }
}

impl<F: SwitchFrame> Kthread<F> {
    /// A thread for `cpu` that runs `body` whenever its CPU switches to it.
    pub fn new(name: &'static str, cpu: CpuId, body: Body) -> Kthread<F> {
        let mut thread = Kthread {
            name,
            cpu,
            activity: Activity::of_thread(name),
            body,
            saved: UnsafeCell::new(0),
            parked: AtomicBool::new(false),
            started: AtomicBool::new(false),
            _stack: vec![0u8; STACK_BYTES].into_boxed_slice(),
            _frame: PhantomData,
        };
        let top = (thread._stack.as_ptr() as u64 + STACK_BYTES as u64) & !15;
        // SAFETY: below `top` lies the thread's own stack, unused yet.
        *thread.saved.get_mut() = unsafe { F::build(top) };
        thread
    }

    /// Switches from the calling CPU's idle loop to this thread; returns
    /// when the thread switches back. Interrupts must be off, and the
    /// thread must belong to the calling CPU.
    pub fn switch_to(&self) {
        let me = cpu::current_id().unwrap_or(CpuId(0));
        assert_eq!(
            me, self.cpu,
            "{} runs only on cpu {}",
            self.name, self.cpu.0
        );
        // Only this CPU reads or writes `started`, with interrupts off: a
        // load, not a locked exchange, on every switch.
        if !self.started.load(Ordering::Relaxed) {
            self.started.store(true, Ordering::Relaxed);
            // SAFETY: the thread has not run, so its saved pointer is the
            // frame `new` built; `self` does not move any more (the caller
            // holds it in place to run it, and every later run finds it at
            // the same address).
            unsafe { F::place(*self.saved.get(), self as *const Self as u64) };
        }
        SWITCHES[me.index()].fetch_add(1, Ordering::Relaxed);
        let before = cpu::enter_activity(me, self.activity);
        // SAFETY: the idle slot is this CPU's; the thread's saved pointer
        // was left by its last switch away (or by `new`) and the thread is
        // not running anywhere else (only its own CPU runs it).
        unsafe { hotkern_switch(IDLE[me.index()].0.get(), *self.saved.get()) };
        cpu::enter_activity(me, before);
    }
}

impl<F> Kthread<F> {
    /// Whether the thread is parked (not switched to).
    pub fn parked(&self) -> bool {
        self.parked.load(Ordering::Acquire)
    }

    /// Parks or unparks the thread: its CPU honours it at its next look.
    pub fn set_parked(&self, parked: bool) {
        self.parked.store(parked, Ordering::Release);
    }

    /// Switches back to the idle loop that ran this thread.
    fn yield_to_idle(&self) {
        // SAFETY: called on the thread's own CPU, by the thread, with the
        // idle loop's pointer saved by `switch_to`, which switched here.
        unsafe { hotkern_switch(self.saved.get(), *IDLE[self.cpu.index()].0.get()) };
    }
}

/// This kernel's threads as the shared core's [`Thread`]: a run is a
/// switch to the thread's stack, a park a flag its CPU's loop honours.
impl<F: SwitchFrame> Thread for Kthread<F> {
    fn run(&self) -> bool {
        if self.parked() {
            return false;
        }
        self.switch_to();
        true
    }

    /// Takes effect at the CPU's next look. Only the thread's own CPU
    /// switches to it, one thread at a time, and parks come from hotplug
    /// steps on that CPU's hotplug thread or while it is offline: the
    /// thread is never running when this returns.
    fn park(&self) {
        self.set_parked(true);
    }

    fn unpark(&self) {
        self.set_parked(false);
    }

    fn is_parked(&self) -> bool {
        self.parked()
    }
}
