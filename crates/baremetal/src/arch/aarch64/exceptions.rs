//! The exception vector table (`VBAR_EL1`): IRQs go to the GIC's
//! dispatcher, everything else is a crash with a report — the exception
//! class from `ESR_EL1`, the faulting address (`FAR_EL1`), where it
//! happened (`ELR_EL1`) and the registers — after which QEMU exits with
//! [`Exit::Exception`], as x86-64's IDT does.
//!
//! The table has sixteen 128-byte entries (Arm ARM D1.10.2): four kinds
//! (synchronous, IRQ, FIQ, SError) for each of four origins (this EL on
//! `SP_EL0`, this EL on `SP_EL1`, a lower EL in AArch64, in AArch32). The
//! kernel runs at EL1 on `SP_EL1`, so only the second group is expected.
//! Each entry saves `x0`–`x30`, `ELR_EL1` and `SPSR_EL1` on the current
//! stack and calls [`hotkern_exception`]; no FP/SIMD state is saved, since
//! the kernel is built soft-float and never touches those registers.

use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::arch::console::emergency;
use crate::arch::cpu;
use crate::arch::qemu::{exit, Exit};

/// The registers an exception entry saved, in the order it saved them.
#[repr(C)]
pub struct Frame {
    /// `x0`–`x30`.
    pub registers: [u64; 31],
    /// Where the exception came from (`ELR_EL1`), restored by `ERET`.
    pub return_address: u64,
    /// The state to return to (`SPSR_EL1`).
    pub saved_state: u64,
    padding: u64,
}

/// Bytes of a [`Frame`]: a multiple of 16, as `sp` must stay.
const FRAME_BYTES: usize = core::mem::size_of::<Frame>();
const _: () = assert!(FRAME_BYTES % 16 == 0);

/// The vector table's IRQ entry for this EL on `SP_EL1`.
const IRQ_HERE: u64 = 5;
/// Its synchronous entry.
const SYNCHRONOUS_HERE: u64 = 4;
/// `ESR_EL1`'s exception class of a `BRK` instruction.
const BRK_CLASS: u64 = 0x3c;

/// `BRK`s taken and stepped over ([`crate::arch::interrupts::breakpoint`]).
static BREAKPOINTS: AtomicU64 = AtomicU64::new(0);

/// Breakpoints taken so far.
pub fn breakpoints() -> u64 {
    BREAKPOINTS.load(Ordering::Relaxed)
}

/// What an IRQ runs (the GIC's dispatcher), set at boot: 0 before.
static IRQ_HANDLER: AtomicUsize = AtomicUsize::new(0);
/// What a crash runs before QEMU exits (the trace's crash dump).
static CRASH_HANDLER: AtomicUsize = AtomicUsize::new(0);

/// Sets what every IRQ runs.
pub fn set_irq_handler(handler: fn()) {
    IRQ_HANDLER.store(handler as usize, Ordering::Release);
}

/// Sets what a crash runs before QEMU exits.
pub fn set_crash_handler(handler: fn()) {
    CRASH_HANDLER.store(handler as usize, Ordering::Release);
}

fn handler(slot: &AtomicUsize) -> Option<fn()> {
    let address = slot.load(Ordering::Acquire);
    // SAFETY: only `set_*_handler` store there, and they store a `fn()`.
    (address != 0).then(|| unsafe { core::mem::transmute::<usize, fn()>(address) })
}

extern "C" {
    static hotkern_vectors: u8;
}

/// Points the calling CPU's `VBAR_EL1` at the table.
pub fn load() {
    let table = core::ptr::addr_of!(hotkern_vectors) as u64;
    // SAFETY: the table is 2 KiB-aligned code in the image, whose entries
    // all save state and call `hotkern_exception`.
    unsafe { core::arch::asm!("msr vbar_el1, {}", "isb", in(reg) table, options(nostack)) };
}

/// The exception class of an `ESR_EL1` value, in words.
fn class_name(class: u64) -> &'static str {
    match class {
        0x00 => "unknown instruction",
        0x01 => "WFI/WFE trapped",
        0x07 => "FP/SIMD access trapped",
        0x0e => "illegal execution state",
        0x15 => "SVC",
        0x16 => "HVC",
        0x17 => "SMC",
        0x18 => "system register access trapped",
        0x20 | 0x21 => "instruction abort",
        0x22 => "PC alignment fault",
        0x24 | 0x25 => "data abort",
        0x26 => "SP alignment fault",
        0x2f => "SError",
        0x30 | 0x31 => "breakpoint",
        0x32 | 0x33 => "software step",
        0x34 | 0x35 => "watchpoint",
        0x3c => "BRK instruction",
        _ => "other",
    }
}

/// Where every entry of the table arrives, with which entry it was
/// (origin * 4 + kind) and the saved registers.
#[no_mangle]
extern "C" fn hotkern_exception(entry: u64, frame: &mut Frame) {
    if entry == IRQ_HERE {
        if let Some(irq) = handler(&IRQ_HANDLER) {
            irq();
        }
        return;
    }
    let (esr, far): (u64, u64);
    // SAFETY: reading the syndrome and fault address has no side effect.
    unsafe {
        core::arch::asm!("mrs {}, esr_el1", out(reg) esr, options(nomem, nostack));
        core::arch::asm!("mrs {}, far_el1", out(reg) far, options(nomem, nostack));
    }
    let class = esr >> 26;
    if entry == SYNCHRONOUS_HERE && class == BRK_CLASS {
        // ELR points at the BRK itself (unlike x86-64's `int3`): step over.
        BREAKPOINTS.fetch_add(1, Ordering::Relaxed);
        frame.return_address += 4;
        return;
    }
    let cpu = cpu::current_id().map_or(-1, |cpu| i64::from(cpu.0));
    let kind = ["synchronous", "IRQ", "FIQ", "SError"][(entry % 4) as usize];
    emergency(format_args!(
        "\nhotkern: exception on cpu {cpu}: {kind} (vector {entry}), {} (ESR {esr:#x}, class {class:#x}), FAR {far:#x}, ELR {:#x}, SPSR {:#x}\n",
        class_name(class),
        frame.return_address,
        frame.saved_state,
    ));
    for (index, pair) in frame.registers.chunks(2).enumerate() {
        match pair {
            [first, second] => emergency(format_args!(
                "  x{:<2} {first:#018x}  x{:<2} {second:#018x}\n",
                2 * index,
                2 * index + 1
            )),
            [last] => emergency(format_args!("  x30 {last:#018x}\n")),
            _ => {}
        }
    }
    if let Some(crash) = handler(&CRASH_HANDLER) {
        crash();
    }
    exit(Exit::Exception)
}

core::arch::global_asm!(
    r#"
    .section .text.vectors, "ax", @progbits
    .balign 2048
    .global hotkern_vectors
hotkern_vectors:
    .set entry, 0
    .rept 16
    .balign 128
    sub sp, sp, #{frame}
    stp x0, x1, [sp, #0]
    mov x0, #entry
    b hotkern_exception_common
    .set entry, entry + 1
    .endr

hotkern_exception_common:
    stp x2, x3, [sp, #16]
    stp x4, x5, [sp, #32]
    stp x6, x7, [sp, #48]
    stp x8, x9, [sp, #64]
    stp x10, x11, [sp, #80]
    stp x12, x13, [sp, #96]
    stp x14, x15, [sp, #112]
    stp x16, x17, [sp, #128]
    stp x18, x19, [sp, #144]
    stp x20, x21, [sp, #160]
    stp x22, x23, [sp, #176]
    stp x24, x25, [sp, #192]
    stp x26, x27, [sp, #208]
    stp x28, x29, [sp, #224]
    mrs x1, elr_el1
    mrs x2, spsr_el1
    stp x30, x1, [sp, #240]
    str x2, [sp, #256]
    mov x1, sp
    bl hotkern_exception
    ldp x30, x1, [sp, #240]
    ldr x2, [sp, #256]
    msr elr_el1, x1
    msr spsr_el1, x2
    ldp x0, x1, [sp, #0]
    ldp x2, x3, [sp, #16]
    ldp x4, x5, [sp, #32]
    ldp x6, x7, [sp, #48]
    ldp x8, x9, [sp, #64]
    ldp x10, x11, [sp, #80]
    ldp x12, x13, [sp, #96]
    ldp x14, x15, [sp, #112]
    ldp x16, x17, [sp, #128]
    ldp x18, x19, [sp, #144]
    ldp x20, x21, [sp, #160]
    ldp x22, x23, [sp, #176]
    ldp x24, x25, [sp, #192]
    ldp x26, x27, [sp, #208]
    ldp x28, x29, [sp, #224]
    add sp, sp, #{frame}
    eret
    "#,
    frame = const FRAME_BYTES,
);
