//! The local APIC in xAPIC mode: enabling it, end of interrupt, the timer
//! as a periodic tick, and inter-processor interrupts.
//!
//! Register offsets and the ICR encoding are from the Intel SDM vol. 3,
//! chapter "Advanced Programmable Interrupt Controller (APIC)". The
//! registers sit at 0xFEE0_0000, which the boot page tables map uncached
//! (everything from 3 GiB up is UC), so plain volatile accesses reach the
//! device.

use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

use crate::arch::cpu::{self, MAX_CPUS};
use crate::arch::instructions::rdtsc;
use hotkern_cpuhp::CpuId;
use hotkern_kernel::tick::{Hz, Ticks};

/// The xAPIC's MMIO base (the reset value of `IA32_APIC_BASE`).
const BASE: u64 = 0xfee0_0000;

const ID: u64 = 0x20;
const EOI: u64 = 0xb0;
const SPURIOUS: u64 = 0xf0;
const ICR_LOW: u64 = 0x300;
const ICR_HIGH: u64 = 0x310;
const LVT_TIMER: u64 = 0x320;
const TIMER_INITIAL: u64 = 0x380;
const TIMER_CURRENT: u64 = 0x390;
const TIMER_DIVIDE: u64 = 0x3e0;

/// The tick's vector.
pub const TIMER_VECTOR: u8 = 0x20;
/// The cross-CPU call's vector. Its priority class (4) is below
/// [`WAKE_VECTOR`]'s, so a call handler waiting in a stop-machine can still
/// be woken, and above the tick's, which waits until the call is done.
pub const CALL_VECTOR: u8 = 0x40;
/// The vector of a virtio device's configuration-change MSI-X message
/// (`virtio_pci::config_interrupt`). Priority class 3: above the tick,
/// below the cross-CPU call, whose handler it waits for (it only counts).
pub const VIRTIO_CONFIG_VECTOR: u8 = 0x30;
/// The wake-up IPI's vector: wakes a CPU from `hlt` and does nothing else
/// (Linux's reschedule IPI); the highest class, so it reaches a CPU inside
/// a call handler.
pub const WAKE_VECTOR: u8 = 0xf0;
/// The spurious-interrupt vector (low nibble all ones, as older APICs need).
pub const SPURIOUS_VECTOR: u8 = 0xff;

/// Ticks per second: Linux's `CONFIG_HZ`, from the command line's `hz=`
/// ([`set_hz`]) before [`calibrate`].
static TICK_HZ: AtomicU64 = AtomicU64::new(Hz::DEFAULT.get() as u64);

/// Each CPU's scheduler tick as the shared loop keeps it
/// ([`hotkern_kernel::idle`]): the timer interrupt and the idle loop's
/// turns both ask it whether a jiffy's tick is due, and it stops while the
/// CPU idles with nothing that needs it. The timer itself keeps
/// interrupting at HZ, which is what wakes a halt by its deadline.
static SCHED_TICKS: Ticks = Ticks::new(Hz::DEFAULT);

/// Sets the tick rate; before [`calibrate`].
pub fn set_hz(hz: Hz) {
    TICK_HZ.store(u64::from(hz.get()), Ordering::Relaxed);
    SCHED_TICKS.set_hz(hz);
}

/// The scheduler ticks of every CPU.
pub fn sched_ticks() -> &'static Ticks {
    &SCHED_TICKS
}

/// Ticks per second.
pub fn hz() -> u64 {
    TICK_HZ.load(Ordering::Relaxed)
}

/// ICR delivery-status bit: the IPI has not been accepted yet.
const ICR_PENDING: u32 = 1 << 12;
const LVT_MASKED: u32 = 1 << 16;
const LVT_PERIODIC: u32 = 1 << 17;
/// Divide configuration 0b1011: the timer counts at the bus clock.
const DIVIDE_BY_1: u32 = 0b1011;

/// Timer counts per tick, measured once by the boot CPU ([`calibrate`]).
static COUNTS_PER_TICK: AtomicU32 = AtomicU32::new(0);

/// Ticks taken per CPU (by CPU number).
static TICKS: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];

fn read(offset: u64) -> u32 {
    // SAFETY: the xAPIC page is identity-mapped uncached and every offset
    // used here is a 32-bit register of it; reading has no side effect.
    unsafe { core::ptr::read_volatile((BASE + offset) as *const u32) }
}

fn write(offset: u64, value: u32) {
    // SAFETY: as `read`; each write is one the SDM defines for the register.
    unsafe { core::ptr::write_volatile((BASE + offset) as *mut u32, value) }
}

/// The running CPU's APIC id.
pub fn id() -> u32 {
    read(ID) >> 24
}

/// Software-enables the calling CPU's APIC with the spurious vector, and
/// leaves its timer masked.
pub fn enable() {
    write(LVT_TIMER, LVT_MASKED | u32::from(TIMER_VECTOR));
    write(SPURIOUS, 0x100 | u32::from(SPURIOUS_VECTOR));
    eoi();
}

/// Signals the end of the interrupt being handled.
pub fn eoi() {
    write(EOI, 0);
}

/// Measures the timer's rate against the TSC (`tsc_hz`) for about 10 ms and
/// returns the timer's frequency in Hz; 0 if the timer did not count.
pub fn calibrate(tsc_hz: u64) -> u64 {
    write(TIMER_DIVIDE, DIVIDE_BY_1);
    write(LVT_TIMER, LVT_MASKED | u32::from(TIMER_VECTOR));
    let window = tsc_hz / 100;
    let start = rdtsc();
    write(TIMER_INITIAL, u32::MAX);
    while rdtsc() - start < window {
        core::hint::spin_loop();
    }
    let counted = u64::from(u32::MAX - read(TIMER_CURRENT));
    let elapsed = rdtsc() - start;
    write(TIMER_INITIAL, 0);
    if counted == 0 || elapsed == 0 {
        return 0;
    }
    let hz = (u128::from(counted) * u128::from(tsc_hz) / u128::from(elapsed)) as u64;
    COUNTS_PER_TICK.store(
        (hz / self::hz()).clamp(1, u64::from(u32::MAX)) as u32,
        Ordering::Relaxed,
    );
    hz
}

/// Starts the periodic tick on the calling CPU (after [`calibrate`]).
pub fn start_tick() {
    SCHED_TICKS.start(current().index(), crate::arch::tsc::nanos());
    let counts = COUNTS_PER_TICK.load(Ordering::Relaxed);
    if counts == 0 {
        return;
    }
    write(TIMER_DIVIDE, DIVIDE_BY_1);
    write(LVT_TIMER, LVT_PERIODIC | u32::from(TIMER_VECTOR));
    write(TIMER_INITIAL, counts);
}

/// Stops the calling CPU's tick.
pub fn stop_tick() {
    SCHED_TICKS.stop(current().index());
    write(LVT_TIMER, LVT_MASKED | u32::from(TIMER_VECTOR));
    write(TIMER_INITIAL, 0);
}

/// What a tick runs beyond counting: the platform's shared tick (RCU's,
/// timers'), handed over at boot by [`set_tick_handler`]; nothing before.
static TICK_HANDLER: AtomicUsize = AtomicUsize::new(0);

/// Has every later tick run `handler(cpu)` (the layer above owns what a
/// tick does; this one only takes the interrupt).
pub fn set_tick_handler(handler: fn(CpuId)) {
    TICK_HANDLER.store(handler as usize, Ordering::Release);
}

/// The tick handler: counts, runs the platform's tick, and acknowledges.
pub fn tick(cpu: CpuId) {
    if let Some(ticks) = TICKS.get(cpu.index()) {
        ticks.fetch_add(1, Ordering::Relaxed);
    }
    let address = TICK_HANDLER.load(Ordering::Acquire);
    if address != 0 {
        // SAFETY: only `set_tick_handler` stores here, a `fn(CpuId)`.
        let handler: fn(CpuId) = unsafe { core::mem::transmute(address) };
        handler(cpu);
    }
    eoi();
}

/// The calling CPU's number (the boot CPU before its per-CPU area is set
/// up is CPU 0).
fn current() -> CpuId {
    cpu::current_id().unwrap_or(CpuId(0))
}

/// Ticks CPU `cpu` has taken.
pub fn ticks(cpu: CpuId) -> u64 {
    TICKS
        .get(cpu.index())
        .map_or(0, |ticks| ticks.load(Ordering::Relaxed))
}

/// Sends an IPI (`command` is the ICR's low word) to the APIC `apic_id` and
/// waits until the local APIC has accepted it.
///
/// With interrupts off: the ICR is two registers, and a handler that sends
/// an IPI of its own between the two writes (the tick reporting to RCU
/// wakes a grace period's driver; a stop-machine's last arriver wakes the
/// others) would send the interrupted one to its own destination.
fn send(apic_id: u32, command: u32) {
    crate::arch::instructions::without_interrupts(|| {
        write(ICR_HIGH, apic_id << 24);
        write(ICR_LOW, command);
        while read(ICR_LOW) & ICR_PENDING != 0 {
            core::hint::spin_loop();
        }
    });
}

/// INIT, level assert: resets the target into wait-for-SIPI.
pub fn send_init(apic_id: u32) {
    send(apic_id, 0x0000_4500);
}

/// Start-up IPI: the target starts in real mode at `page << 12`.
pub fn send_startup(apic_id: u32, page: u8) {
    send(apic_id, 0x0000_4600 | u32::from(page));
}

/// A fixed interrupt on `vector`.
pub fn send_fixed(apic_id: u32, vector: u8) {
    send(apic_id, 0x0000_4000 | u32::from(vector));
}

/// The local APIC's MSI window (Intel SDM vol. 3, "Message Address
/// Register Format").
const MSI_ADDRESS: u64 = 0xfee0_0000;

/// Where a device's interrupt goes: a vector on one local APIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceTarget {
    /// The IDT vector, 0x20 or above.
    pub vector: u8,
    /// The destination's local APIC id (xAPIC: 0 to 254).
    pub apic_id: u32,
}

impl DeviceTarget {
    /// The MSI message address and data that deliver [`Self::vector`] to
    /// [`Self::apic_id`], fixed and edge-triggered (the SDM's "Message
    /// Signalled Interrupts": destination in address bits 12–19, data the
    /// vector); `None` for an xAPIC destination above 254 or a vector
    /// below 0x20, which no message reaches.
    pub fn message(self) -> Option<(u64, u32)> {
        if self.apic_id > 254 || self.vector < 0x20 {
            return None;
        }
        Some((
            MSI_ADDRESS | u64::from(self.apic_id) << 12,
            u32::from(self.vector),
        ))
    }
}
