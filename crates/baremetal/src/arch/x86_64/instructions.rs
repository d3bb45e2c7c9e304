//! The few x86-64 instructions the kernel needs, each behind a function that
//! says what it may and may not do.

use core::arch::asm;

/// Reads a byte from an I/O port.
///
/// # Safety
/// Reading some ports has side effects on devices (a UART's receive
/// register, a PIT latch); the caller knows the device it talks to.
pub unsafe fn inb(port: u16) -> u8 {
    let value: u8;
    // SAFETY: `in` touches only the port and `al`; the caller vouches for
    // the device side effect.
    unsafe {
        asm!("in al, dx", in("dx") port, out("al") value, options(nomem, nostack, preserves_flags))
    };
    value
}

/// Writes a byte to an I/O port.
///
/// # Safety
/// As [`inb`]: the caller knows what the write does to the device.
pub unsafe fn outb(port: u16, value: u8) {
    // SAFETY: `out` touches only the port; the caller vouches for the device.
    unsafe {
        asm!("out dx, al", in("dx") port, in("al") value, options(nomem, nostack, preserves_flags))
    };
}

/// Writes a 32-bit value to an I/O port.
///
/// # Safety
/// As [`outb`].
pub unsafe fn outl(port: u16, value: u32) {
    // SAFETY: `out` touches only the port; the caller vouches for the device.
    unsafe {
        asm!("out dx, eax", in("dx") port, in("eax") value, options(nomem, nostack, preserves_flags))
    };
}

/// Reads a 16-bit value from an I/O port.
///
/// # Safety
/// As [`inb`].
pub unsafe fn inw(port: u16) -> u16 {
    let value: u16;
    // SAFETY: `in` touches only the port and `ax`; the caller vouches for
    // the device side effect.
    unsafe {
        asm!("in ax, dx", in("dx") port, out("ax") value, options(nomem, nostack, preserves_flags))
    };
    value
}

/// Writes a 16-bit value to an I/O port.
///
/// # Safety
/// As [`outb`].
pub unsafe fn outw(port: u16, value: u16) {
    // SAFETY: `out` touches only the port; the caller vouches for the device.
    unsafe {
        asm!("out dx, ax", in("dx") port, in("ax") value, options(nomem, nostack, preserves_flags))
    };
}

/// Reads a 32-bit value from an I/O port.
///
/// # Safety
/// As [`inb`].
pub unsafe fn inl(port: u16) -> u32 {
    let value: u32;
    // SAFETY: `in` touches only the port and `eax`; the caller vouches for
    // the device side effect.
    unsafe {
        asm!("in eax, dx", in("dx") port, out("eax") value, options(nomem, nostack, preserves_flags))
    };
    value
}

/// The time stamp counter.
pub fn rdtsc() -> u64 {
    let (low, high): (u32, u32);
    // SAFETY: `rdtsc` only reads the counter (CR4.TSD is clear: we never set it).
    unsafe {
        asm!("rdtsc", out("eax") low, out("edx") high, options(nomem, nostack, preserves_flags))
    };
    (u64::from(high) << 32) | u64::from(low)
}

/// Reads a model-specific register.
///
/// # Safety
/// The MSR must exist (reading a missing one raises #GP).
pub unsafe fn rdmsr(msr: u32) -> u64 {
    let (low, high): (u32, u32);
    // SAFETY: the caller vouches that the register exists; reading it has no
    // side effect for the MSRs the kernel reads.
    unsafe {
        asm!("rdmsr", in("ecx") msr, out("eax") low, out("edx") high, options(nomem, nostack, preserves_flags))
    };
    (u64::from(high) << 32) | u64::from(low)
}

/// Writes a model-specific register.
///
/// # Safety
/// The MSR must exist and the value must be one the kernel is prepared for
/// (a segment base, a feature bit it handles).
pub unsafe fn wrmsr(msr: u32, value: u64) {
    let (low, high) = (value as u32, (value >> 32) as u32);
    // SAFETY: the caller vouches for the register and the value.
    unsafe {
        asm!("wrmsr", in("ecx") msr, in("eax") low, in("edx") high, options(nostack, preserves_flags))
    };
}

/// The faulting address of the last page fault.
pub fn cr2() -> u64 {
    let value: u64;
    // SAFETY: reading CR2 has no side effect; we run at CPL 0.
    unsafe { asm!("mov {}, cr2", out(reg) value, options(nomem, nostack, preserves_flags)) };
    value
}

/// Runs a serialising instruction on the calling CPU (Linux's
/// `sync_core`): nothing it fetched before runs after. `cpuid` serialises
/// on every x86 CPU and needs no privilege beyond what the kernel has.
pub fn serialize() {
    // SAFETY: cpuid leaf 0 only reads identification registers; rbx is
    // saved around it because LLVM reserves it.
    unsafe {
        core::arch::asm!(
            "mov {saved}, rbx",
            "cpuid",
            "mov rbx, {saved}",
            saved = out(reg) _,
            inout("eax") 0 => _,
            out("ecx") _,
            out("edx") _,
            options(nostack, preserves_flags),
        );
    }
}

/// `cpuid` for `leaf` (sub-leaf 0): `[eax, ebx, ecx, edx]`.
pub fn cpuid(leaf: u32) -> [u32; 4] {
    // The intrinsic is an `unsafe fn` before Rust 1.87 and safe after.
    #[allow(unused_unsafe)]
    // SAFETY: `cpuid` is available on every x86-64 CPU and only reads
    // identification registers.
    let result = unsafe { core::arch::x86_64::__cpuid_count(leaf, 0) };
    [result.eax, result.ebx, result.ecx, result.edx]
}

/// The hypervisor's CPUID signature (leaf 0x4000_0000: "KVMKVMKVM",
/// "TCGTCGTCGTCG", ...), if CPUID says one is present.
pub fn hypervisor() -> Option<[u8; 12]> {
    let hypervisor_present = cpuid(1)[2] & (1 << 31) != 0;
    hypervisor_present.then(|| {
        let [_, ebx, ecx, edx] = cpuid(0x4000_0000);
        let mut signature = [0; 12];
        signature[..4].copy_from_slice(&ebx.to_le_bytes());
        signature[4..8].copy_from_slice(&ecx.to_le_bytes());
        signature[8..].copy_from_slice(&edx.to_le_bytes());
        signature
    })
}

/// Executes `int3`; the breakpoint handler returns to the next instruction.
pub fn breakpoint() {
    // SAFETY: the IDT is loaded before anyone calls this (see `crate::arch::idt`),
    // and its breakpoint handler saves and restores every register.
    unsafe { asm!("int3", options(nomem, nostack)) };
}

/// Masks every line of the two legacy 8259 PICs: the firmware leaves the
/// PIT's IRQ 0 unmasked, and the kernel handles no legacy interrupt (it
/// will take its interrupts through the local APIC), so none may arrive
/// once interrupts are enabled.
pub fn mask_legacy_pic() {
    // SAFETY: ports 0x21 and 0xa1 are the PICs' interrupt mask registers on
    // every PC; masking all lines only stops legacy interrupts, which the
    // kernel does not handle.
    unsafe {
        outb(0x21, 0xff);
        outb(0xa1, 0xff);
    }
}

/// Stops the CPU for good: interrupts off, halt forever.
pub fn halt_forever() -> ! {
    loop {
        // SAFETY: disabling interrupts and halting affects only this CPU,
        // which has nothing left to do.
        unsafe { asm!("cli", "hlt", options(nomem, nostack)) };
    }
}

/// Runs `f` with interrupts off on this CPU and restores the interrupt flag
/// as it was (Linux's `local_irq_save`/`local_irq_restore`). Every lock an
/// interrupt handler may also take is held only inside this, so a handler
/// never spins on a lock its own CPU holds.
pub fn without_interrupts<R>(f: impl FnOnce() -> R) -> R {
    let flags: u64;
    // SAFETY: saving RFLAGS and clearing IF affects only this CPU; IF is
    // restored below exactly as it was.
    unsafe { asm!("pushfq", "pop {}", "cli", out(reg) flags, options(nomem)) };
    let result = f();
    if flags & (1 << 9) != 0 {
        // SAFETY: interrupts were on when we came in, and the IDT has a
        // gate for every vector the local APIC delivers.
        unsafe { asm!("sti", options(nomem, nostack)) };
    }
    result
}
