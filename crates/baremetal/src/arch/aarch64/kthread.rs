//! Kernel threads on arm64: the shared threads ([`crate::arch::threads`])
//! over a switch that saves the registers the AAPCS64 asks a callee to
//! keep — `x19`–`x28`, the frame pointer `x29`, the link register `x30` —
//! and the stack pointer. The kernel is built soft-float, so no
//! `d8`–`d15` to save.
//!
//! A new thread's frame (from its saved stack pointer up): `x19` (the
//! thread's address, written by the first switch to it), `x20`–`x28`,
//! `x29` 0, `x30` the entry trampoline's address (where the switch's `ret`
//! goes). 96 bytes: the stack pointer stays 16-byte aligned.

use crate::arch::threads::{kthread_main, SwitchFrame};
pub use crate::arch::threads::{switches, switches_on};

/// One kernel thread.
pub type Kthread = crate::arch::threads::Kthread<Frame>;

/// Words of a switch frame.
const FRAME_WORDS: usize = 12;
/// Where `x30` sits in a frame, in words from the saved stack pointer.
const LINK_SLOT: usize = 11;

/// arm64's first frame (the layout above).
pub struct Frame;

impl SwitchFrame for Frame {
    unsafe fn build(top: u64) -> u64 {
        let saved = top - 8 * FRAME_WORDS as u64;
        // SAFETY: the frame lies inside the thread's own stack, which the
        // caller says is unused yet.
        unsafe {
            ((saved + 8 * LINK_SLOT as u64) as *mut u64)
                .write(hotkern_kthread_entry as *const () as u64)
        };
        saved
    }

    unsafe fn place(saved: u64, thread: u64) {
        // SAFETY: the frame `build` made, whose first word is x19.
        unsafe { (saved as *mut u64).write(thread) };
    }
}

extern "C" {
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
    main = sym kthread_main::<Frame>,
);
