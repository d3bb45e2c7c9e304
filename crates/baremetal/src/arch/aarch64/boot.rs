//! From QEMU's `-kernel` entry to Rust: clear `.bss`, the boot page
//! tables, the MMU, the boot stack and the jump to `kernel_main`; and the
//! same path, less the clearing and the tables, for a CPU that PSCI's
//! `CPU_ON` starts.
//!
//! QEMU's `-M virt` (its `hw/arm/boot.c`) loads an ELF `-kernel` at its
//! physical addresses and starts the boot CPU at the ELF entry in EL1,
//! MMU and caches off, interrupts masked, the other CPUs powered off (PSCI
//! starts them), and the device tree at the start of RAM. Linux's
//! `arch/arm64/kernel/head.S` does the same steps for its own image.
//!
//! The boot identity map is three levels short: one level-0 entry (the
//! first 512 GiB) pointing at a level-1 table of 1 GiB blocks, the first
//! GiB Device-nGnRE (the GIC, the PL011, virtio-mmio, PCIe's low windows),
//! the next [`BOOT_RAM_GIB`] GiB Normal write-back (RAM starts at 1 GiB).
//! The MMU goes on before any Rust code runs: with it off every data access
//! is to Device memory, where an unaligned access faults and the exclusive
//! loads and stores that atomics use are not promised to work.

use core::sync::atomic::{AtomicU64, Ordering};

pub use crate::arch::boot_info::BootInfo;

use crate::arch::boot_stack::BOOT_STACK_GUARD_BYTES;
pub use crate::arch::boot_stack::{
    kernel_image, stack_high_water, stack_overflowed, BOOT_STACK_BYTES,
};

/// Where `-M virt`'s PCIe MMIO window starts (QEMU's `hw/arm/virt.c`,
/// `VIRT_PCIE_MMIO`), inside the boot map's Device GiB: the contract's
/// device window, `[MMIO_START, RAM_WINDOW_START)`.
pub const MMIO_START: u64 = 0x1000_0000;

/// GiB of RAM the boot map covers, from 1 GiB (where `-M virt`'s RAM
/// starts) up; RAM beyond it is mapped only when plugged, as x86-64's
/// above 4 GiB. One, because `virt` puts its memory devices (virtio-mem's
/// region) at the first GiB boundary after boot RAM — 2 GiB for up to
/// 1 GiB of RAM — and the direct map, which maps their plugged blocks,
/// starts where the boot map ends.
pub const BOOT_RAM_GIB: u64 = 1;

/// Where the boot identity map's Device-memory GiB ends and RAM begins
/// (`-M virt`'s RAM starts here).
pub const RAM_WINDOW_START: u64 = 1 << 30;

/// The end of the boot identity map.
pub const IDENTITY_MAP_END: u64 = RAM_WINDOW_START + (BOOT_RAM_GIB << 30);

/// `MAIR_EL1`: attribute 0 Device-nGnRE, attribute 1 Normal write-back
/// read/write-allocate, inner and outer (Arm ARM D8.5.3).
pub const MAIR: u64 = 0x04 | (0xff << 8);
/// A level-1 block descriptor's bits for Normal write-back RAM: valid
/// block, attribute 1, inner shareable, access flag set, EL1 read/write.
pub const NORMAL_BLOCK: u64 = 0b01 | (1 << 2) | (0b11 << 8) | (1 << 10);
/// A block descriptor's bits for device registers: attribute 0, access
/// flag, never executable (PXN, UXN).
pub const DEVICE_BLOCK: u64 = 0b01 | (1 << 10) | (1 << 53) | (1 << 54);
/// `TCR_EL1` less its physical-address size: 48-bit addresses through
/// `TTBR0_EL1` (T0SZ 16), 4 KiB granule, walks write-back and inner
/// shareable; `TTBR1_EL1` walks off (EPD1), its granule named (TG1 4 KiB)
/// because the field must hold a valid value even then.
pub const TCR: u64 = 16 | (1 << 8) | (1 << 10) | (0b11 << 12) | (1 << 23) | (0b10 << 30);

/// The generic timer's count at the kernel's first instruction.
#[no_mangle]
static BOOT_COUNTER: AtomicU64 = AtomicU64::new(0);

/// What `CNTVCT_EL0` read before the kernel did anything else.
pub fn started_at() -> u64 {
    BOOT_COUNTER.load(Ordering::Relaxed)
}

/// The level-1 table of the boot map: the memory bring-up adds the RAM
/// blocks beyond [`IDENTITY_MAP_END`] to it.
pub fn boot_level1() -> *mut u64 {
    extern "C" {
        static mut boot_level1: [u64; 512];
    }
    // Only the address is taken.
    core::ptr::addr_of_mut!(boot_level1).cast()
}

/// Where each CPU that PSCI starts finds its stack top and its first Rust
/// function, read by `arm64_secondary_entry` before its MMU is on.
#[no_mangle]
pub static SECONDARY_STACK_TOPS: [AtomicU64; super::cpu::MAX_CPUS] =
    [const { AtomicU64::new(0) }; super::cpu::MAX_CPUS];
/// The Rust function a started CPU calls with its number.
#[no_mangle]
pub static SECONDARY_RUST_ENTRY: AtomicU64 = AtomicU64::new(0);

extern "C" {
    /// The physical address PSCI's `CPU_ON` starts a CPU at.
    pub fn arm64_secondary_entry();
}

core::arch::global_asm!(
    r#"
    .section .bss.boot, "aw", @nobits
    .balign 4096
    .global boot_level0
boot_level0:
    .skip 4096
    .global boot_level1
boot_level1:
    .skip 4096
    .global boot_stack_guard
boot_stack_guard:
    .skip {guard}
    .global boot_stack
boot_stack:
    .skip {stack}
boot_stack_top:

    .section .text.boot, "ax", @progbits
    .global arm64_entry
arm64_entry:
    mrs x19, cntvct_el0
    mov x20, x0
    msr daifset, #0xf
    msr tpidr_el1, xzr

    adrp x1, __bss_start
    add x1, x1, :lo12:__bss_start
    adrp x2, __bss_end
    add x2, x2, :lo12:__bss_end
1:
    cmp x1, x2
    b.hs 2f
    str xzr, [x1], #8
    b 1b
2:
    adrp x1, BOOT_COUNTER
    str x19, [x1, :lo12:BOOT_COUNTER]

    adrp x1, boot_level0
    adrp x2, boot_level1
    orr x3, x2, #3
    str x3, [x1]
    ldr x3, ={device}
    str x3, [x2]
    ldr x6, ={normal}
    mov x4, #1
3:
    lsl x5, x4, #30
    orr x5, x5, x6
    str x5, [x2, x4, lsl #3]
    add x4, x4, #1
    cmp x4, #{ram_end_gib}
    b.lo 3b

    bl arm64_mmu_on
    adrp x1, boot_stack_top
    add x1, x1, :lo12:boot_stack_top
    mov sp, x1
    mov x29, xzr
    mov x30, xzr
    mov x0, x20
    mov x1, x19
    bl arm64_main
4:
    wfi
    b 4b

    .global arm64_secondary_entry
arm64_secondary_entry:
    msr daifset, #0xf
    msr tpidr_el1, xzr
    mov x19, x0
    bl arm64_mmu_on
    adrp x1, SECONDARY_STACK_TOPS
    add x1, x1, :lo12:SECONDARY_STACK_TOPS
    ldr x2, [x1, x19, lsl #3]
    mov sp, x2
    mov x29, xzr
    mov x30, xzr
    adrp x1, SECONDARY_RUST_ENTRY
    ldr x2, [x1, :lo12:SECONDARY_RUST_ENTRY]
    mov x0, x19
    blr x2
5:
    wfi
    b 5b

arm64_mmu_on:
    ldr x1, ={mair}
    msr mair_el1, x1
    mrs x1, id_aa64mmfr0_el1
    and x1, x1, #7
    ldr x2, ={tcr}
    orr x2, x2, x1, lsl #32
    msr tcr_el1, x2
    adrp x1, boot_level0
    msr ttbr0_el1, x1
    isb
    tlbi vmalle1
    dsb ish
    isb
    mrs x1, sctlr_el1
    orr x1, x1, #(1 << 0)
    orr x1, x1, #(1 << 2)
    orr x1, x1, #(1 << 12)
    bic x1, x1, #(1 << 1)
    msr sctlr_el1, x1
    isb
    ret
    .ltorg
    "#,
    stack = const BOOT_STACK_BYTES,
    guard = const BOOT_STACK_GUARD_BYTES,
    device = const DEVICE_BLOCK,
    normal = const NORMAL_BLOCK,
    ram_end_gib = const 1 + BOOT_RAM_GIB,
    mair = const MAIR,
    tcr = const TCR,
);
