//! This kernel's hardware under the shared engine platform
//! ([`hotkern_kernel::hotplug`]): CPUs that halt and take IPIs
//! ([`Kernel`]), started by INIT-SIPI-SIPI and parked with interrupts
//! off ([`crate::arch::smp`]); a stop-machine gathers each member with a
//! cross-CPU call whose handler joins.

use alloc::boxed::Box;

use hotkern_cpuhp::{CpuId, PlatformOperation};
use hotkern_kernel::hotplug::{Control, EnginePlatform, Hardware, PostedCalls};
use hotkern_kernel::hotplug_read::HotplugReadSide;
use hotkern_kernel::power::Lifecycle;
use hotkern_kernel::rcu::{Kind, Stall};
use hotkern_kernel::steps::StepKernel;

use crate::arch::console::println;
use crate::arch::cpu::MAX_CPUS;
use crate::arch::instructions;
use crate::arch::smp;
use crate::platform::Kernel;

/// The stop-machine calls posted to each member, until released.
static CALLS: PostedCalls<smp::Posted, MAX_CPUS> = PostedCalls::new();

/// The engine's platform on this kernel.
pub type KernelPlatform = EnginePlatform<KernelHardware>;

/// This kernel's hardware, as the engine's platform uses it.
pub struct KernelHardware;

/// What each gathered member runs, from its call handler.
fn member(_: u64) -> u64 {
    if let Some(control) = Kernel::control() {
        control.join_stop(&Kernel::HANDLE);
    }
    0
}

impl Hardware for KernelHardware {
    type Cpus = Kernel;
    /// How long a hotplug thread may take to run a step.
    const CALL_TIMEOUT_NS: u64 = 5_000_000_000;
    const POWER_TIMEOUT_NS: u64 = smp::TIMEOUT_US * 1_000;

    fn cpus(&self) -> &Kernel {
        &Kernel::HANDLE
    }

    /// Panics before [`init`]: the run makes it before the engine.
    fn control(&self) -> &Control {
        Kernel::control().expect("the engine's platform state is made before the engine")
    }

    fn lives(&self) -> &Lifecycle {
        &smp::LIVES
    }

    /// Only application processors start and stop.
    fn check_power(&self, cpu: CpuId) -> Result<(), &'static str> {
        smp::check_cpu(cpu)
            .map(|_| ())
            .map_err(|error| error.cause())
    }

    /// A cross-CPU call: its handler runs with interrupts off, so once
    /// every member has joined nothing else runs anywhere.
    fn gather(&self, cpu: CpuId) -> Result<(), &'static str> {
        let call = smp::post(cpu, member, 0).map_err(|error| error.cause())?;
        CALLS.record(cpu, call).map_err(|_| "no such CPU")
    }

    fn release(&self, cpu: CpuId) -> Result<(), &'static str> {
        CALLS.take(cpu).map_or(Ok(()), |call| {
            smp::finish(call).map(drop).map_err(|error| error.cause())
        })
    }

    /// Every placement enters it (the shared `queue_work`, `arm_timer`,
    /// `call_rcu`); tasks go by the active mask into run queues that
    /// `sched:active` closed a grace period before the dying steps.
    fn hotplug_read_side(&self) -> Option<&HotplugReadSide> {
        Some(&Kernel::mechanisms().hotplug_read)
    }

    fn synchronize(&self, kind: Kind) -> Result<(), Stall> {
        Kernel::rcu().synchronize(kind)
    }

    fn call_rcu(&self, callback: fn(&Self)) {
        Kernel::HANDLE.defer_free(Box::new(move || callback(&KernelHardware)));
    }

    fn without_interrupts<R>(&self, f: impl FnOnce() -> R) -> R {
        instructions::without_interrupts(f)
    }

    /// The console gets the whole report, as Linux's stall warning (which
    /// CPUs, what each ran, for how long).
    fn report_stall(&self, operation: PlatformOperation, stall: &Stall) {
        println!("hotkern: {operation}: {stall}");
    }
}
