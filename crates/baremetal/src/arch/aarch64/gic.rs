//! The GICv3 (Arm's "GIC Architecture Specification v3/v4", IHI 0069):
//! the distributor once, each CPU's redistributor and its CPU interface
//! (the `ICC_*_EL1` system registers), the software-generated interrupts
//! the kernel sends between CPUs (SGIs: the wake-up and the call), and the
//! one IRQ entry that acknowledges, dispatches and ends each interrupt.
//!
//! The private interrupts — SGIs and the virtual timer's PPI — are set
//! up in each CPU's redistributor; the one shared interrupt, a PCI
//! device's legacy pin (an SPI, [`route_spi`]), in the distributor, routed
//! to one CPU by affinity. Every interrupt is group 1, the wake-up above
//! the others so that it reaches a CPU inside a call handler.
//! Linux's `drivers/irqchip/irq-gic-v3.c` does the same steps.

use core::arch::asm;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use hotkern_cpuhp::CpuId;

use crate::arch::cpu::{self, MAX_CPUS};
use crate::arch::timer::VIRTUAL_TIMER_INTID;

/// The wake-up SGI: wakes a CPU from `WFI` and does nothing else (x86-64's
/// `WAKE_VECTOR`, Linux's reschedule IPI).
pub const WAKE_SGI: u32 = 0;
/// The call SGI: runs the CPU's mailbox (x86-64's `CALL_VECTOR`).
pub const CALL_SGI: u32 = 1;
/// What the acknowledge register reads when nothing is pending.
const SPURIOUS: u32 = 1023;

/// GICD_CTLR: affinity routing (ARE) and group 1 enabled, the bits of a
/// GIC with one security state, as `-M virt` without EL3 has.
const DISTRIBUTOR_ENABLE: u32 = (1 << 4) | (1 << 1);
/// GICD_CTLR / GICR_CTLR: a register write still in progress.
const WRITE_PENDING: u32 = 1 << 31;
/// Bytes between two CPUs' redistributors (RD_base and SGI_base frames).
const REDISTRIBUTOR_STRIDE: u64 = 0x2_0000;
/// The SGI_base frame, after the RD_base frame.
const SGI_FRAME: u64 = 0x1_0000;
/// The distributor's registers for SPIs (one bit, two bits, a byte or a
/// 64-bit word per INTID).
const GICD_IGROUPR: u64 = 0x80;
const GICD_ISENABLER: u64 = 0x100;
const GICD_ICENABLER: u64 = 0x180;
const GICD_ICPENDR: u64 = 0x280;
const GICD_IPRIORITYR: u64 = 0x400;
const GICD_ICFGR: u64 = 0xc00;
const GICD_IROUTER: u64 = 0x6000;
/// GICD_TYPER: ITLinesNumber, bits 4:0 (32 × (N + 1) INTIDs).
const GICD_TYPER: u64 = 0x04;
const GICR_WAKER: u64 = 0x14;
const GICR_TYPER: u64 = 0x08;
const GICR_IGROUPR0: u64 = SGI_FRAME + 0x80;
const GICR_ISENABLER0: u64 = SGI_FRAME + 0x100;
const GICR_IPRIORITYR: u64 = SGI_FRAME + 0x400;
/// GICR_WAKER: the CPU interface is asleep (ProcessorSleep) / its
/// children are (ChildrenAsleep).
const PROCESSOR_SLEEP: u32 = 1 << 1;
const CHILDREN_ASLEEP: u32 = 1 << 2;
/// GICR_TYPER: this is the last redistributor of the region.
const LAST: u64 = 1 << 4;
/// The priority of the tick and the call: the middle, below the mask's
/// 0xff.
const PRIORITY: u8 = 0x80;
/// The wake-up's, higher (a lower number): a CPU inside a call handler
/// (the call SGI active, its running priority 0x80) waits for the
/// stop-machine's other members with `WFI`, and the GIC signals it only an
/// interrupt of higher priority than the one it runs — x86-64 gives its
/// wake-up vector the highest class for the same reason.
const WAKE_PRIORITY: u8 = 0x40;
/// Polls of a register that waits on the GIC before giving up.
const MAX_POLLS: u32 = 1 << 20;

static DISTRIBUTOR: AtomicU64 = AtomicU64::new(0);
static REDISTRIBUTORS: AtomicU64 = AtomicU64::new(0);
static REDISTRIBUTOR_BYTES: AtomicU64 = AtomicU64::new(0);

/// Why this CPU's part of the GIC could not be set up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GicError {
    /// No redistributor in the region names this CPU's affinity.
    NoRedistributor(u64),
    /// The redistributor did not wake.
    Asleep(u64),
}

impl core::fmt::Display for GicError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            GicError::NoRedistributor(affinity) => {
                write!(f, "no GICv3 redistributor for affinity {affinity:#x}")
            }
            GicError::Asleep(affinity) => {
                write!(
                    f,
                    "the redistributor of affinity {affinity:#x} stays asleep"
                )
            }
        }
    }
}

impl core::error::Error for GicError {}

fn read32(address: u64) -> u32 {
    // SAFETY: `address` is a 32-bit GIC register in the boot map's Device
    // GiB (the device tree's distributor or redistributor region).
    unsafe { (address as *const u32).read_volatile() }
}

fn write32(address: u64, value: u32) {
    // SAFETY: as in `read32`; each write is one IHI 0069 defines.
    unsafe { (address as *mut u32).write_volatile(value) }
}

fn wait_write(control: u64) {
    for _ in 0..MAX_POLLS {
        if read32(control) & WRITE_PENDING == 0 {
            return;
        }
        core::hint::spin_loop();
    }
}

/// `MPIDR_EL1`'s affinity (Aff3 at 39:32) packed as GICR_TYPER's upper
/// word has it (Aff3 at 31:24).
fn packed(affinity: u64) -> u64 {
    (affinity & 0xff_ffff) | ((affinity >> 32) & 0xff) << 24
}

/// Records where the GIC is and turns the distributor on: once, on the
/// boot CPU, before [`init_cpu`].
pub fn init(distributor: u64, redistributors: (u64, u64)) {
    DISTRIBUTOR.store(distributor, Ordering::Relaxed);
    REDISTRIBUTORS.store(redistributors.0, Ordering::Relaxed);
    REDISTRIBUTOR_BYTES.store(redistributors.1, Ordering::Relaxed);
    write32(distributor, 0);
    wait_write(distributor);
    write32(distributor, DISTRIBUTOR_ENABLE);
    wait_write(distributor);
}

/// The calling CPU's redistributor (its RD_base frame).
fn redistributor(affinity: u64) -> Result<u64, GicError> {
    let start = REDISTRIBUTORS.load(Ordering::Relaxed);
    let bytes = REDISTRIBUTOR_BYTES.load(Ordering::Relaxed);
    let want = packed(affinity);
    let mut frame = start;
    while frame + REDISTRIBUTOR_STRIDE <= start + bytes {
        // SAFETY: GICR_TYPER is a 64-bit register of a frame inside the
        // region the device tree names; reading it has no side effect.
        let typer = unsafe { ((frame + GICR_TYPER) as *const u64).read_volatile() };
        if typer >> 32 == want {
            return Ok(frame);
        }
        if typer & LAST != 0 {
            break;
        }
        frame += REDISTRIBUTOR_STRIDE;
    }
    Err(GicError::NoRedistributor(affinity))
}

/// Sets up the calling CPU's redistributor and CPU interface: wakes the
/// redistributor, puts the SGIs and the virtual timer in group 1 at one
/// priority and enables them, then opens the CPU interface (system
/// registers on, priority mask open, group 1 on). Again after each start.
pub fn init_cpu() -> Result<(), GicError> {
    let affinity = cpu::affinity();
    let frame = redistributor(affinity)?;
    write32(
        frame + GICR_WAKER,
        read32(frame + GICR_WAKER) & !PROCESSOR_SLEEP,
    );
    let awake = (0..MAX_POLLS).any(|_| read32(frame + GICR_WAKER) & CHILDREN_ASLEEP == 0);
    if !awake {
        return Err(GicError::Asleep(affinity));
    }
    let enabled = (1 << WAKE_SGI) | (1 << CALL_SGI) | (1 << VIRTUAL_TIMER_INTID);
    write32(frame + GICR_IGROUPR0, u32::MAX);
    for (intid, priority) in [
        (WAKE_SGI, WAKE_PRIORITY),
        (CALL_SGI, PRIORITY),
        (VIRTUAL_TIMER_INTID, PRIORITY),
    ] {
        let register = (frame + GICR_IPRIORITYR + u64::from(intid)) as *mut u8;
        // SAFETY: GICR_IPRIORITYR is byte-accessible, one byte per INTID.
        unsafe { register.write_volatile(priority) };
    }
    write32(frame + GICR_ISENABLER0, enabled);
    // SAFETY: ICC_SRE_EL1.SRE on (system-register access to the CPU
    // interface), the priority mask open to all, binary point 0, group 1
    // on: this CPU's own interface, with IRQs still masked at PSTATE.
    unsafe {
        asm!(
            "mrs {tmp}, S3_0_C12_C12_5",
            "orr {tmp}, {tmp}, #1",
            "msr S3_0_C12_C12_5, {tmp}",
            "isb",
            "msr S3_0_C4_C6_0, {mask}",
            "msr S3_0_C12_C12_3, xzr",
            "msr S3_0_C12_C12_7, {one}",
            "isb",
            tmp = out(reg) _,
            mask = in(reg) 0xffu64,
            one = in(reg) 1u64,
            options(nostack),
        );
    }
    Ok(())
}

/// Sends SGI `intid` to CPU `cpu` (`ICC_SGI1R_EL1`: the target's Aff3..1
/// and its bit in the Aff0 target list, with the range selector for Aff0
/// above 15).
pub fn send_sgi(cpu: CpuId, intid: u32) {
    if cpu.0 >= crate::arch::smp::cpu_count() {
        return;
    }
    let affinity = crate::arch::smp::affinity(cpu);
    let aff0 = affinity & 0xff;
    let value = (1 << (aff0 % 16))
        | (((affinity >> 8) & 0xff) << 16)
        | (u64::from(intid & 0xf) << 24)
        | (((affinity >> 16) & 0xff) << 32)
        | ((aff0 / 16) << 44)
        | (((affinity >> 32) & 0xff) << 48);
    // SAFETY: ICC_SGI1R_EL1 only raises an SGI at the target; the DSB
    // first makes the sender's writes visible before it is taken.
    unsafe { asm!("dsb ishst", "msr S3_0_C12_C11_5, {}", "isb", in(reg) value, options(nostack)) };
}

/// Why an SPI could not be routed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NoSuchSpi(pub u32);

/// Routes SPI `intid` to the CPU of affinity `affinity`, level-sensitive
/// or edge-triggered, group 1 at the device priority, and leaves it
/// disabled (masked) with nothing pending; [`enable_spi`] lets it through.
/// Linux's `gic_set_type` and `gic_set_affinity` write the same registers.
///
/// ```ignore
/// gic::route_spi(36, true, cpu::affinity())?; // masked until:
/// gic::enable_spi(36, true);
/// ```
pub fn route_spi(intid: u32, level: bool, affinity: u64) -> Result<(), NoSuchSpi> {
    let distributor = DISTRIBUTOR.load(Ordering::Relaxed);
    let lines = 32 * ((read32(distributor + GICD_TYPER) & 0x1f) + 1);
    if distributor == 0 || !(32..lines.min(SPURIOUS - 3)).contains(&intid) {
        return Err(NoSuchSpi(intid));
    }
    let word = u64::from(intid / 32) * 4;
    let bit = 1 << (intid % 32);
    write32(distributor + GICD_ICENABLER + word, bit);
    wait_write(distributor);
    write32(
        distributor + GICD_IGROUPR + word,
        read32(distributor + GICD_IGROUPR + word) | bit,
    );
    // SAFETY: GICD_IPRIORITYR is byte-accessible, one byte per INTID.
    unsafe {
        ((distributor + GICD_IPRIORITYR + u64::from(intid)) as *mut u8).write_volatile(PRIORITY)
    };
    // Two bits per INTID; the upper one set means edge-triggered.
    let config = distributor + GICD_ICFGR + u64::from(intid / 16) * 4;
    let edge = 2 << (2 * (intid % 16));
    let value = read32(config) & !edge;
    write32(config, if level { value } else { value | edge });
    // SAFETY: GICD_IROUTER<n> is a 64-bit register; Interrupt_Routing_Mode
    // (bit 31) clear: to the one CPU the affinity fields name.
    unsafe {
        ((distributor + GICD_IROUTER + 8 * u64::from(intid)) as *mut u64)
            .write_volatile(packed_route(affinity))
    };
    write32(distributor + GICD_ICPENDR + word, bit);
    Ok(())
}

/// `MPIDR_EL1`'s affinity as GICD_IROUTER takes it: Aff2..0 in bits
/// 23:0, Aff3 in 39:32, nothing else.
fn packed_route(affinity: u64) -> u64 {
    affinity & 0xff_00ff_ffff
}

/// Lets SPI `intid` through ([`route_spi`] set it up) or stops it.
pub fn enable_spi(intid: u32, enabled: bool) {
    let distributor = DISTRIBUTOR.load(Ordering::Relaxed);
    if distributor == 0 || !(32..SPURIOUS).contains(&intid) {
        return;
    }
    let register = if enabled {
        GICD_ISENABLER
    } else {
        GICD_ICENABLER
    };
    write32(
        distributor + register + u64::from(intid / 32) * 4,
        1 << (intid % 32),
    );
    wait_write(distributor);
}

/// What each interrupt runs, set at boot: `[tick, call, device]`.
static HANDLERS: [AtomicUsize; 3] = [const { AtomicUsize::new(0) }; 3];

/// Sets what a routed SPI runs (a PCI device's pin, see [`route_spi`]).
pub fn set_device_handler(handler: fn()) {
    HANDLERS[2].store(handler as usize, Ordering::Release);
}

/// Sets what the virtual timer's PPI runs (with the CPU's number).
pub fn set_timer_handler(handler: fn(CpuId)) {
    HANDLERS[0].store(handler as usize, Ordering::Release);
}

/// Sets what the call SGI runs.
pub fn set_call_handler(handler: fn(CpuId)) {
    HANDLERS[1].store(handler as usize, Ordering::Release);
}

/// Interrupts taken per CPU, wake-ups among them, for the checks.
static TAKEN: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];
static WAKEUPS: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];

/// Interrupts CPU `cpu` took, and how many of them were wake-ups.
pub fn taken(cpu: CpuId) -> (u64, u64) {
    let index = cpu.index() % MAX_CPUS;
    (
        TAKEN[index].load(Ordering::Relaxed),
        WAKEUPS[index].load(Ordering::Relaxed),
    )
}

/// The IRQ entry (from the vector table): acknowledge (`ICC_IAR1_EL1`),
/// dispatch, end (`ICC_EOIR1_EL1`, priority drop and deactivation).
pub fn interrupt() {
    let intid: u64;
    // SAFETY: reading ICC_IAR1_EL1 acknowledges the highest pending group 1
    // interrupt; it is ended below.
    unsafe { asm!("mrs {}, S3_0_C12_C12_0", out(reg) intid, options(nostack)) };
    let intid = (intid & 0xff_ffff) as u32;
    if intid == SPURIOUS {
        return;
    }
    let cpu = cpu::current_id().unwrap_or(CpuId(0));
    TAKEN[cpu.index() % MAX_CPUS].fetch_add(1, Ordering::Relaxed);
    let handler = |slot: &AtomicUsize| {
        let address = slot.load(Ordering::Acquire);
        // SAFETY: only the setters store there, each a `fn(CpuId)`.
        (address != 0).then(|| unsafe { core::mem::transmute::<usize, fn(CpuId)>(address) })
    };
    match intid {
        VIRTUAL_TIMER_INTID => {
            if let Some(tick) = handler(&HANDLERS[0]) {
                tick(cpu);
            }
        }
        CALL_SGI => {
            if let Some(call) = handler(&HANDLERS[1]) {
                call(cpu);
            }
        }
        32.. => {
            let address = HANDLERS[2].load(Ordering::Acquire);
            if address != 0 {
                // SAFETY: only `set_device_handler` stores there, a `fn()`.
                let device = unsafe { core::mem::transmute::<usize, fn()>(address) };
                // The handler reads the device's status (which lowers a
                // level-sensitive line) before the end of interrupt below.
                device();
            }
        }
        _ => {
            WAKEUPS[cpu.index() % MAX_CPUS].fetch_add(1, Ordering::Relaxed);
        }
    }
    // SAFETY: ends the interrupt acknowledged above.
    unsafe { asm!("msr S3_0_C12_C12_1, {}", "isb", in(reg) u64::from(intid), options(nostack)) };
}
