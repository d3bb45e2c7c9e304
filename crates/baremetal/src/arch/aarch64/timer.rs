//! The clock: the Arm generic timer's virtual count (`CNTVCT_EL0`) at
//! the rate `CNTFRQ_EL0` names, and its virtual timer (`CNTV_*_EL0`, PPI
//! 27 at the GIC), which is the tick (Arm ARM D11, "The Generic Timer in
//! AArch64 state"; Linux's `drivers/clocksource/arm_arch_timer.c`).
//!
//! The count is the same on every CPU (one system counter), so times taken
//! on one CPU compare with another's, as x86-64's invariant TSC does.

use core::arch::asm;
use core::sync::atomic::{AtomicU64, Ordering};

/// The virtual timer's interrupt at the GIC: PPI 11, that is INTID 27
/// (the device tree's `/timer` node lists it third).
pub const VIRTUAL_TIMER_INTID: u32 = 27;

/// `CNTV_CTL_EL0`: enabled, not masked.
const TIMER_ENABLE: u64 = 1;
/// `CNTV_CTL_EL0`: the interrupt masked.
const TIMER_MASK: u64 = 1 << 1;

/// The count's rate, in Hz.
pub fn frequency() -> u64 {
    let hz: u64;
    // SAFETY: reading CNTFRQ_EL0 has no side effect.
    unsafe { asm!("mrs {}, cntfrq_el0", out(reg) hz, options(nomem, nostack)) };
    hz
}

/// The virtual count now.
pub fn now() -> u64 {
    let count: u64;
    // SAFETY: an ISB first so the read is not taken early; no side effect.
    unsafe { asm!("isb", "mrs {}, cntvct_el0", out(reg) count, options(nomem, nostack)) };
    count
}

/// Nanoseconds per tick of the counter in 32.32 fixed point, worked out at
/// the first conversion: every clock reading then costs a multiply, not a
/// 128-bit division, which under TCG is a library call (Linux's
/// clocksource keeps the same `mult`/`shift` pair).
static NANOS_PER_TICK: AtomicU64 = AtomicU64::new(0);

/// Nanoseconds of `count` ticks of the counter.
pub fn ticks_to_nanos(count: u64) -> u64 {
    let mut scale = NANOS_PER_TICK.load(Ordering::Relaxed);
    if scale == 0 {
        let hz = frequency().max(1);
        scale = ((1_000_000_000u128 << 32) / u128::from(hz)) as u64;
        NANOS_PER_TICK.store(scale, Ordering::Relaxed);
    }
    ((u128::from(count) * u128::from(scale)) >> 32) as u64
}

/// The clock, in nanoseconds since the counter started.
pub fn nanos() -> u64 {
    ticks_to_nanos(now())
}

/// Microseconds since `since` (a [`now`] reading).
pub fn micros_since(since: u64) -> Option<u64> {
    Some(ticks_to_nanos(now().saturating_sub(since)) / 1_000)
}

/// Arms the calling CPU's virtual timer to fire in `ticks` counts.
pub fn arm(ticks: u64) {
    // SAFETY: the virtual timer is this CPU's own; its interrupt is
    // handled by the tick handler the GIC routes PPI 27 to.
    unsafe {
        asm!("msr cntv_tval_el0, {}", in(reg) ticks, options(nomem, nostack));
        asm!("msr cntv_ctl_el0, {}", in(reg) TIMER_ENABLE, options(nomem, nostack));
        asm!("isb", options(nomem, nostack));
    }
}

/// Stops the calling CPU's virtual timer (masked and off).
pub fn disarm() {
    // SAFETY: as in `arm`; off, it raises nothing.
    unsafe { asm!("msr cntv_ctl_el0, {}", "isb", in(reg) TIMER_MASK, options(nomem, nostack)) };
}
