//! Kernel threads on arm64: x86-64's per-CPU cooperative threads (see its
//! `kthread` module for the model), switched by saving the registers the
//! AAPCS64 asks a callee to keep — `x19`–`x28`, the frame pointer `x29`,
//! the link register `x30` — and the stack pointer. The kernel is built
//! soft-float, so no `d8`–`d15` to save.
//!
//! A new thread's frame (from its saved stack pointer up): `x19` (the
//! thread's address, written by the first switch to it), `x20`–`x28`,
//! `x29` 0, `x30` the entry trampoline's address (where the switch's `ret`
//! goes). 96 bytes: the stack pointer stays 16-byte aligned.

use alloc::boxed::Box;
use alloc::vec;
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use hotkern_cpuhp::CpuId;
use hotkern_kernel::kthread::Thread;
use hotkern_kernel::rcu::Activity;

use crate::arch::cpu::{self, MAX_CPUS};

/// Bytes of each kernel thread's stack.
const STACK_BYTES: usize = 16 * 1024;
/// Words of a switch frame.
const FRAME_WORDS: usize = 12;
/// Where `x30` sits in a frame, in words from the saved stack pointer.
const LINK_SLOT: usize = 11;

/// What a thread does each time it runs.
pub type Body = fn(CpuId);

/// One kernel thread.
pub struct Kthread {
    /// `cpuhp/N`, `kworker/N`.
    pub name: &'static str,
    /// The CPU it belongs to.
    pub cpu: CpuId,
    activity: Activity,
    body: Body,
    /// The stack pointer saved by the last switch away from it.
    saved: UnsafeCell<u64>,
    parked: AtomicBool,
    started: AtomicBool,
    _stack: Box<[u8]>,
}

// SAFETY: `saved` is written only by the switch on the thread's own CPU,
// with IRQs masked; everything else is atomic or read-only.
unsafe impl Sync for Kthread {}
// SAFETY: as above; the stack is plain memory owned by the thread.
unsafe impl Send for Kthread {}

struct IdleContext(UnsafeCell<u64>);

// SAFETY: each slot is used only by its own CPU, with IRQs masked.
unsafe impl Sync for IdleContext {}

static SWITCHES: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];
static IDLE: [IdleContext; MAX_CPUS] = [const { IdleContext(UnsafeCell::new(0)) }; MAX_CPUS];

/// Switches from an idle loop into a thread so far, over every CPU.
pub fn switches() -> u64 {
    SWITCHES
        .iter()
        .map(|count| count.load(Ordering::Relaxed))
        .sum()
}

/// Switches from CPU `cpu`'s idle loop into one of its threads so far.
pub fn switches_on(cpu: CpuId) -> u64 {
    SWITCHES
        .get(cpu.index())
        .map_or(0, |count| count.load(Ordering::Relaxed))
}

extern "C" {
    /// Saves the callee-saved registers on the current stack, stores the
    /// stack pointer in `*save`, loads `load` and restores from there.
    fn hotkern_switch(save: *mut u64, load: u64);
    /// Where a new thread starts: calls [`kthread_main`] with `x19`.
    fn hotkern_kthread_entry();
}

core::arch::global_asm!(
    r#"
    .section .text.kthread, "ax", @progbits
    .global hotkern_switch
hotkern_switch:
    sub sp, sp, #96
    stp x19, x20, [sp, #0]
    stp x21, x22, [sp, #16]
    stp x23, x24, [sp, #32]
    stp x25, x26, [sp, #48]
    stp x27, x28, [sp, #64]
    stp x29, x30, [sp, #80]
    mov x9, sp
    str x9, [x0]
    mov sp, x1
    ldp x19, x20, [sp, #0]
    ldp x21, x22, [sp, #16]
    ldp x23, x24, [sp, #32]
    ldp x25, x26, [sp, #48]
    ldp x27, x28, [sp, #64]
    ldp x29, x30, [sp, #80]
    add sp, sp, #96
    ret

    .global hotkern_kthread_entry
hotkern_kthread_entry:
    mov x0, x19
    bl {main}
    brk #1
"#,
    main = sym kthread_main,
);

/// A thread's life: run its body each time it is switched to, then go
/// back to the idle loop. Never returns.
extern "C" fn kthread_main(thread: *const Kthread) -> ! {
    // SAFETY: the first switch placed the thread's address in x19; it
    // lives until its CPU is offline and it is never resumed again (the
    // x86-64 module's argument, unchanged).
    let thread = unsafe { &*thread };
    loop {
        (thread.body)(thread.cpu);
        thread.yield_to_idle();
    }
}

impl Kthread {
    /// A thread for `cpu` that runs `body` whenever its CPU switches to it.
    pub fn new(name: &'static str, cpu: CpuId, body: Body) -> Kthread {
        let mut thread = Kthread {
            name,
            cpu,
            activity: Activity::of_thread(name),
            body,
            saved: UnsafeCell::new(0),
            parked: AtomicBool::new(false),
            started: AtomicBool::new(false),
            _stack: vec![0u8; STACK_BYTES].into_boxed_slice(),
        };
        let top = (thread._stack.as_ptr() as u64 + STACK_BYTES as u64) & !15;
        let saved = top - 8 * FRAME_WORDS as u64;
        // SAFETY: the frame lies inside the thread's own stack, unused yet.
        unsafe {
            ((saved + 8 * LINK_SLOT as u64) as *mut u64)
                .write(hotkern_kthread_entry as *const () as u64)
        };
        *thread.saved.get_mut() = saved;
        thread
    }

    /// Switches from the calling CPU's idle loop to this thread; returns
    /// when the thread switches back. IRQs masked, the thread this CPU's.
    pub fn switch_to(&self) {
        let me = cpu::current_id().unwrap_or(CpuId(0));
        assert_eq!(
            me, self.cpu,
            "{} runs only on cpu {}",
            self.name, self.cpu.0
        );
        if !self.started.load(Ordering::Relaxed) {
            self.started.store(true, Ordering::Relaxed);
            // SAFETY: the thread has not run: its saved pointer is the frame
            // `new` built, whose first word is x19; `self` stays in place
            // from now on.
            unsafe { (*self.saved.get() as *mut u64).write(self as *const Self as u64) };
        }
        SWITCHES[me.index()].fetch_add(1, Ordering::Relaxed);
        let before = cpu::enter_activity(me, self.activity);
        // SAFETY: the idle slot is this CPU's; the thread's saved pointer
        // was left by its last switch away (or by `new`).
        unsafe { hotkern_switch(IDLE[me.index()].0.get(), *self.saved.get()) };
        cpu::enter_activity(me, before);
    }

    /// Whether the thread is parked (not switched to).
    pub fn parked(&self) -> bool {
        self.parked.load(Ordering::Acquire)
    }

    /// Parks or unparks the thread.
    pub fn set_parked(&self, parked: bool) {
        self.parked.store(parked, Ordering::Release);
    }

    fn yield_to_idle(&self) {
        // SAFETY: on the thread's own CPU, by the thread, to the idle
        // loop's pointer saved by the switch here.
        unsafe { hotkern_switch(self.saved.get(), *IDLE[self.cpu.index()].0.get()) };
    }
}

/// This kernel's threads as the shared core's [`Thread`] (as x86-64's).
impl Thread for Kthread {
    fn run(&self) -> bool {
        if self.parked() {
            return false;
        }
        self.switch_to();
        true
    }

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
