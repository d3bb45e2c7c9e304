//! Grace periods on real CPUs. When a grace period is over is the shared
//! kernel's [`hotkern_kernel::rcu`] (after Linux's tree RCU reduced to one
//! node), the same detection the user-mode machine uses; what stays here is
//! where this kernel's CPUs report to it: each turn of a CPU's idle loop
//! (between task slices, which never hold a reference across turns) is a
//! quiescent state, and its halt the extended one (Linux's dyntick-idle).
//! The CPU that waits halts, and the report that ends the grace period
//! wakes it with the wake-up IPI ([`Kernel`]).
//!
//! Which CPUs are online for RCU is refreshed from [`smp::is_running`] as
//! each grace period starts: only the hotplug engine waits for grace
//! periods, and it starts and parks CPUs itself, so none changes state
//! while it waits.
//!
//! A stalled grace period is reported as Linux's stall warning reports it
//! ([`Stall`]), with what each CPU it waits for was running: each CPU
//! records that as it switches ([`crate::arch::cpu::enter_activity`]: its idle loop, a kernel
//! thread, a task slice, a cross-CPU call), one relaxed byte per switch.
//!
//! The `call_rcu` callbacks are the shared kernel's
//! ([`hotkern_kernel::rcu::callbacks`]); what they ask of this kernel's
//! grace periods is [`Controller`]: only the hotplug controller drives
//! them, so a callback's request is the snapshot of the grace period it
//! needs, and the next one the controller drives ends it.
//!
//! Not modelled: interrupt handlers running on an idle CPU count as idle
//! (Linux's `rcu_irq_enter` says otherwise); the kernel's handlers read no
//! RCU-protected data.

use hotkern_cpuhp::CpuId;
use hotkern_kernel::cpuset::cpu_id;
use hotkern_kernel::rcu::callbacks::GracePeriodDriver;
use hotkern_kernel::rcu::GracePeriods;
pub use hotkern_kernel::rcu::{Kind, Stall};
use hotkern_kernel::tick::Hz;

use crate::arch::cpu;
use crate::arch::smp;
use crate::arch::tsc;
use crate::platform::failures;
use crate::platform::Kernel;

/// How long a grace period (or the hotplug lock) may take before the
/// run reports a stall.
pub const GRACE_TIMEOUT_US: u64 = 5_000_000;

/// The kernel's grace periods.
pub static GRACE_PERIODS: GracePeriods = GracePeriods::new();

/// Sets the tick rate that times normal grace periods.
pub fn set_hz(hz: Hz) {
    GRACE_PERIODS.set_hz(hz);
}

/// Waits for a grace period of `kind` (Linux's `synchronize_rcu` or
/// `synchronize_rcu_expedited`): every other running CPU is idle, parked,
/// or has passed a quiescent state since the call. Gives up after
/// `timeout_us` and says which CPUs stalled it and what they ran.
#[hotkern_trace::function]
pub fn synchronize(kind: Kind, timeout_us: u64) -> Result<(), Stall> {
    for cpu in smp::cpus() {
        GRACE_PERIODS.set_online(&Kernel::HANDLE, cpu, smp::is_running(cpu));
    }
    let deadline = tsc::nanos().saturating_add(timeout_us.saturating_mul(1_000));
    GRACE_PERIODS.synchronize(&Kernel::HANDLE, kind, Some(deadline))
}

/// Whether grace periods wait for `cpu` (the `rcu:starting` step; each
/// grace period also refreshes it from the running CPUs).
#[hotkern_trace::function]
pub fn set_online(cpu: CpuId, online: bool) {
    GRACE_PERIODS.set_online(&Kernel::HANDLE, cpu, online);
}

/// Whether grace periods wait for `cpu`.
pub fn is_online(cpu: CpuId) -> bool {
    GRACE_PERIODS.is_online(cpu)
}

/// The grace period a callback queued now waits for (Linux's
/// `rcu_seq_snap`), to compare with [`grace_periods`].
pub fn snapshot() -> u64 {
    GRACE_PERIODS.snapshot()
}

/// Grace periods completed.
pub fn grace_periods() -> u64 {
    GRACE_PERIODS.completed()
}

/// This kernel's grace periods as its RCU callbacks see them: driven by
/// the hotplug controller on its CPU, each with a deadline.
pub struct Controller;

impl GracePeriodDriver for Controller {
    /// No thread to wake: the controller's next grace period is the one.
    fn request(&self) -> u64 {
        snapshot()
    }

    fn completed(&self) -> u64 {
        grace_periods()
    }

    /// A stall is a failure the run reports.
    fn synchronize(&self) {
        if let Err(stall) = synchronize(Kind::Normal, GRACE_TIMEOUT_US) {
            failures::platform_failed(format_args!("{stall}"));
        }
    }

    fn set_online(&self, cpu: usize, online: bool) {
        set_online(cpu_id(cpu), online);
    }

    fn is_online(&self, cpu: usize) -> bool {
        is_online(cpu_id(cpu))
    }

    fn this_cpu(&self) -> Option<usize> {
        cpu::current_id().map(CpuId::index)
    }
}
