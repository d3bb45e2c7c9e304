//! This kernel's hardware under the shared engine platform
//! ([`hotkern_kernel::hotplug`]): CPUs that halt and take IPIs
//! ([`Kernel`]), started by INIT-SIPI-SIPI and parked with interrupts
//! off ([`crate::arch::smp`]); a stop-machine gathers each member with a
//! cross-CPU call whose handler joins; grace periods are driven by the
//! caller with a deadline ([`crate::platform::rcu`]); posted work runs on
//! each CPU's hotplug thread ([`crate::platform::hotplug_thread`]).
//! `bolt-nostop` takes a CPU down with no stop-machine: every placement
//! on this kernel is inside the shared atomic read side (see
//! [`KernelHardware::hotplug_read_side`]).

use alloc::boxed::Box;
use alloc::vec::Vec;

use hotkern_cpuhp::{CpuId, PlatformOperation};
use hotkern_kernel::hotplug::{Control, EnginePlatform, Hardware};
use hotkern_kernel::hotplug_read::HotplugReadSide;
use hotkern_kernel::power::Lifecycle;
use hotkern_kernel::rcu::{Kind, Stall};
use hotkern_kernel::steps::differential::StepRecord;
use hotkern_kernel::steps::StepKernel;

use crate::arch::console::println;
use crate::arch::cpu::MAX_CPUS;
use crate::arch::instructions;
use crate::arch::smp;
use crate::platform::rcu;
use crate::platform::Kernel;

/// The engine's platform state: the hotplug lock, each CPU's posted
/// work, stop-machine's rendezvous, the step recorder.
static CONTROL: spin::Once<Control> = spin::Once::new();

/// The stop-machine calls posted to each member, until released.
static CALLS: spin::Mutex<[Option<smp::Posted>; MAX_CPUS]> =
    spin::Mutex::new([const { None }; MAX_CPUS]);

/// Makes the engine's platform state for CPUs `0..cpus`, once the heap
/// exists; before it, no lock is taken and no work is posted.
pub fn init(cpus: usize) {
    CONTROL.call_once(|| Control::new(cpus));
}

/// The engine's platform state, once made.
pub fn control() -> Option<&'static Control> {
    CONTROL.get()
}

/// Starts or stops recording the engine's step calls.
pub fn record_steps(on: bool) {
    if let Some(control) = control() {
        control.record_steps(on);
    }
}

/// The step calls recorded since the last take.
pub fn take_steps() -> Vec<StepRecord> {
    control().map_or_else(Vec::new, |control| {
        instructions::without_interrupts(|| control.take_steps())
    })
}

/// The engine's platform on this kernel.
pub type KernelPlatform = EnginePlatform<KernelHardware>;

/// This kernel's hardware, as the engine's platform uses it.
pub struct KernelHardware;

/// What each gathered member runs, from its call handler.
fn member(_: u64) -> u64 {
    if let Some(control) = control() {
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

    /// # Panics
    ///
    /// Before [`init`]: the run makes it before the engine.
    fn control(&self) -> &Control {
        control().expect("the engine's platform state is made before the engine")
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
        CALLS.lock()[cpu.index()] = Some(call);
        Ok(())
    }

    fn release(&self, cpu: CpuId) -> Result<(), &'static str> {
        let call = CALLS.lock()[cpu.index()].take();
        call.map_or(Ok(()), |call| {
            smp::finish(call).map(|_| ()).map_err(|error| error.cause())
        })
    }

    /// Every reader of the online mask that then touches a CPU's state
    /// enters it: work, timers and RCU callbacks (RCU-deferred frees and
    /// the hotplug lock's callback too) are placed by the shared core's
    /// `queue_work`, `arm_timer` and `call_rcu`, which hold a guard from
    /// the mask's read to the insert. Tasks are placed by the active mask
    /// into run queues that `sched:active` closed under their locks a
    /// grace period before the dying steps, so they need no guard. The
    /// dying steps then run on the dying CPU's hotplug thread, posted to
    /// its mailbox and woken by IPI, interrupts off, while the other CPUs
    /// run on.
    fn hotplug_read_side(&self) -> Option<&HotplugReadSide> {
        Some(&Kernel::mechanisms().hotplug_read)
    }

    fn synchronize(&self, kind: Kind) -> Result<(), Stall> {
        rcu::synchronize(kind, rcu::GRACE_TIMEOUT_US)
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
