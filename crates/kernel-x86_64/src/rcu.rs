//! Grace periods on real CPUs, after Linux's tree RCU reduced to what the
//! hotplug engine needs: a CPU passes a quiescent state at every turn of
//! its idle loop (between task slices, which never hold a reference across
//! turns), and a halted CPU is in an extended quiescent state (Linux's
//! dyntick-idle), as is a parked one. A grace period ends once every other
//! running CPU has been seen quiescent since it began.
//!
//! Who writes what: each CPU writes only its own [`QUIESCENT`] counter and
//! [`IDLE`] flag; [`synchronize`] on the controlling CPU only reads them.
//! The flag goes up and down with `swap` (a locked `xchg`, a full barrier
//! on x86): a reader's loads after leaving idle cannot pass the store that
//! says it left, which is what lets a waiter trust an idle flag it saw up.
//!
//! Not modelled: interrupt handlers running on an idle CPU count as idle
//! (Linux's `rcu_irq_enter` says otherwise); the kernel's handlers read no
//! RCU-protected data.

use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::cpu::{self, MAX_CPUS};
use crate::{smp, tsc};

static QUIESCENT: [AtomicU64; MAX_CPUS] = [const { AtomicU64::new(0) }; MAX_CPUS];
static IDLE: [AtomicBool; MAX_CPUS] = [const { AtomicBool::new(false) }; MAX_CPUS];
static GRACE_PERIODS: AtomicU64 = AtomicU64::new(0);

/// CPU `cpu` passed a quiescent state (its idle loop turned).
pub fn quiescent(cpu: u32) {
    QUIESCENT[cpu as usize].fetch_add(1, Ordering::SeqCst);
}

/// CPU `cpu` is about to halt: quiescent until [`exit_idle`].
pub fn enter_idle(cpu: u32) {
    IDLE[cpu as usize].swap(true, Ordering::SeqCst);
}

/// CPU `cpu` woke from its halt.
pub fn exit_idle(cpu: u32) {
    IDLE[cpu as usize].swap(false, Ordering::SeqCst);
}

/// A CPU that did not report a quiescent state in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stalled(pub u32);

/// Waits for a grace period (Linux's `synchronize_rcu`): every other
/// running CPU is idle, parked, or has turned its loop since the call.
/// Gives up after `timeout_us` and names the CPU that stalled.
#[hotkern_trace::function]
pub fn synchronize(tsc_hz: u64, timeout_us: u64) -> Result<(), Stalled> {
    let me = cpu::current_id().unwrap_or(0);
    let mut seen = [0u64; MAX_CPUS];
    for (cpu, count) in seen.iter_mut().enumerate().take(smp::cpu_count() as usize) {
        *count = QUIESCENT[cpu].load(Ordering::SeqCst);
    }
    let limit = u128::from(tsc_hz) * u128::from(timeout_us) / 1_000_000;
    let started = tsc::now();
    for cpu in (0..smp::cpu_count()).filter(|&cpu| cpu != me) {
        let index = cpu as usize;
        let quiet = || {
            !smp::is_running(cpu)
                || IDLE[index].load(Ordering::SeqCst)
                || QUIESCENT[index].load(Ordering::SeqCst) != seen[index]
        };
        while !quiet() {
            if u128::from(tsc::now() - started) > limit {
                return Err(Stalled(cpu));
            }
            core::hint::spin_loop();
        }
    }
    GRACE_PERIODS.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

/// Grace periods completed.
pub fn grace_periods() -> u64 {
    GRACE_PERIODS.load(Ordering::Relaxed)
}
