//! Grace periods driven by the caller that waits for them, with a
//! deadline: the bare-metal kernel's RCU, where only the hotplug
//! controller waits for grace periods and there is no grace-period thread
//! (the user-mode machine has one, Linux's `rcu_gp` kthread, and keeps it).
//!
//! Which CPUs a grace period waits for is refreshed from the platform's
//! running CPUs ([`RunningCpus`]) as each one starts: the controller
//! starts and parks CPUs itself, so none changes state while it waits. A
//! CPU reports where its loop turns ([`CallerDriven::quiescent`]), halts
//! ([`CallerDriven::enter_idle`], Linux's dyntick-idle) and takes its tick;
//! a grace period past its deadline is a typed [`Stall`] naming the CPUs
//! it waited for and what each ran, as Linux's stall warning. As the
//! [`GracePeriodDriver`] of the `call_rcu` callbacks, a callback's request
//! is the snapshot of the grace period it needs, and the next one the
//! controller drives ends it; a stall there is recorded in [`Failures`].

use hotkern_cpuhp::CpuId;

use super::callbacks::GracePeriodDriver;
use super::{GracePeriods, Kind, Stall};
use crate::cpuset::cpu_id;
use crate::failures::Failures;
use crate::platform::Cpus;
use crate::tick::Hz;

/// A platform's [`Cpus`] and which of them run (started and not parked):
/// the CPUs a grace period must hear from.
pub trait RunningCpus: Cpus {
    /// CPUs known, running or not: `0..cpu_count()`.
    fn cpu_count(&self) -> usize;

    /// Whether `cpu` runs now.
    fn is_running(&self, cpu: CpuId) -> bool;
}

/// Grace periods that their waiting caller drives, each with a deadline
/// of `timeout_ns`, over the platform's CPUs `C`.
///
/// ```
/// use hotkern_cpuhp::CpuId;
/// use hotkern_kernel::failures::Failures;
/// use hotkern_kernel::platform::Cpus;
/// use hotkern_kernel::rcu::caller_driven::{CallerDriven, RunningCpus};
/// use hotkern_kernel::rcu::Kind;
///
/// /// One CPU, the caller's; nothing else runs.
/// struct Alone;
/// impl Cpus for Alone {
///     fn current(&self) -> Option<CpuId> { Some(CpuId(0)) }
///     fn wake(&self, _: CpuId) {}
///     fn wake_threads(&self) {}
///     fn wait_until(&self, condition: &dyn Fn() -> bool) { assert!(condition()) }
/// }
/// impl RunningCpus for Alone {
///     fn cpu_count(&self) -> usize { 1 }
///     fn is_running(&self, cpu: CpuId) -> bool { cpu == CpuId(0) }
/// }
///
/// static FAILURES: Failures = Failures::new(|_| {});
/// static RCU: CallerDriven<Alone> = CallerDriven::new(Alone, 1_000_000, &FAILURES);
/// // The caller is quiescent while it waits: the grace period ends at once.
/// assert_eq!(RCU.synchronize(Kind::Normal), Ok(()));
/// assert_eq!(RCU.completed(), 1);
/// ```
pub struct CallerDriven<C: 'static> {
    grace_periods: GracePeriods,
    cpus: C,
    timeout_ns: u64,
    failures: &'static Failures,
}

impl<C: RunningCpus> CallerDriven<C> {
    /// Grace periods over `cpus`, each given up after `timeout_ns`; a
    /// stall the callbacks' driver meets is recorded in `failures`.
    #[cfg(not(loom))]
    pub const fn new(cpus: C, timeout_ns: u64, failures: &'static Failures) -> Self {
        CallerDriven {
            grace_periods: GracePeriods::new(),
            cpus,
            timeout_ns,
            failures,
        }
    }

    /// Grace periods over `cpus`, each given up after `timeout_ns`.
    #[cfg(loom)]
    pub fn new(cpus: C, timeout_ns: u64, failures: &'static Failures) -> Self {
        CallerDriven {
            grace_periods: GracePeriods::new(),
            cpus,
            timeout_ns,
            failures,
        }
    }

    /// The platform's CPUs.
    pub fn cpus(&self) -> &C {
        &self.cpus
    }

    /// How long a grace period may take before it is a stall.
    pub fn timeout_ns(&self) -> u64 {
        self.timeout_ns
    }

    /// CPU `cpu` passed a quiescent state (its loop turned).
    pub fn quiescent(&self, cpu: CpuId) {
        self.grace_periods.quiescent(&self.cpus, cpu);
    }

    /// CPU `cpu` is about to halt: quiescent until [`exit_idle`](Self::exit_idle).
    pub fn enter_idle(&self, cpu: CpuId) {
        self.grace_periods.enter_idle(&self.cpus, cpu);
    }

    /// CPU `cpu` woke from its halt.
    pub fn exit_idle(&self, cpu: CpuId) {
        self.grace_periods.exit_idle(cpu);
    }

    /// CPU `cpu`'s tick. A halted CPU takes its tick too but reports
    /// nothing, as a CPU whose tick Linux stopped (dyntick-idle): forcing
    /// quiescent states finds it.
    pub fn tick(&self, cpu: CpuId) {
        if !self.grace_periods.is_idle(cpu) {
            self.grace_periods.tick(&self.cpus, cpu);
        }
    }

    /// Sets the tick rate that times normal grace periods.
    pub fn set_hz(&self, hz: Hz) {
        self.grace_periods.set_hz(hz);
    }

    /// Waits for a grace period of `kind` (Linux's `synchronize_rcu` or
    /// `synchronize_rcu_expedited`): every other running CPU is idle or
    /// passed a quiescent state since the call.
    ///
    /// # Errors
    ///
    /// A [`Stall`] naming the CPUs that held it up past the deadline, and
    /// what each ran.
    #[cfg_attr(not(loom), hotkern_trace::function)]
    pub fn synchronize(&self, kind: Kind) -> Result<(), Stall> {
        for cpu in (0..self.cpus.cpu_count()).map(cpu_id) {
            let running = self.cpus.is_running(cpu);
            self.grace_periods.set_online(&self.cpus, cpu, running);
        }
        let deadline = self.cpus.now_ns().saturating_add(self.timeout_ns);
        self.grace_periods
            .synchronize(&self.cpus, kind, Some(deadline))
    }

    /// Whether grace periods wait for `cpu` (the `rcu:starting` step; each
    /// grace period also refreshes it from the running CPUs).
    #[cfg_attr(not(loom), hotkern_trace::function)]
    pub fn set_online(&self, cpu: CpuId, online: bool) {
        self.grace_periods.set_online(&self.cpus, cpu, online);
    }

    /// Whether grace periods wait for `cpu`.
    pub fn is_online(&self, cpu: CpuId) -> bool {
        self.grace_periods.is_online(cpu)
    }

    /// Grace periods completed.
    pub fn completed(&self) -> u64 {
        self.grace_periods.completed()
    }
}

impl<C: RunningCpus + Sync> GracePeriodDriver for CallerDriven<C> {
    /// No thread to wake: the controller's next grace period is the one.
    fn request(&self) -> u64 {
        self.grace_periods.snapshot()
    }

    fn completed(&self) -> u64 {
        CallerDriven::completed(self)
    }

    /// A stall is a failure the run reports.
    fn synchronize(&self) {
        if let Err(stall) = CallerDriven::synchronize(self, Kind::Normal) {
            self.failures.record(format_args!("{stall}"));
        }
    }

    fn set_online(&self, cpu: usize, online: bool) {
        CallerDriven::set_online(self, cpu_id(cpu), online);
    }

    fn is_online(&self, cpu: usize) -> bool {
        CallerDriven::is_online(self, cpu_id(cpu))
    }

    fn this_cpu(&self) -> Option<usize> {
        self.cpus.current().map(CpuId::index)
    }
}

#[cfg(test)]
mod tests;
