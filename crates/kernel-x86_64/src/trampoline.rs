//! The application processors' way from a start-up IPI to 64-bit Rust.
//!
//! A SIPI with vector `v` starts a CPU in real mode at `v << 12` (Intel SDM
//! vol. 3, "MP Initialization Protocol Algorithm"), so the code below is
//! assembled for [`BASE`] and copied there by [`install`] before each
//! start. It loads its own small GDT, enters 32-bit protected mode, turns on
//! PAE, long mode and paging with the kernel's page tables (CR3 from the
//! parameter block), far-jumps to 64-bit, takes the stack from the
//! parameter block and calls the entry with the argument in `%rdi`, as
//! Linux's `arch/x86/realmode/rm/trampoline_64.S` does in more steps.
//! The image's first MiB is never given to physmem, so the page stays the
//! kernel's.

use core::arch::asm;

/// Where the trampoline runs: the SIPI vector is `BASE >> 12`.
pub const BASE: u64 = 0x8000;

/// What the trampoline reads on its way up, at `ap_trampoline_params`.
#[repr(C)]
pub struct Params {
    /// The page-table root for CR3 (below 4 GiB).
    pub cr3: u64,
    /// The top of the CPU's stack.
    pub stack_top: u64,
    /// The 64-bit entry, called as `extern "C" fn(u64) -> !`.
    pub entry: u64,
    /// The entry's argument.
    pub arg: u64,
}

extern "C" {
    static ap_trampoline_start: u8;
    static ap_trampoline_params: u8;
    static ap_trampoline_end: u8;
}

/// The running CPU's CR3.
fn cr3() -> u64 {
    let value: u64;
    // SAFETY: reading CR3 has no side effect; the kernel runs at CPL 0.
    unsafe { asm!("mov {}, cr3", out(reg) value, options(nomem, nostack, preserves_flags)) };
    value
}

/// Copies the trampoline to [`BASE`] with the parameters for the next CPU
/// to start (the kernel's CR3, `stack_top`, `entry`, `arg`).
///
/// # Safety
/// No CPU is running the trampoline (starts happen one at a time, and the
/// previous one has reached its entry).
pub unsafe fn install(stack_top: u64, entry: extern "C" fn(u64) -> !, arg: u64) {
    let start = core::ptr::addr_of!(ap_trampoline_start) as usize;
    let params = core::ptr::addr_of!(ap_trampoline_params) as usize;
    let end = core::ptr::addr_of!(ap_trampoline_end) as usize;
    let values = Params {
        cr3: cr3(),
        stack_top,
        entry: entry as usize as u64,
        arg,
    };
    // SAFETY: [BASE, BASE + image) lies in the first MiB, identity-mapped
    // and used by nothing else (physmem never gets it; the start info was
    // copied out at boot); by the contract no CPU executes it now. The
    // parameter block is 8-aligned in the image and BASE is page-aligned.
    unsafe {
        core::ptr::copy_nonoverlapping(start as *const u8, BASE as *mut u8, end - start);
        core::ptr::write_volatile((BASE as usize + (params - start)) as *mut Params, values);
    }
}

core::arch::global_asm!(
    r#"
    .section .rodata.trampoline, "a"
    .balign 16
    .global ap_trampoline_start
ap_trampoline_start:
    .code16
    cli
    cld
    xor %ax, %ax
    mov %ax, %ds
    lgdtl {base} + (ap_tr_gdt_ptr - ap_trampoline_start)
    mov %cr0, %eax
    or $1, %eax
    mov %eax, %cr0
    ljmpl $0x18, ${base} + (ap_tr_32 - ap_trampoline_start)

    .code32
ap_tr_32:
    mov $0x10, %ax
    mov %ax, %ds
    mov %ax, %es
    mov %ax, %ss
    mov %cr4, %eax
    or $0x20, %eax
    mov %eax, %cr4
    mov {base} + (ap_trampoline_params - ap_trampoline_start), %eax
    mov %eax, %cr3
    mov $0xc0000080, %ecx
    rdmsr
    or $0x100, %eax
    wrmsr
    mov %cr0, %eax
    or $0x80010001, %eax
    mov %eax, %cr0
    ljmp $0x08, ${base} + (ap_tr_64 - ap_trampoline_start)

    .code64
ap_tr_64:
    mov $0x10, %eax
    mov %eax, %ds
    mov %eax, %es
    mov %eax, %ss
    xor %eax, %eax
    mov %eax, %fs
    mov %eax, %gs
    mov {base} + (ap_trampoline_params + 8 - ap_trampoline_start), %rsp
    mov {base} + (ap_trampoline_params + 24 - ap_trampoline_start), %rdi
    mov {base} + (ap_trampoline_params + 16 - ap_trampoline_start), %rax
    xor %ebp, %ebp
    call *%rax
1:
    cli
    hlt
    jmp 1b

    .balign 8
ap_tr_gdt:
    .quad 0
    .quad 0x00af9a000000ffff
    .quad 0x00cf92000000ffff
    .quad 0x00cf9a000000ffff
ap_tr_gdt_end:
    .balign 4
    .word 0
ap_tr_gdt_ptr:
    .word ap_tr_gdt_end - ap_tr_gdt - 1
    .long {base} + (ap_tr_gdt - ap_trampoline_start)
    .balign 8
    .global ap_trampoline_params
ap_trampoline_params:
    .skip 32
    .global ap_trampoline_end
ap_trampoline_end:
    "#,
    base = const BASE,
    options(att_syntax)
);
