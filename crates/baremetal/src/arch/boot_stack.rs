//! The boot CPU's stack and the kernel image, one definition for every
//! architecture. Each architecture's entry code reserves, in its `.bss`,
//! a guard band of [`BOOT_STACK_GUARD_BYTES`] (`boot_stack_guard`)
//! directly below a stack of [`BOOT_STACK_BYTES`] (`boot_stack`), and its
//! linker script brackets the image with `__kernel_start` and
//! `__kernel_end`; what is measured on them is the same everywhere:
//!
//! ```ignore
//! let used = crate::arch::boot::stack_high_water();
//! assert!(!crate::arch::boot::stack_overflowed() && used < BOOT_STACK_BYTES);
//! ```

/// Bytes of the boot CPU's stack, which runs the whole boot and every
/// run after it: a boot with the trace on has used 52 KiB of it.
pub const BOOT_STACK_BYTES: usize = 128 * 1024;

/// Bytes below the boot stack that nothing writes. Neither boot map can
/// leave an unmapped guard page there cheaply (x86-64 maps with 2 MiB
/// pages, arm64 with 1 GiB blocks), so this band stays zero and
/// [`stack_overflowed`] looks at it. On x86-64, without it an overflow
/// silently rewrote the last page directory's entries — the 3–4 GiB MMIO
/// range, the local APIC's among them — and the kernel later faulted far
/// from the cause.
pub const BOOT_STACK_GUARD_BYTES: usize = 4096;

extern "C" {
    static boot_stack_guard: [u64; BOOT_STACK_GUARD_BYTES / 8];
    static boot_stack: [u64; BOOT_STACK_BYTES / 8];
}

/// Whether the boot CPU's stack ever grew past its bottom: some word of
/// the guard band below it is no longer zero. A deep overflow may have
/// reached what lies below too; this is how the kernel finds out at all.
pub fn stack_overflowed() -> bool {
    // SAFETY: the guard is a `.bss` symbol of that many bytes; reads are
    // volatile because the compiler cannot see the stack's writes into it.
    (0..BOOT_STACK_GUARD_BYTES / 8).any(|i| unsafe {
        core::ptr::addr_of!(boot_stack_guard)
            .cast::<u64>()
            .add(i)
            .read_volatile()
            != 0
    })
}

/// The most of the boot stack ever used, in bytes: from the top down to
/// the lowest word that is not zero (the stack starts zeroed with `.bss`;
/// Linux's `stack_not_used` measures the same way). A word the stack left
/// zero makes it an underestimate by that word at most.
pub fn stack_high_water() -> usize {
    // SAFETY: as in `stack_overflowed`; the boot stack is a `.bss` symbol
    // of BOOT_STACK_BYTES, read word by word from its low end.
    let untouched = (0..BOOT_STACK_BYTES / 8)
        .take_while(|&i| unsafe {
            core::ptr::addr_of!(boot_stack)
                .cast::<u64>()
                .add(i)
                .read_volatile()
                == 0
        })
        .count();
    BOOT_STACK_BYTES - untouched * 8
}

/// The kernel image's physical bounds, from the linker script.
pub fn kernel_image() -> (u64, u64) {
    extern "C" {
        static __kernel_start: u8;
        static __kernel_end: u8;
    }
    // Only the addresses of the linker symbols are taken; nothing is read.
    let start = core::ptr::addr_of!(__kernel_start) as u64;
    let end = core::ptr::addr_of!(__kernel_end) as u64;
    (start, end)
}
