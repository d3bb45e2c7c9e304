//! Per-CPU state and the CPU's own instructions: the block `TPIDR_EL1`
//! points at (the kernel's CPU number), the interrupt mask (`DAIF`), the
//! affinity register, and the halts.
//!
//! As on x86-64 (where `%gs` holds the block), nothing here is shared: each
//! CPU sets its own `TPIDR_EL1` in [`init`], and [`current_id`] reads it
//! without a lock. Linux keeps its per-CPU offset in the same register
//! (`arch/arm64/include/asm/percpu.h`).

use core::arch::asm;

use hotkern_cpuhp::CpuId;
use hotkern_kernel::rcu::{Activities, Activity};

/// CPUs the kernel has room for (x86-64's number).
pub const MAX_CPUS: usize = 16;

/// `MPIDR_EL1`'s affinity fields (Aff3 at bits 39:32, Aff2..Aff0 at 23:0).
const AFFINITY_MASK: u64 = 0xff_00ff_ffff;

/// One CPU's block.
#[repr(C, align(64))]
pub struct PerCpu {
    id: u32,
}

impl PerCpu {
    /// The CPU's number, 0 for the boot CPU.
    pub fn id(&self) -> u32 {
        self.id
    }
}

static CPUS: [PerCpu; MAX_CPUS] = {
    let mut cpus = [const { PerCpu { id: 0 } }; MAX_CPUS];
    let mut index = 0;
    while index < MAX_CPUS {
        cpus[index].id = index as u32;
        index += 1;
    }
    cpus
};

/// Points the calling CPU's `TPIDR_EL1` at CPU `id`'s block.
///
/// # Safety
/// Call on that CPU, with `id` unique and below [`MAX_CPUS`].
pub unsafe fn init(id: CpuId) {
    let block = &CPUS[id.index()] as *const PerCpu as u64;
    // SAFETY: TPIDR_EL1 is this CPU's own scratch register; the block is a
    // static that lives for the whole run.
    unsafe { asm!("msr tpidr_el1, {}", in(reg) block, options(nomem, nostack)) };
}

/// Sets up a CPU that PSCI started: its block, the vector table and its
/// part of the GIC.
///
/// # Safety
/// As [`init`]; IRQs masked.
pub unsafe fn init_secondary(id: CpuId) {
    // SAFETY: the caller's promise.
    unsafe { init(id) };
    crate::arch::exceptions::load();
    if let Err(error) = crate::arch::gic::init_cpu() {
        panic!("cpu {}: {error}", id.0);
    }
}

/// The running CPU's block (CPU 0's before [`init`]).
pub fn current() -> &'static PerCpu {
    &CPUS[current_id().map_or(0, |cpu| cpu.index())]
}

/// The hypervisor's signature: arm64 has no CPUID leaf for one (QEMU's
/// TCG runs the guest without a hypervisor interface the guest can ask).
pub fn hypervisor() -> Option<[u8; 12]> {
    None
}

/// The running CPU's number, or `None` before [`init`] ran on it (the
/// entry code zeroes `TPIDR_EL1`).
pub fn current_id() -> Option<CpuId> {
    let block: u64;
    // SAFETY: reading TPIDR_EL1 has no side effect.
    unsafe { asm!("mrs {}, tpidr_el1", out(reg) block, options(nomem, nostack, preserves_flags)) };
    // SAFETY: a non-zero value is the address `init` stored, of a static.
    (block != 0).then(|| CpuId(unsafe { (*(block as *const PerCpu)).id }))
}

/// The calling CPU's affinity (`MPIDR_EL1` less its flag bits).
pub fn affinity() -> u64 {
    let mpidr: u64;
    // SAFETY: reading MPIDR_EL1 has no side effect.
    unsafe { asm!("mrs {}, mpidr_el1", out(reg) mpidr, options(nomem, nostack)) };
    mpidr & AFFINITY_MASK
}

/// Whether the calling CPU takes IRQs now.
pub fn interrupts_enabled() -> bool {
    let daif: u64;
    // SAFETY: reading DAIF has no side effect.
    unsafe { asm!("mrs {}, daif", out(reg) daif, options(nomem, nostack)) };
    daif & (1 << 7) == 0
}

/// Unmasks IRQs on the calling CPU.
pub fn enable_interrupts() {
    // SAFETY: VBAR_EL1 holds the vector table, whose IRQ entry handles
    // every interrupt the GIC delivers.
    unsafe { asm!("msr daifclr, #2", options(nomem, nostack)) };
}

/// Masks IRQs on the calling CPU.
pub fn disable_interrupts() {
    // SAFETY: a masked IRQ stays pending at the GIC until unmasked.
    unsafe { asm!("msr daifset, #2", options(nomem, nostack)) };
}

/// Runs `section` with IRQs masked, restoring the mask after.
pub fn without_interrupts<R>(section: impl FnOnce() -> R) -> R {
    let enabled = interrupts_enabled();
    disable_interrupts();
    let result = section();
    if enabled {
        enable_interrupts();
    }
    result
}

/// Waits for an interrupt with IRQs unmasked only for the wait, then masks
/// them again. Called with IRQs masked: `WFI` wakes on a pending IRQ even
/// while masked (Arm ARM D1.16.2), so one that arrives between the
/// caller's check and the `WFI` is not lost; unmasking after it takes the
/// IRQ, as x86-64's `sti; hlt; cli` does.
pub fn wait_for_interrupt() {
    // SAFETY: as above; the handlers take no lock this CPU holds.
    unsafe {
        asm!(
            "wfi",
            "msr daifclr, #2",
            "isb",
            "msr daifset, #2",
            options(nomem, nostack)
        )
    };
}

/// Halts the calling CPU for good, IRQs masked.
pub fn halt_forever() -> ! {
    disable_interrupts();
    loop {
        // SAFETY: waits for an interrupt; masked, nothing is taken.
        unsafe { asm!("wfi", options(nomem, nostack)) };
    }
}

/// What each CPU runs, for a stall report (as x86-64 keeps it).
static ACTIVITIES: Activities = Activities::new();

/// CPU `cpu` now runs `activity`; returns what it ran before.
pub fn enter_activity(cpu: CpuId, activity: Activity) -> Activity {
    ACTIVITIES.enter(cpu.index(), activity)
}

/// What CPU `cpu` runs now.
pub fn activity(cpu: CpuId) -> Activity {
    ACTIVITIES.get(cpu.index())
}
