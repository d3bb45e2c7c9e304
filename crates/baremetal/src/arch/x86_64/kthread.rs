//! Kernel threads on x86-64: the shared threads ([`crate::arch::threads`])
//! over a switch that saves the registers the System V ABI asks a callee
//! to keep (`rbx`, `rbp`, `r12`–`r15`) and `rsp`.
//!
//! Stack layout of a thread that has not run yet (from its saved stack
//! pointer up): r15, r14, r13, r12 (the thread's address, written by the
//! first switch to it: until then the thread may move, as it does into
//! the shared kernel's table), rbx, rbp, the entry trampoline's address
//! (where the switch's `ret` goes), padding.
//! The saved pointer is 8 mod 16, so that the trampoline's `call` happens
//! on a 16-byte aligned stack, as the ABI requires.

use crate::arch::threads::{kthread_main, SwitchFrame};
pub use crate::arch::threads::{switches, switches_on};

/// One kernel thread.
pub type Kthread = crate::arch::threads::Kthread<Frame>;

/// Where r12 sits in a new thread's frame, in words from its saved
/// stack pointer (see the layout above).
const R12_SLOT: u64 = 3;

/// x86-64's first frame (the layout above).
pub struct Frame;

impl SwitchFrame for Frame {
    unsafe fn build(top: u64) -> u64 {
        let saved = top - 72;
        let frame: [u64; 7] = [
            0,                                         // r15
            0,                                         // r14
            0,                                         // r13
            0,                                         // r12: the thread, later
            0,                                         // rbx
            0,                                         // rbp
            hotkern_kthread_entry as *const () as u64, // where `ret` goes
        ];
        for (slot, value) in frame.iter().enumerate() {
            // SAFETY: `saved + 8 * slot` lies inside the thread's own
            // stack (72 bytes below its aligned top), which the caller
            // says nothing else uses yet.
            unsafe { ((saved + 8 * slot as u64) as *mut u64).write(*value) };
        }
        saved
    }

    unsafe fn place(saved: u64, thread: u64) {
        // SAFETY: the frame `build` made, whose fourth word is r12.
        unsafe { ((saved + 8 * R12_SLOT) as *mut u64).write(thread) };
    }
}

extern "C" {
    /// Where a new thread starts: calls [`kthread_main`] with r12.
    fn hotkern_kthread_entry();
}

core::arch::global_asm!(
    r#"
    .section .text.kthread, "ax", @progbits
    .global hotkern_switch
hotkern_switch:
    push rbp
    push rbx
    push r12
    push r13
    push r14
    push r15
    mov [rdi], rsp
    mov rsp, rsi
    pop r15
    pop r14
    pop r13
    pop r12
    pop rbx
    pop rbp
    ret

    .global hotkern_kthread_entry
hotkern_kthread_entry:
    mov rdi, r12
    call {main}
    ud2
"#,
    main = sym kthread_main::<Frame>,
);
