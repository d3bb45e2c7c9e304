//! The interrupt descriptor table and the CPU exception handlers.
//!
//! Each of the 32 exception vectors has a small assembly stub that pushes
//! the vector (and a zero where the CPU pushes no error code, so every frame
//! has the same shape), saves the general registers and calls
//! [`exception_dispatch`] with a pointer to the [`TrapFrame`]. Stable Rust
//! has no `extern "x86-interrupt"`, hence the stubs. The local APIC's
//! vectors (tick, cross-CPU call, wake-up, spurious) use the same stubs and go on to
//! [`crate::arch::smp::interrupt`]; the virtio configuration-change vector goes to
//! the handler its driver set ([`set_config_handler`]).
//!
//! A breakpoint (`int3`) at a call site that hotkern-trace is patching
//! resumes where [`crate::arch::text::on_breakpoint`] says; any other is
//! counted and returns: the kernel uses it to check that the whole path,
//! IDT to handler and back through `iretq`, works.
//! Every other exception is fatal: the handler prints the vector, its name,
//! the error code, RIP and (for a page fault) CR2, then ends the QEMU run
//! with [`Exit::Exception`], after the crash handler the platform set
//! ([`set_crash_handler`]: the trace's crash dump). The double fault runs on its own stack (IST 1),
//! so a kernel stack overflow still gets reported.

use core::arch::asm;
use core::cell::UnsafeCell;
use core::mem::size_of;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use crate::arch::console::emergency;
use crate::arch::cpu::{self, DOUBLE_FAULT_IST, KERNEL_CODE};
use crate::arch::instructions::cr2;
use crate::arch::qemu::{exit, Exit};

/// The breakpoint vector (`int3`).
const BREAKPOINT: u64 = 3;
/// The double-fault vector.
const DOUBLE_FAULT: u64 = 8;
/// The page-fault vector.
const PAGE_FAULT: u64 = 14;

/// Present, DPL 0, 64-bit interrupt gate (interrupts stay off in handlers).
const INTERRUPT_GATE: u8 = 0x8e;

/// What the stubs leave on the stack: the saved registers, the vector, the
/// error code and the frame the CPU pushed.
#[repr(C)]
#[derive(Debug)]
pub struct TrapFrame {
    r15: u64,
    r14: u64,
    r13: u64,
    r12: u64,
    r11: u64,
    r10: u64,
    r9: u64,
    r8: u64,
    rbp: u64,
    rdi: u64,
    rsi: u64,
    rdx: u64,
    rcx: u64,
    rbx: u64,
    rax: u64,
    vector: u64,
    error_code: u64,
    rip: u64,
    cs: u64,
    rflags: u64,
    rsp: u64,
    ss: u64,
}

/// One 16-byte gate.
#[derive(Clone, Copy)]
#[repr(C)]
struct Gate {
    offset_low: u16,
    selector: u16,
    ist: u8,
    attributes: u8,
    offset_mid: u16,
    offset_high: u32,
    reserved: u32,
}

impl Gate {
    const MISSING: Gate = Gate {
        offset_low: 0,
        selector: 0,
        ist: 0,
        attributes: 0,
        offset_mid: 0,
        offset_high: 0,
        reserved: 0,
    };

    fn new(handler: u64, ist: u8) -> Self {
        Gate {
            offset_low: handler as u16,
            selector: KERNEL_CODE,
            ist,
            attributes: INTERRUPT_GATE,
            offset_mid: (handler >> 16) as u16,
            offset_high: (handler >> 32) as u32,
            reserved: 0,
        }
    }
}

#[repr(C, align(16))]
struct Idt(UnsafeCell<[Gate; 256]>);

// SAFETY: the table is written only by the boot CPU in `init`, before any
// CPU loads it; afterwards only the hardware reads it.
unsafe impl Sync for Idt {}

static IDT: Idt = Idt(UnsafeCell::new([Gate::MISSING; 256]));

static BREAKPOINTS: AtomicU64 = AtomicU64::new(0);

extern "C" {
    /// The 32 stub addresses, in vector order (from the assembly below).
    static exception_stubs: [u64; 32];
    /// The interrupt stubs, in the order of [`INTERRUPT_VECTORS`].
    static interrupt_stubs: [u64; 5];
}

/// The device and IPI vectors that have gates (the tick, the cross-CPU
/// call, the wake-up, the spurious vector, virtio's configuration change),
/// in the order of `interrupt_stubs`.
const INTERRUPT_VECTORS: [u8; 5] = [
    crate::arch::apic::TIMER_VECTOR,
    crate::arch::apic::CALL_VECTOR,
    crate::arch::apic::WAKE_VECTOR,
    crate::arch::apic::SPURIOUS_VECTOR,
    crate::arch::apic::VIRTIO_CONFIG_VECTOR,
];

/// Fills the IDT's exception gates. Call once, on the boot CPU, before
/// [`load`].
pub fn init() {
    // SAFETY: `exception_stubs` is an initialised, read-only table of 32
    // addresses defined in the assembly below.
    let stubs = unsafe { &*core::ptr::addr_of!(exception_stubs) };
    // SAFETY: only the boot CPU runs, and no CPU has loaded the IDT yet, so
    // nothing reads the table while it is written.
    let gates = unsafe { &mut *IDT.0.get() };
    for (vector, &stub) in stubs.iter().enumerate() {
        let ist = if vector as u64 == DOUBLE_FAULT {
            DOUBLE_FAULT_IST
        } else {
            0
        };
        gates[vector] = Gate::new(stub, ist);
    }
    // SAFETY: as `exception_stubs`.
    let stubs = unsafe { &*core::ptr::addr_of!(interrupt_stubs) };
    for (&vector, &stub) in INTERRUPT_VECTORS.iter().zip(stubs) {
        gates[usize::from(vector)] = Gate::new(stub, 0);
    }
}

/// Loads the IDT on the calling CPU (every CPU shares the one table).
pub fn load() {
    #[repr(C, packed(2))]
    struct Pointer {
        limit: u16,
        base: u64,
    }
    let pointer = Pointer {
        limit: (size_of::<[Gate; 256]>() - 1) as u16,
        base: IDT.0.get() as u64,
    };
    // SAFETY: the table is static and `init` filled its exception gates with
    // the stubs below; unfilled gates are not present, which the CPU reports
    // as a #NP that the handlers print.
    unsafe { asm!("lidt [{}]", in(reg) &pointer, options(readonly, nostack, preserves_flags)) };
}

/// Breakpoints taken so far (each returned normally).
pub fn breakpoints() -> u64 {
    BREAKPOINTS.load(Ordering::Relaxed)
}

/// The exception's short name and description.
fn name(vector: u64) -> (&'static str, &'static str) {
    match vector {
        0 => ("#DE", "divide error"),
        1 => ("#DB", "debug"),
        2 => ("NMI", "non-maskable interrupt"),
        3 => ("#BP", "breakpoint"),
        4 => ("#OF", "overflow"),
        5 => ("#BR", "bound range exceeded"),
        6 => ("#UD", "invalid opcode"),
        7 => ("#NM", "device not available"),
        8 => ("#DF", "double fault"),
        10 => ("#TS", "invalid TSS"),
        11 => ("#NP", "segment not present"),
        12 => ("#SS", "stack-segment fault"),
        13 => ("#GP", "general protection"),
        14 => ("#PF", "page fault"),
        16 => ("#MF", "x87 floating-point error"),
        17 => ("#AC", "alignment check"),
        18 => ("#MC", "machine check"),
        19 => ("#XM", "SIMD floating-point error"),
        20 => ("#VE", "virtualization exception"),
        21 => ("#CP", "control protection"),
        28 => ("#HV", "hypervisor injection"),
        29 => ("#VC", "VMM communication"),
        30 => ("#SX", "security exception"),
        _ => ("#??", "reserved"),
    }
}

/// The handler of a device's configuration-change vector
/// ([`crate::arch::apic::VIRTIO_CONFIG_VECTOR`]), which the driver that
/// routes the interrupt hands over, as Linux's `request_irq`.
static CONFIG_HANDLER: AtomicUsize = AtomicUsize::new(0);

/// Has the configuration-change vector run `handler`.
pub fn set_config_handler(handler: fn()) {
    CONFIG_HANDLER.store(handler as usize, Ordering::Release);
}

/// What a fatal exception runs after its report and before QEMU exits
/// (the platform's crash dump), set by [`set_crash_handler`]; 0 is none.
static CRASH_HANDLER: AtomicUsize = AtomicUsize::new(0);

/// Has every fatal exception run `handler` after printing its report and
/// before ending the run: the platform writes its crash dump there, as
/// Linux's `ftrace_dump_on_oops` does from `oops_end`.
pub fn set_crash_handler(handler: fn()) {
    CRASH_HANDLER.store(handler as usize, Ordering::Release);
}

/// Called by every stub with the frame it built.
#[no_mangle]
extern "C" fn exception_dispatch(frame: &mut TrapFrame) {
    if frame.vector == u64::from(crate::arch::apic::VIRTIO_CONFIG_VECTOR) {
        let address = CONFIG_HANDLER.load(Ordering::Acquire);
        if address != 0 {
            // SAFETY: only `set_config_handler` stores here, a `fn()`.
            let handler: fn() = unsafe { core::mem::transmute(address) };
            handler();
        }
        return;
    }
    if frame.vector >= 32 {
        crate::arch::smp::interrupt(frame.vector as u8);
        return;
    }
    if frame.vector == BREAKPOINT {
        // A call site being patched (`crate::arch::text`) continues where
        // its new instruction goes; only other breakpoints are counted.
        if let Some(resume) = crate::arch::text::on_breakpoint(frame.rip) {
            frame.rip = resume;
            return;
        }
        BREAKPOINTS.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let (mnemonic, description) = name(frame.vector);
    let cpu = cpu::current_id().map_or(-1, |cpu| i64::from(cpu.0));
    emergency(format_args!(
        "\nhotkern: exception {} {mnemonic} ({description}) on cpu {cpu}: error code {:#x}, rip {:#x}, rsp {:#x}, rflags {:#x}",
        frame.vector, frame.error_code, frame.rip, frame.rsp, frame.rflags
    ));
    if frame.vector == PAGE_FAULT {
        let cause = frame.error_code;
        emergency(format_args!(
            ", cr2 {:#x} ({} {}{})",
            cr2(),
            if cause & 1 != 0 {
                "protection violation on"
            } else {
                "not-present page on"
            },
            if cause & 2 != 0 { "write" } else { "read" },
            if cause & 16 != 0 {
                ", instruction fetch"
            } else {
                ""
            },
        ));
    }
    emergency(format_args!(
        "\nhotkern: registers rax {:#x} rbx {:#x} rcx {:#x} rdx {:#x} rsi {:#x} rdi {:#x} rbp {:#x}",
        frame.rax, frame.rbx, frame.rcx, frame.rdx, frame.rsi, frame.rdi, frame.rbp
    ));
    emergency(format_args!(
        " r8 {:#x} r9 {:#x} r10 {:#x} r11 {:#x} r12 {:#x} r13 {:#x} r14 {:#x} r15 {:#x} cs {:#x} ss {:#x}\n",
        frame.r8, frame.r9, frame.r10, frame.r11, frame.r12, frame.r13, frame.r14, frame.r15, frame.cs, frame.ss
    ));
    let address = CRASH_HANDLER.load(Ordering::Acquire);
    if address != 0 {
        // SAFETY: only `set_crash_handler` stores here, a `fn()`.
        let handler: fn() = unsafe { core::mem::transmute(address) };
        handler();
    }
    exit(Exit::Exception)
}

// Vectors 8, 10-14, 17, 21, 29 and 30 push an error code; the others get a
// zero so every frame looks the same. On entry the CPU has aligned the stack
// to 16 bytes and pushed 5 words; the error code, the vector and 15 registers
// make 22 words, so the call below runs on a 16-byte aligned stack.
core::arch::global_asm!(
    r#"
    .section .text.exceptions, "ax", @progbits
    .code64
    .irp vec, 0,1,2,3,4,5,6,7,9,15,16,18,19,20,22,23,24,25,26,27,28,31,32,48,64,240,255
exception_stub_\vec:
    push $0
    push $\vec
    jmp exception_common
    .endr
    .irp vec, 8,10,11,12,13,14,17,21,29,30
exception_stub_\vec:
    push $\vec
    jmp exception_common
    .endr

exception_common:
    push %rax
    push %rbx
    push %rcx
    push %rdx
    push %rsi
    push %rdi
    push %rbp
    push %r8
    push %r9
    push %r10
    push %r11
    push %r12
    push %r13
    push %r14
    push %r15
    mov %rsp, %rdi
    cld
    call exception_dispatch
    pop %r15
    pop %r14
    pop %r13
    pop %r12
    pop %r11
    pop %r10
    pop %r9
    pop %r8
    pop %rbp
    pop %rdi
    pop %rsi
    pop %rdx
    pop %rcx
    pop %rbx
    pop %rax
    add $16, %rsp
    iretq

    .section .rodata.exceptions, "a"
    .balign 8
    .global exception_stubs
exception_stubs:
    .irp vec, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
    .quad exception_stub_\vec
    .endr
    .global interrupt_stubs
interrupt_stubs:
    .quad exception_stub_32, exception_stub_64, exception_stub_240, exception_stub_255, exception_stub_48
    "#,
    options(att_syntax)
);
