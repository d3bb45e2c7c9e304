//! This kernel as hotkern-cpuhp's [`Platform`]: `Online` steps on each
//! CPU's hotplug thread (`cpuhp/N`, as Linux's `cpuhp_thread_fun`), an
//! incoming CPU's `Starting` steps posted to that thread before it starts
//! and run in its first turn (Linux's `notify_cpu_starting`: no other CPU
//! stops), a dying CPU's in [`crate::platform::stop_machine`], grace periods from
//! [`crate::platform::rcu`], power on as an INIT-SIPI-SIPI start and power off as a
//! park with interrupts off ([`crate::arch::smp`]). Each failure is the engine's
//! typed [`PlatformError`], naming the operation and the CPU.

use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, Ordering};

use hotkern_cpuhp::{
    CallbackError, Context, CpuId, CpuSet, Direction, Platform, PlatformError, PlatformOperation,
};
use hotkern_kernel::steps::differential::{StepRecord, StepRecorder};

use crate::arch::console::println;
use crate::arch::instructions;
use crate::arch::smp;
use crate::arch::tsc;
use crate::platform::hotplug_lock;
use crate::platform::hotplug_thread::{self, post, take_back, wait_for};
use crate::platform::power;
use crate::platform::rcu;
use crate::platform::stop_machine;

/// A grace period (or the hotplug lock's) that stalled, as the engine's
/// error: the console gets the whole report, as Linux's stall warning
/// (which CPUs, what each ran, for how long); the error names the first
/// CPU it waited for.
fn stalled(operation: PlatformOperation, stall: rcu::Stall) -> PlatformError {
    println!("hotkern: {operation}: {stall}");
    let cpu = stall.holding_up().first().unwrap_or(CpuId(0));
    PlatformError::new(operation, cpu, "stalled the grace period")
}

/// A failure to start or stop CPUs, as the engine's error.
fn power_failed(
    operation: PlatformOperation,
    (cpu, error): (CpuId, smp::SmpError),
) -> PlatformError {
    PlatformError::new(operation, cpu, error.cause())
}

/// Where the engine's step calls go while the differential scenario runs.
static RECORDER: StepRecorder = StepRecorder::new();
/// Whether they are recorded now.
static RECORDING: AtomicBool = AtomicBool::new(false);

/// Starts or stops recording the engine's step calls.
pub fn record_steps(on: bool) {
    RECORDING.store(on, Ordering::Release);
}

/// The step calls recorded since the last take.
pub fn take_steps() -> Vec<StepRecord> {
    instructions::without_interrupts(|| RECORDER.take())
}

/// This kernel as the engine's platform.
pub struct KernelPlatform;

impl Platform for KernelPlatform {
    fn now_ns(&self) -> u64 {
        tsc::nanos()
    }

    fn run_on_each(
        &self,
        cpus: CpuSet,
        work: &(dyn Fn(CpuId) + Sync),
    ) -> Result<(), PlatformError> {
        hotplug_thread::run_on_each(cpus, work).map_err(|cpu| {
            PlatformError::new(PlatformOperation::RunOn, cpu, "has no hotplug thread")
        })
    }

    fn stop_machine(
        &self,
        cpus: CpuSet,
        work: &(dyn Fn(CpuId) + Sync),
    ) -> Result<(), PlatformError> {
        stop_machine::stop_machine(cpus, work).map_err(|error| match error {
            stop_machine::StopError::Call(cpu, error) => {
                PlatformError::new(PlatformOperation::StopMachine, cpu, error.cause())
            }
        })
    }

    /// The steps are posted to each incoming CPU's hotplug thread before
    /// it starts, and its idle loop runs that thread first, interrupts
    /// off: the CPU runs them in its first turn, as Linux's incoming CPU
    /// runs `notify_cpu_starting` on its way up, and the controller waits
    /// once, with no other CPU stopped. A CPU that does not start has its
    /// request taken back, so that it cannot run the steps if it comes
    /// later; the ones that came ran them, and the engine takes them down.
    fn bring_up(
        &self,
        cpus: CpuSet,
        work: &(dyn Fn(CpuId) + Sync),
        mark: &mut dyn FnMut(&'static str),
    ) -> Result<(), PlatformError> {
        if let Some(cpu) = cpus
            .iter()
            .find(|cpu| hotplug_thread::thread_of(*cpu).is_none())
        {
            return Err(PlatformError::new(
                PlatformOperation::PowerOn,
                cpu,
                "has no hotplug thread",
            ));
        }
        let Some(posted) = post(cpus, &work) else {
            let cpu = cpus.first().unwrap_or(CpuId(0));
            return Err(PlatformError::new(
                PlatformOperation::PowerOn,
                cpu,
                "has no hotplug thread",
            ));
        };
        let started = power::start_many(cpus);
        mark("power");
        match started {
            Ok(()) => {
                wait_for(posted);
                mark("starting");
                Ok(())
            }
            Err(error) => {
                take_back(posted);
                Err(power_failed(PlatformOperation::PowerOn, error))
            }
        }
    }

    fn synchronize_grace_period(&self) -> Result<(), PlatformError> {
        rcu::synchronize(rcu::Kind::Normal, rcu::GRACE_TIMEOUT_US)
            .map_err(|cpu| stalled(PlatformOperation::GracePeriod, cpu))
    }

    fn synchronize_grace_period_expedited(&self) -> Result<(), PlatformError> {
        rcu::synchronize(rcu::Kind::Expedited, rcu::GRACE_TIMEOUT_US)
            .map_err(|cpu| stalled(PlatformOperation::ExpeditedGracePeriod, cpu))
    }

    /// A stalled grace period gives the lock back: the engine does not
    /// unlock what it did not get.
    fn hotplug_lock(&self, expedited: bool) -> Result<(), PlatformError> {
        let kind = if expedited {
            rcu::Kind::Expedited
        } else {
            rcu::Kind::Normal
        };
        hotplug_lock::write_lock(kind, rcu::GRACE_TIMEOUT_US).map_err(|cpu| {
            hotplug_lock::write_unlock();
            stalled(PlatformOperation::HotplugLock, cpu)
        })
    }

    fn hotplug_unlock(&self) {
        hotplug_lock::write_unlock();
    }

    /// All or nothing: CPUs that came before one timed out are parked
    /// again.
    fn power_on_many(&self, cpus: CpuSet) -> Result<(), PlatformError> {
        power::start_many(cpus).map_err(|error| {
            let came: CpuSet = cpus.iter().filter(|&cpu| smp::is_running(cpu)).collect();
            let _ = power::offline_many(came);
            power_failed(PlatformOperation::PowerOn, error)
        })
    }

    fn power_off_many(&self, cpus: CpuSet) -> Result<(), PlatformError> {
        power::offline_many(cpus).map_err(|error| power_failed(PlatformOperation::PowerOff, error))
    }

    /// Every step call is recorded as a `cpuhp_callback` event for each
    /// CPU it covers, where the engine makes it (Linux's
    /// `trace_cpuhp_enter`).
    fn step_entered(&self, context: &Context) {
        let up = u32::from(context.direction == Direction::Up);
        for cpu in context.cpus.iter() {
            crate::platform::trace::cpuhp_callback::trace(cpu.0, u32::from(context.step.0), up);
        }
    }

    /// With interrupts off: a CPU holding the recorder's lock must not be
    /// called into a stop-machine whose dying steps record too.
    fn step_exited(&self, context: &Context, result: Result<(), CallbackError>) {
        if RECORDING.load(Ordering::Acquire) {
            instructions::without_interrupts(|| RECORDER.record(context, result));
        }
    }
}
