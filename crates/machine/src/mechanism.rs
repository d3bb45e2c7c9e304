//! Timing one kernel mechanism at a time, the ones CPU hotplug is built
//! from: what each costs on its own explains what an operation costs.

use std::time::{Duration, Instant};

use hotkern_cpuhp::{CpuSet, Error, Platform};
use hotkern_kernel::kthread::{Role, Thread};
use hotkern_kernel::steps::StepKernel;

use crate::error::MachineError;
use crate::kthread::Kthread;
use crate::machine::Machine;

/// A mechanism [`Machine::time_mechanism`] can time, named after the Linux
/// function it mirrors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mechanism {
    /// `synchronize_rcu()`: a normal grace period, driven by ticks and by
    /// forcing quiescent states.
    GracePeriodNormal,
    /// `synchronize_rcu_expedited()`: the busy vCPUs are interrupted.
    GracePeriodExpedited,
    /// `stop_machine()` with nothing to run: every online vCPU gathers
    /// with interrupts off and is released.
    StopMachine,
    /// `kthread_create_on_cpu()`: a new OS thread, started and parked.
    KthreadCreate,
    /// `kthread_unpark()` and the thread's first turn on its vCPU.
    KthreadUnpark,
}

impl Mechanism {
    /// Every mechanism, in the order benchmarks list them.
    pub const ALL: [Mechanism; 5] = [
        Mechanism::GracePeriodNormal,
        Mechanism::GracePeriodExpedited,
        Mechanism::StopMachine,
        Mechanism::KthreadCreate,
        Mechanism::KthreadUnpark,
    ];

    /// Its name in benchmark cases (`mechanism/<name>`).
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::GracePeriodNormal => "grace-period-normal",
            Mechanism::GracePeriodExpedited => "grace-period-expedited",
            Mechanism::StopMachine => "stop-machine",
            Mechanism::KthreadCreate => "kthread-create",
            Mechanism::KthreadUnpark => "kthread-unpark",
        }
    }
}

impl Machine {
    /// Runs `mechanism` once, from a thread that is no vCPU (as the
    /// hotplug engine runs them), and returns how long it took.
    ///
    /// ```
    /// use hotkern_machine::{Machine, Mechanism};
    ///
    /// let machine = Machine::builder().cpus(2).build().unwrap();
    /// let normal = machine.time_mechanism(Mechanism::GracePeriodNormal).unwrap();
    /// // An idle machine's vCPUs are found idle when quiescent states are
    /// // forced, three jiffies in at HZ=1000.
    /// assert!(normal.as_micros() >= 1_000, "{normal:?}");
    /// machine.shutdown();
    /// ```
    pub fn time_mechanism(&self, mechanism: Mechanism) -> Result<Duration, MachineError> {
        let kernel = &self.kernel;
        let online = kernel.online_mask();
        let Some(first) = online.first() else {
            return Err(MachineError::Config("no vCPU is online"));
        };
        let spawn = || {
            Kthread::spawn(first.index(), Role::Worker, || {})
                .map_err(|error| MachineError::Spawn(error.to_string()))
        };
        let start = Instant::now();
        let took = match mechanism {
            Mechanism::GracePeriodNormal => {
                kernel.rcu.synchronize();
                start.elapsed()
            }
            Mechanism::GracePeriodExpedited => {
                kernel.rcu.synchronize_expedited();
                start.elapsed()
            }
            Mechanism::StopMachine => {
                self.engine
                    .platform()
                    .stop_machine(CpuSet::single(first), &|_| {})
                    .map_err(|error| MachineError::Hotplug(Error::PlatformFailed(error)))?;
                start.elapsed()
            }
            Mechanism::KthreadCreate => {
                let thread = spawn()?;
                let took = start.elapsed();
                drop(thread);
                took
            }
            Mechanism::KthreadUnpark => {
                let thread = spawn()?;
                let start = Instant::now();
                thread.unpark();
                let ran = thread.run();
                let took = start.elapsed();
                drop(thread);
                if !ran {
                    return Err(MachineError::Spawn(
                        "the unparked thread did not run".into(),
                    ));
                }
                took
            }
        };
        Ok(took)
    }
}
