//! Grace periods on this kernel's CPUs: the shared core's caller-driven
//! ones ([`CallerDriven`]: only the hotplug controller waits for them,
//! with a deadline) over [`KernelCpus`]. Each turn of a CPU's idle loop
//! (between task slices, which never hold a reference across turns) is a
//! quiescent state and its halt the extended one; the waiting CPU halts
//! and the report that ends the grace period wakes it with the wake-up
//! IPI. What each CPU runs, for a stall's report, it records as it
//! switches ([`crate::arch::cpu::enter_activity`]).
//!
//! Not modelled: interrupt handlers on an idle CPU count as idle (Linux's
//! `rcu_irq_enter` says otherwise); the kernel's handlers read no
//! RCU-protected data.

use hotkern_cpuhp::CpuId;
use hotkern_kernel::rcu::caller_driven::{CallerDriven, RunningCpus};
pub use hotkern_kernel::rcu::Kind;

use crate::arch::smp;
use crate::platform::cpus::KernelCpus;
use crate::platform::failures::FAILURES;

/// How long a grace period (or the hotplug lock) may take before the
/// run reports a stall.
pub const GRACE_TIMEOUT_US: u64 = 5_000_000;

/// The kernel's grace periods (the `call_rcu` callbacks' driver too).
pub static RCU: CallerDriven<KernelCpus> =
    CallerDriven::new(KernelCpus, GRACE_TIMEOUT_US * 1_000, &FAILURES);

/// A grace period waits for the CPUs started and not parked.
impl RunningCpus for KernelCpus {
    fn cpu_count(&self) -> usize {
        smp::cpu_count() as usize
    }

    fn is_running(&self, cpu: CpuId) -> bool {
        smp::is_running(cpu)
    }
}
