//! Grace periods on real CPUs. When a grace period is over is the shared
//! kernel's [`hotkern_kernel::rcu`] (after Linux's tree RCU reduced to one
//! node), the same detection the user-mode machine uses; what stays here is
//! where this kernel's CPUs report to it: each turn of a CPU's idle loop
//! (between task slices, which never hold a reference across turns) is a
//! quiescent state, and its halt the extended one (Linux's dyntick-idle).
//! The CPU that waits halts, and the report that ends the grace period
//! wakes it with the wake-up IPI ([`KernelCpus`]).
//!
//! Which CPUs are online for RCU is refreshed from [`smp::is_running`] as
//! each grace period starts: only the hotplug engine waits for grace
//! periods, and it starts and parks CPUs itself, so none changes state
//! while it waits.
//!
//! Not modelled: interrupt handlers running on an idle CPU count as idle
//! (Linux's `rcu_irq_enter` says otherwise); the kernel's handlers read no
//! RCU-protected data.

use hotkern_cpuhp::CpuId;
use hotkern_kernel::rcu::{GracePeriods, Kind, Unfinished};

use crate::stop_machine::KernelCpus;
use crate::{smp, tsc};

/// The kernel's grace periods.
static GRACE_PERIODS: GracePeriods = GracePeriods::new();

/// CPU `cpu` passed a quiescent state (its idle loop turned).
pub fn quiescent(cpu: u32) {
    GRACE_PERIODS.quiescent(&KernelCpus, CpuId(cpu));
}

/// CPU `cpu` is about to halt: quiescent until [`exit_idle`].
pub fn enter_idle(cpu: u32) {
    GRACE_PERIODS.enter_idle(&KernelCpus, CpuId(cpu));
}

/// CPU `cpu` woke from its halt.
pub fn exit_idle(cpu: u32) {
    GRACE_PERIODS.exit_idle(CpuId(cpu));
}

/// A CPU that did not report a quiescent state in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stalled(pub u32);

/// Waits for a grace period (Linux's `synchronize_rcu`): every other
/// running CPU is idle, parked, or has turned its loop since the call.
/// Gives up after `timeout_us` and names a CPU that stalled.
#[hotkern_trace::function]
pub fn synchronize(timeout_us: u64) -> Result<(), Stalled> {
    for cpu in 0..smp::cpu_count() {
        GRACE_PERIODS.set_online(&KernelCpus, CpuId(cpu), smp::is_running(cpu));
    }
    let deadline = tsc::nanos().saturating_add(timeout_us.saturating_mul(1_000));
    GRACE_PERIODS
        .synchronize(&KernelCpus, Kind::Normal, Some(deadline))
        .map_err(|Unfinished(left)| Stalled(left.iter().next().map_or(0, |cpu| cpu.0)))
}

/// Grace periods completed.
pub fn grace_periods() -> u64 {
    GRACE_PERIODS.completed()
}
