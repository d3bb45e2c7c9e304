//! From QEMU's PVH entry to Rust: the Xen ELF note, the 32-bit entry, the
//! boot page tables and the jump to long mode.
//!
//! The x86/HVM direct boot ABI (Xen's `docs/misc/pvh.pandoc`, which QEMU
//! implements for `-kernel` ELF images) enters at the address in the
//! `XEN_ELFNOTE_PHYS32_ENTRY` note, in 32-bit protected mode with paging
//! off, interrupts off, flat 4 GiB segments and `%ebx` holding the physical
//! address of the `hvm_start_info` (see [`crate::arch::pvh`]). Linux enters the
//! same way in `arch/x86/platform/pvh/head.S`.
//!
//! The entry code, in order:
//! 1. reads the TSC, so the boot time covers everything the kernel does;
//! 2. clears `.bss` (the page tables and the boot stack live there);
//! 3. identity-maps the first 4 GiB with 2 MiB pages, write-back below
//!    3 GiB and uncached above (the PCI hole, the I/O APIC, the local APIC);
//! 4. turns on PAE, long mode (EFER.LME) and paging, loads a boot GDT with a
//!    64-bit code segment and far-jumps into it;
//! 5. sets the boot stack and calls [`pvh_main`] with the start info's
//!    physical address, which sets up the boot CPU, copies the start info
//!    into the contract's `BootInfo` and calls the shared `kernel_main`.
//!
//! Rust replaces the boot GDT with the CPU's own (with its TSS) in
//! [`crate::arch::cpu`].

use core::sync::atomic::{AtomicU64, Ordering};

pub use crate::arch::boot_info::BootInfo;
use crate::arch::console::{self, println};
use crate::arch::{cpu, instructions, interrupts, pvh, smp};

/// The x86-64 side of the boot: COM1, the boot CPU's per-CPU block and
/// IDT, the legacy PICs masked, the start info copied out; then the
/// shared boot sequence, `kernel_main` in `main.rs`, which every
/// architecture's entry calls with its [`BootInfo`].
#[no_mangle]
extern "C" fn pvh_main(start_info: u32) -> ! {
    extern "Rust" {
        // The shared boot sequence (`main.rs`). Named by symbol, not by
        // path, so that the arch layer does not use the crate's root.
        fn kernel_main(info: BootInfo) -> !;
    }
    console::init();
    println!(
        "hotkern: {} kernel booting, PVH start info at {start_info:#x}",
        crate::arch::NAME
    );
    // SAFETY: the boot CPU, once, interrupts off (the PVH entry state).
    unsafe { cpu::init(smp::BOOT_CPU) };
    interrupts::init();
    instructions::mask_legacy_pic();
    // SAFETY: the address came from %ebx at the PVH entry, and nothing has
    // allocated memory yet.
    let info = match unsafe { pvh::read(u64::from(start_info)) } {
        Ok(info) => info,
        Err(error) => panic!("PVH start info: {error}"),
    };
    info.print("ACPI RSDP");
    // SAFETY: `kernel_main` is defined once, in main.rs, with this
    // signature, and is entered once, on the boot CPU.
    unsafe { kernel_main(info) }
}

use crate::arch::boot_stack::BOOT_STACK_GUARD_BYTES;
pub use crate::arch::boot_stack::{
    kernel_image, stack_high_water, stack_overflowed, BOOT_STACK_BYTES,
};

/// Where the uncached part of the identity map starts: QEMU's PCI hole, the
/// I/O APIC and the local APIC all lie between 3 GiB and 4 GiB.
pub const MMIO_START: u64 = 3 << 30;

/// The end of the identity map: memory above it is not mapped (physmem
/// tracks it, nothing touches it).
pub const IDENTITY_MAP_END: u64 = 4 << 30;

/// The TSC at the first instruction of the kernel, written by the entry
/// code once `.bss` is clear.
#[no_mangle]
static BOOT_TSC: AtomicU64 = AtomicU64::new(0);

/// The TSC value the entry code read before doing anything else.
pub fn boot_tsc() -> u64 {
    BOOT_TSC.load(Ordering::Relaxed)
}

/// The clock (`arch::clock::now`) at the kernel's first instruction.
pub fn started_at() -> u64 {
    boot_tsc()
}

// The note's descriptor is 8 bytes (the entry, zero-extended): Xen reads 4
// or 8 by the descriptor size, QEMU 7.2 reads 8 whatever the size says.
core::arch::global_asm!(
    r#"
    .section .note.Xen, "a", @note
    .balign 4
    .long 4
    .long 8
    .long 18
    .asciz "Xen"
    .balign 4
    .quad pvh_entry
    .balign 4

    .section .bss.boot, "aw", @nobits
    .balign 4096
boot_pml4:
    .skip 4096
boot_pdpt:
    .skip 4096
boot_pd:
    .skip 4 * 4096
    // Zero, and never written: an overflowing boot stack reaches it before
    // the page tables (see `stack_overflowed`).
    .global boot_stack_guard
boot_stack_guard:
    .skip {guard}
    .global boot_stack
boot_stack:
    .skip {stack}
boot_stack_top:

    .section .rodata.boot, "a"
    .balign 16
boot_gdt:
    .quad 0
    .quad 0x00af9a000000ffff
    .quad 0x00cf92000000ffff
boot_gdt_end:
    .balign 4
    .word 0
boot_gdt_ptr:
    .word boot_gdt_end - boot_gdt - 1
    .long boot_gdt

    .section .text.boot, "ax", @progbits
    .code32
    .global pvh_entry
pvh_entry:
    cli
    cld
    rdtsc
    mov %eax, %esi
    mov %edx, %ebp

    mov $__bss_start, %edi
    mov $__bss_end, %ecx
    sub %edi, %ecx
    xor %eax, %eax
    rep stosb
    mov %esi, BOOT_TSC
    mov %ebp, BOOT_TSC + 4

    mov $boot_pdpt + 0x3, %eax
    mov %eax, boot_pml4
    mov $boot_pd + 0x3, %eax
    mov %eax, boot_pdpt
    add $0x1000, %eax
    mov %eax, boot_pdpt + 8
    add $0x1000, %eax
    mov %eax, boot_pdpt + 16
    add $0x1000, %eax
    mov %eax, boot_pdpt + 24

    mov $boot_pd, %edi
    mov $0x83, %eax
    xor %ecx, %ecx
1:
    cmp ${mmio_pages}, %ecx
    jb 2f
    or $0x18, %eax
2:
    mov %eax, (%edi,%ecx,8)
    add $0x200000, %eax
    inc %ecx
    cmp $2048, %ecx
    jb 1b

    mov $boot_pml4, %eax
    mov %eax, %cr3
    mov %cr4, %eax
    or $0x20, %eax
    mov %eax, %cr4
    mov $0xc0000080, %ecx
    rdmsr
    or $0x100, %eax
    wrmsr
    mov %cr0, %eax
    or $0x80010001, %eax
    mov %eax, %cr0

    lgdt boot_gdt_ptr
    ljmp $0x08, $long_mode_entry

    .code64
long_mode_entry:
    mov $0x10, %eax
    mov %eax, %ds
    mov %eax, %es
    mov %eax, %ss
    xor %eax, %eax
    mov %eax, %fs
    mov %eax, %gs
    mov $boot_stack_top, %rsp
    xor %ebp, %ebp
    mov %ebx, %edi
    call pvh_main
3:
    cli
    hlt
    jmp 3b
    "#,
    stack = const BOOT_STACK_BYTES,
    guard = const BOOT_STACK_GUARD_BYTES,
    mmio_pages = const MMIO_START / (2 << 20),
    options(att_syntax)
);
