//! The application processors' way from a start-up IPI to 64-bit Rust.
//!
//! A SIPI with vector `v` starts a CPU in real mode at `v << 12` (Intel SDM
//! vol. 3, "MP Initialization Protocol Algorithm"), so the code below is
//! assembled for [`BASE`] and copied there by [`install`] before each
//! start. It loads its own small GDT, enters 32-bit protected mode, turns on
//! PAE, long mode and paging with the kernel's page tables (CR3 from the
//! parameter block), far-jumps to 64-bit, finds its own row of the
//! parameter block's table by its local APIC id, takes the stack from it
//! and calls the entry with the row's argument in `%rdi`, as Linux's
//! `arch/x86/realmode/rm/trampoline_64.S` does in more steps. Since each
//! CPU finds its own row, several CPUs can run the trampoline at once
//! (Linux's parallel bring-up does the same lookup); the code is copied
//! once and never rewritten while a CPU may be running it.
//! The image's first MiB is never given to physmem, so the page stays the
//! kernel's.

use core::arch::asm;

/// Where the trampoline runs: the SIPI vector is `BASE >> 12`.
pub const BASE: u64 = 0x8000;

/// Rows of the table: one per CPU the kernel starts.
pub const ROWS: usize = crate::arch::cpu::MAX_CPUS;

/// One CPU's row: its local APIC id, stack and argument.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Row {
    /// The local APIC id that identifies the CPU.
    pub apic_id: u64,
    /// The top of the CPU's stack.
    pub stack_top: u64,
    /// The entry's argument.
    pub arg: u64,
}

/// What the trampoline reads on its way up, at `ap_trampoline_params`.
#[repr(C)]
pub struct Params {
    /// The page-table root for CR3 (below 4 GiB).
    pub cr3: u64,
    /// The 64-bit entry, called as `extern "C" fn(u64) -> !`.
    pub entry: u64,
    /// One row per CPU.
    pub rows: [Row; ROWS],
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

/// Whether the code is at [`BASE`] yet.
static INSTALLED: core::sync::atomic::AtomicBool = core::sync::atomic::AtomicBool::new(false);

/// The parameter block at [`BASE`].
fn params() -> *mut Params {
    let start = core::ptr::addr_of!(ap_trampoline_start) as usize;
    let params = core::ptr::addr_of!(ap_trampoline_params) as usize;
    (BASE as usize + (params - start)) as *mut Params
}

/// Copies the trampoline to [`BASE`] (the first time) and writes row
/// `row` for the CPU with local APIC id `apic_id`: its stack and `arg`
/// for `entry`.
///
/// # Safety
/// Only the boot CPU calls this, and no CPU is running the trampoline
/// with row `row` (a CPU being started reads only its own row; the code
/// and the other rows are left as they are once installed).
pub unsafe fn install(
    row: usize,
    apic_id: u32,
    stack_top: u64,
    entry: extern "C" fn(u64) -> !,
    arg: u64,
) {
    let params = params();
    if !INSTALLED.swap(true, core::sync::atomic::Ordering::Relaxed) {
        let start = core::ptr::addr_of!(ap_trampoline_start) as usize;
        let end = core::ptr::addr_of!(ap_trampoline_end) as usize;
        // SAFETY: [BASE, BASE + image) lies in the first MiB,
        // identity-mapped and used by nothing else (physmem never gets it;
        // the start info was copied out at boot); no CPU was started yet.
        // The block is 8-aligned in the image and BASE is page-aligned.
        unsafe {
            core::ptr::copy_nonoverlapping(start as *const u8, BASE as *mut u8, end - start);
            core::ptr::write_volatile(core::ptr::addr_of_mut!((*params).cr3), cr3());
            core::ptr::write_volatile(
                core::ptr::addr_of_mut!((*params).entry),
                entry as usize as u64,
            );
        }
    }
    // SAFETY: the row is inside the installed block, and by the contract
    // no CPU reads it now. The INIT that follows orders these stores
    // before the started CPU's reads.
    unsafe {
        core::ptr::write_volatile(
            core::ptr::addr_of_mut!((*params).rows[row]),
            Row {
                apic_id: u64::from(apic_id),
                stack_top,
                arg,
            },
        )
    };
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
    # This CPU's local APIC id (xAPIC ID register, bits 31:24), then its
    # row: the first whose id matches.
    mov $0xfee00020, %edx
    mov (%rdx), %eax
    shr $24, %eax
    mov ${base} + (ap_trampoline_params + 16 - ap_trampoline_start), %esi
    mov ${rows}, %ecx
2:
    cmp (%rsi), %rax
    je 3f
    add $24, %rsi
    dec %ecx
    jnz 2b
    jmp 1f
3:
    mov 8(%rsi), %rsp
    mov 16(%rsi), %rdi
    mov {base} + (ap_trampoline_params + 8 - ap_trampoline_start), %rax
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
    .skip 16 + 24 * {rows}
    .global ap_trampoline_end
ap_trampoline_end:
    "#,
    base = const BASE,
    rows = const ROWS,
    options(att_syntax)
);
