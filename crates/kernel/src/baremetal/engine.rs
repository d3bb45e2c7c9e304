//! The hotplug engine's platform on a bare-metal kernel: the shared
//! [`EnginePlatform`] over [`Kernel`] as its [`Hardware`] — a
//! stop-machine member gathered by the architecture's cross-CPU call
//! (whose handler joins, interrupts off, so once every member has joined
//! nothing else runs anywhere), grace periods the controller drives with
//! a deadline, every placement inside the atomic hotplug read side — and
//! starting and stopping CPUs outside the engine.

use alloc::boxed::Box;

use hotkern_cpuhp::{CpuId, CpuSet, PlatformOperation};

use super::{Arch, Kernel};
use crate::hotplug::{Control, EnginePlatform, Hardware};
use crate::hotplug_read::HotplugReadSide;
use crate::power::{Lifecycle, PowerError};
use crate::rcu::{Kind, Stall};
use crate::steps::StepKernel;

/// The engine's platform on a bare-metal kernel.
pub type BareMetalPlatform<A> = EnginePlatform<Kernel<A>>;

impl<A: Arch> Kernel<A> {
    /// What each gathered member runs, from its call handler.
    fn join_stop(_: u64) -> u64 {
        if let Some(control) = Self::control() {
            control.join_stop(&Self::HANDLE);
        }
        0
    }

    /// Starts every CPU of `cpus` at once — each is kicked before any is
    /// waited for, as Linux's parallel bring-up kicks every CPU first —
    /// and halts until all are online, woken by each as it arrives. On
    /// failure, the first CPU that failed and why (the others were still
    /// waited for); a CPU the architecture cannot start is refused
    /// before any is kicked.
    pub fn start_cpus(cpus: CpuSet) -> Result<(), PowerError> {
        Self::startable(cpus)?;
        let deadline = A::now_ns().saturating_add(A::POWER_TIMEOUT_NS);
        A::lives().start_many(&Self::HANDLE, cpus, deadline)
    }

    /// Asks every CPU of `cpus` to park, then halts until all have, woken
    /// by each as it parks: they leave their loops in parallel.
    pub fn stop_cpus(cpus: CpuSet) -> Result<(), PowerError> {
        Self::startable(cpus)?;
        let deadline = A::now_ns().saturating_add(A::POWER_TIMEOUT_NS);
        A::lives().stop_many(&Self::HANDLE, cpus, deadline)
    }

    fn startable(cpus: CpuSet) -> Result<(), PowerError> {
        match cpus.iter().find(|&cpu| A::check_power(cpu).is_err()) {
            Some(cpu) => Err(PowerError::NoSuchCpu(cpu)),
            None => Ok(()),
        }
    }
}

impl<A: Arch> Hardware for Kernel<A> {
    type Cpus = Kernel<A>;
    /// How long a hotplug thread may take to run a step.
    const CALL_TIMEOUT_NS: u64 = 5_000_000_000;
    const POWER_TIMEOUT_NS: u64 = A::POWER_TIMEOUT_NS;

    fn cpus(&self) -> &Kernel<A> {
        self
    }

    /// # Panics
    ///
    /// Before [`Kernel::init_control`]: a run makes it before the engine.
    fn control(&self) -> &Control {
        Self::control().expect("the engine's platform state is made before the engine")
    }

    fn lives(&self) -> &Lifecycle {
        A::lives()
    }

    fn check_power(&self, cpu: CpuId) -> Result<(), &'static str> {
        A::check_power(cpu)
    }

    fn gather(&self, cpu: CpuId) -> Result<(), &'static str> {
        let call = A::post_call(cpu, Self::join_stop)?;
        A::state()
            .calls
            .record(cpu, call)
            .map_err(|_| "no such CPU")
    }

    fn release(&self, cpu: CpuId) -> Result<(), &'static str> {
        A::state().calls.take(cpu).map_or(Ok(()), A::finish_call)
    }

    /// Every placement enters it (the shared `queue_work`, `arm_timer`,
    /// `call_rcu`); tasks go by the active mask into run queues that
    /// `sched:active` closed a grace period before the dying steps.
    fn hotplug_read_side(&self) -> Option<&HotplugReadSide> {
        Some(&Self::mechanisms().hotplug_read)
    }

    fn synchronize(&self, kind: Kind) -> Result<(), Stall> {
        Self::rcu().synchronize(kind)
    }

    fn call_rcu(&self, callback: fn(&Self)) {
        self.defer_free(Box::new(move || callback(&Self::HANDLE)));
    }

    fn without_interrupts<R>(&self, f: impl FnOnce() -> R) -> R {
        A::without_interrupts(f)
    }

    /// The console gets the whole report, as Linux's stall warning (which
    /// CPUs, what each ran, for how long).
    fn report_stall(&self, operation: PlatformOperation, stall: &Stall) {
        A::console(format_args!("hotkern: {operation}: {stall}"));
    }
}
