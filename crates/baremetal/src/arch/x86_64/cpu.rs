//! Per-CPU state: each CPU's GDT, TSS and double-fault stack, and the block
//! that `%gs` points at.
//!
//! Nothing here is shared between CPUs: each application processor calls
//! [`init`] with its own id (see [`crate::arch::smp`]) and gets its own descriptor
//! tables and fault stack, and [`current`] reads the running CPU's block
//! through `%gs` without a lock.

use core::arch::asm;
use core::cell::UnsafeCell;
use core::mem::size_of;

use hotkern_cpuhp::CpuId;
use hotkern_kernel::rcu::{Activities, Activity};

use crate::arch::instructions::{rdmsr, wrmsr};

/// CPUs the kernel has room for.
pub const MAX_CPUS: usize = 16;

/// Selector of the 64-bit kernel code segment.
pub const KERNEL_CODE: u16 = 0x08;
/// Selector of the kernel data segment.
pub const KERNEL_DATA: u16 = 0x10;
/// Selector of the CPU's TSS.
const TSS_SELECTOR: u16 = 0x18;

/// The interrupt stack table slot the double-fault handler runs on (1-based,
/// as the IDT names it).
pub const DOUBLE_FAULT_IST: u8 = 1;
const DOUBLE_FAULT_STACK_BYTES: usize = 16 * 1024;

/// `IA32_GS_BASE`: the base `%gs` addresses in long mode.
const MSR_GS_BASE: u32 = 0xc000_0101;

/// The 64-bit task state segment: only its stack pointers matter in long
/// mode (Intel SDM vol. 3, "Task Management in 64-bit Mode").
#[repr(C, packed(4))]
struct Tss {
    reserved0: u32,
    privilege_stacks: [u64; 3],
    reserved1: u64,
    interrupt_stacks: [u64; 7],
    reserved2: u64,
    reserved3: u16,
    io_map_base: u16,
}

impl Tss {
    const fn new() -> Self {
        Tss {
            reserved0: 0,
            privilege_stacks: [0; 3],
            reserved1: 0,
            interrupt_stacks: [0; 7],
            reserved2: 0,
            reserved3: 0,
            // Past the limit: no I/O permission bitmap.
            io_map_base: size_of::<Tss>() as u16,
        }
    }
}

/// One CPU's block. `%gs:0` holds its own address, so [`current`] costs one
/// load.
#[repr(C, align(64))]
pub struct PerCpu {
    this: UnsafeCell<*const PerCpu>,
    id: UnsafeCell<u32>,
    gdt: UnsafeCell<[u64; 5]>,
    tss: UnsafeCell<Tss>,
}

impl PerCpu {
    const fn new() -> Self {
        PerCpu {
            this: UnsafeCell::new(core::ptr::null()),
            id: UnsafeCell::new(0),
            gdt: UnsafeCell::new([0; 5]),
            tss: UnsafeCell::new(Tss::new()),
        }
    }

    /// The CPU's number, 0 for the boot CPU.
    pub fn id(&self) -> u32 {
        // SAFETY: written once by `init` on this CPU before `%gs` pointed
        // here; only read afterwards.
        unsafe { *self.id.get() }
    }
}

// SAFETY: a block is written only by its own CPU inside `init`, before it is
// reachable through `%gs`; afterwards it is only read (and the TSS read by
// the CPU itself on a fault).
unsafe impl Sync for PerCpu {}

#[repr(C, align(16))]
struct FaultStack(UnsafeCell<[u8; DOUBLE_FAULT_STACK_BYTES]>);

// SAFETY: each stack is used only by its own CPU, and only by the hardware
// when it delivers a double fault there.
unsafe impl Sync for FaultStack {}

static CPUS: [PerCpu; MAX_CPUS] = [const { PerCpu::new() }; MAX_CPUS];
static FAULT_STACKS: [FaultStack; MAX_CPUS] =
    [const { FaultStack(UnsafeCell::new([0; DOUBLE_FAULT_STACK_BYTES])) }; MAX_CPUS];

#[repr(C, packed(2))]
struct DescriptorPointer {
    limit: u16,
    base: u64,
}

/// A 64-bit code segment: present, DPL 0, execute/read, long mode.
const CODE64: u64 = 0x00af_9a00_0000_ffff;
/// A data segment: present, DPL 0, read/write, 4 GiB.
const DATA: u64 = 0x00cf_9200_0000_ffff;

/// The two GDT words of an available 64-bit TSS at `base`.
fn tss_descriptor(base: u64) -> [u64; 2] {
    let limit = (size_of::<Tss>() - 1) as u64;
    let low = (limit & 0xffff)
        | ((base & 0xff_ffff) << 16)
        | (0x89 << 40)
        | (((limit >> 16) & 0xf) << 48)
        | (((base >> 24) & 0xff) << 56);
    [low, base >> 32]
}

/// Sets up CPU `id` on the CPU that calls it: its GDT with its TSS (and the
/// double-fault stack in IST 1), the segment registers, and `%gs`.
///
/// # Safety
/// Call on that CPU, with interrupts off, with `id` unique and below
/// [`MAX_CPUS`]; again only after the CPU went through INIT (an offline CPU
/// coming back), when nothing of its earlier run is live.
pub unsafe fn init(id: CpuId) {
    let cpu = &CPUS[id.index()];
    let stack = &FAULT_STACKS[id.index()];
    let stack_top = stack.0.get() as u64 + DOUBLE_FAULT_STACK_BYTES as u64;
    // SAFETY: by the contract no other CPU touches this block, and this CPU
    // does not use it (no `%gs`, no TSS) until the loads below.
    unsafe {
        *cpu.this.get() = cpu as *const PerCpu;
        *cpu.id.get() = id.0;
        (*cpu.tss.get()).interrupt_stacks[usize::from(DOUBLE_FAULT_IST) - 1] = stack_top;
        let [tss_low, tss_high] = tss_descriptor(cpu.tss.get() as u64);
        *cpu.gdt.get() = [0, CODE64, DATA, tss_low, tss_high];
    }
    let pointer = DescriptorPointer {
        limit: (size_of::<[u64; 5]>() - 1) as u16,
        base: cpu.gdt.get() as u64,
    };
    // SAFETY: the GDT holds the same code and data selectors the boot GDT
    // had, so reloading CS (far return) and the data segments changes no
    // base or limit; the TSS descriptor is valid and not busy; GS_BASE gets
    // the address of this CPU's block, which lives for the whole run.
    unsafe {
        asm!("lgdt [{}]", in(reg) &pointer, options(readonly, nostack, preserves_flags));
        asm!(
            "push {code}",
            "lea {tmp}, [rip + 2f]",
            "push {tmp}",
            "retfq",
            "2:",
            "mov ds, {data:e}",
            "mov es, {data:e}",
            "mov ss, {data:e}",
            code = in(reg) u64::from(KERNEL_CODE),
            data = in(reg) u32::from(KERNEL_DATA),
            tmp = lateout(reg) _,
            options(preserves_flags),
        );
        asm!("ltr {0:x}", in(reg) TSS_SELECTOR, options(nomem, nostack, preserves_flags));
        wrmsr(MSR_GS_BASE, cpu as *const PerCpu as u64);
    }
}

/// The running CPU's block.
pub fn current() -> &'static PerCpu {
    let this: *const PerCpu;
    // SAFETY: `init` ran on this CPU before anything calls `current` (it is
    // the first thing `kernel_main` does), so `%gs:0` holds the address of
    // one of the static blocks.
    unsafe {
        asm!("mov {}, gs:[0]", out(reg) this, options(readonly, nostack, preserves_flags));
        &*this
    }
}

/// The running CPU's number, or `None` before [`init`] ran on it: for the
/// fault paths, which may run at any time.
pub fn current_id() -> Option<CpuId> {
    // SAFETY: IA32_GS_BASE exists on every x86-64 CPU; reading it has no
    // side effect.
    let base = unsafe { rdmsr(MSR_GS_BASE) };
    (base != 0).then(|| CpuId(current().id()))
}

/// What each CPU runs, for a stall report: recorded here, as the CPU
/// switches (its loop, a thread, a task slice, a call), because the
/// switches are this layer's.
static ACTIVITIES: Activities = Activities::new();

/// CPU `cpu` now runs `activity`; returns what it ran before, which the
/// caller puts back when `activity` ends.
pub fn enter_activity(cpu: CpuId, activity: Activity) -> Activity {
    ACTIVITIES.enter(cpu.index(), activity)
}

/// What CPU `cpu` runs now.
pub fn activity(cpu: CpuId) -> Activity {
    ACTIVITIES.get(cpu.index())
}

/// Sets up an application processor that the trampoline brought to its
/// first Rust code: its per-CPU block, the IDT, its local APIC.
///
/// # Safety
/// As [`init`]: on that CPU, interrupts off, `id` its own number.
pub unsafe fn init_secondary(id: CpuId) {
    // SAFETY: the caller's contract is `init`'s.
    unsafe { init(id) };
    crate::arch::idt::load();
    crate::arch::apic::enable();
}

/// The hypervisor's CPUID signature (`KVMKVMKVM`, `TCGTCGTCGTCG`), if any.
pub fn hypervisor() -> Option<[u8; 12]> {
    crate::arch::instructions::hypervisor()
}
