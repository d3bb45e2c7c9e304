//! What the engine needs from the machine it runs on.

use core::fmt;

use crate::cpu::{CpuId, CpuMask, DEFAULT_WORDS};
use crate::step::{CallbackError, Context};

/// Services the machine provides to the engine.
///
/// The engine is pure: every cross-CPU action, every wait and every clock
/// read goes through this trait. Every method that takes `work` runs it and
/// returns only when all of it has finished. Work given to the platform never
/// blocks on the engine, so the platform may run it on any thread it likes.
///
/// The operations on CPUs take a set: a platform that can act on several
/// CPUs at once (start them in parallel, post work to each before waiting
/// for any) does so, and the engine's single-CPU calls are the same
/// operation on a set of one. An operation that can fail says which CPU it
/// failed for in a [`PlatformError`], and the engine rolls the transition
/// back as it does when a step fails (see each method for what a failure
/// promises about the work).
///
/// ```
/// use hotkern_cpuhp::{CpuId, CpuSet, Platform, PlatformError};
/// /// Runs everything on the calling thread; enough for single-threaded tests.
/// struct Inline;
/// impl Platform for Inline {
///     fn now_ns(&self) -> u64 { 0 }
///     fn run_on_each(
///         &self,
///         cpus: CpuSet,
///         work: &(dyn Fn(CpuId) + Sync),
///     ) -> Result<(), PlatformError> {
///         cpus.iter().for_each(|cpu| work(cpu));
///         Ok(())
///     }
///     fn stop_machine(
///         &self,
///         cpus: CpuSet,
///         work: &(dyn Fn(CpuId) + Sync),
///     ) -> Result<(), PlatformError> {
///         cpus.iter().for_each(|cpu| work(cpu));
///         Ok(())
///     }
///     fn power_on_many(&self, _: CpuSet) -> Result<(), PlatformError> { Ok(()) }
///     fn power_off_many(&self, _: CpuSet) -> Result<(), PlatformError> { Ok(()) }
///     fn synchronize_grace_period(&self) -> Result<(), PlatformError> { Ok(()) }
/// }
/// ```
pub trait Platform<const WORDS: usize = DEFAULT_WORDS>: Sync {
    /// Monotonic time in nanoseconds (for per-step timing).
    fn now_ns(&self) -> u64;

    /// Runs `work(cpu)` on the hotplug thread of every CPU in `cpus`, in
    /// parallel if the platform can, and waits for all. Used for `Online`
    /// steps, while the CPUs are online.
    ///
    /// # Errors
    ///
    /// A CPU whose hotplug thread cannot be reached: `work` ran on every
    /// other CPU of `cpus` and never runs on that one; the error names it
    /// ([`PlatformOperation::RunOn`]).
    fn run_on_each(
        &self,
        cpus: CpuMask<WORDS>,
        work: &(dyn Fn(CpuId) + Sync),
    ) -> Result<(), PlatformError>;

    /// [`run_on_each`](Platform::run_on_each) for one CPU.
    ///
    /// # Errors
    ///
    /// As [`run_on_each`](Platform::run_on_each).
    fn run_on(&self, cpu: CpuId, work: &(dyn Fn(CpuId) + Sync)) -> Result<(), PlatformError> {
        self.run_on_each(CpuMask::single(cpu), work)
    }

    /// Stops every running CPU, runs `work(cpu)` on each CPU of `cpus` in
    /// parallel while the others wait with interrupts off, then resumes them.
    /// On the way up the targets are powered on but not yet in the online
    /// mask; on the way down they are still online.
    ///
    /// # Errors
    ///
    /// The CPUs could not all be gathered (Linux's `multi_cpu_stop` never
    /// starts its work then): `work` ran on no CPU
    /// ([`PlatformOperation::StopMachine`], naming a CPU that did not come).
    fn stop_machine(
        &self,
        cpus: CpuMask<WORDS>,
        work: &(dyn Fn(CpuId) + Sync),
    ) -> Result<(), PlatformError>;

    /// Runs the dying steps of every CPU of `cpus`, `work(cpu)` on that CPU
    /// with its interrupts off, **without stopping the other CPUs**
    /// ([`Engine::BoltNoStop`](crate::Engine::BoltNoStop)'s takedown; the
    /// CPUs are still online, their `Online` steps torn down and a grace
    /// period past). A platform that implements it first takes `cpus` out
    /// of what its atomic hotplug readers (code that reads the online mask
    /// or a CPU's state with preemption off) can see, then waits for the
    /// readers that entered before (`mark("reader-drain")`), then has each
    /// CPU run `work` alone (`mark("dying")`): no reader can then reach
    /// the dying CPU's state while its steps change it, which is what
    /// stop-machine guaranteed by stopping everybody.
    ///
    /// The default keeps the rendezvous: a [`stop_machine`](Platform::stop_machine)
    /// (`mark("stop-machine")`), for platforms without such a read side.
    ///
    /// # Errors
    ///
    /// A CPU that cannot run its dying steps ([`PlatformOperation::RunDying`],
    /// or the stop-machine's error): `work` ran on no CPU, and every CPU is
    /// visible to readers again.
    fn run_dying(
        &self,
        cpus: CpuMask<WORDS>,
        work: &(dyn Fn(CpuId) + Sync),
        mark: &mut dyn FnMut(&'static str),
    ) -> Result<(), PlatformError> {
        let result = self.stop_machine(cpus, work);
        mark("stop-machine");
        result
    }

    /// Brings every CPU of `cpus` up: powers it on and has it run its
    /// `Starting` steps, `work(cpu)` on that CPU with interrupts off before
    /// it is in the online mask; returns once every CPU ran them. Each
    /// `mark(stage)` ends a timed stage (begun by the previous mark or the
    /// call): `"power"` once the CPUs execute, then one for the steps.
    ///
    /// Linux's incoming CPU runs them from its own start-up path
    /// (`notify_cpu_starting` in `start_secondary`) before it reports
    /// alive, and stops no other CPU: only the way down needs a
    /// stop-machine (`take_cpu_down`). A platform whose CPUs can run work
    /// as they come up overrides this; the default powers them on with
    /// [`power_on_many`](Platform::power_on_many), then runs the steps in a
    /// [`stop_machine`](Platform::stop_machine) (`"stop-machine"`).
    ///
    /// # Errors
    ///
    /// A CPU that did not come up ([`PlatformOperation::PowerOn`]): the
    /// CPUs that did came up ran `work` (the engine knows them by what
    /// `work` reported) and are left running, for the engine to take down
    /// again; the one named never runs `work`.
    fn bring_up(
        &self,
        cpus: CpuMask<WORDS>,
        work: &(dyn Fn(CpuId) + Sync),
        mark: &mut dyn FnMut(&'static str),
    ) -> Result<(), PlatformError> {
        self.power_on_many(cpus)?;
        mark("power");
        if let Err(error) = self.stop_machine(cpus, work) {
            // Nothing ran on them: off again, so that no CPU is up that
            // the engine does not know of.
            let _ = self.power_off_many(cpus);
            return Err(error);
        }
        mark("stop-machine");
        Ok(())
    }

    /// Waits for a grace period: every CPU has passed a quiescent state
    /// (Linux's `synchronize_rcu`). The classic engine's wait.
    ///
    /// # Errors
    ///
    /// A CPU stalled the grace period ([`PlatformOperation::GracePeriod`]).
    fn synchronize_grace_period(&self) -> Result<(), PlatformError>;

    /// Waits for a grace period that interrupts the CPUs rather than
    /// waiting for their ticks (Linux's `synchronize_rcu_expedited`): the
    /// same guarantee, sooner. Bolt's wait. Default: a normal one.
    ///
    /// # Errors
    ///
    /// A CPU stalled it ([`PlatformOperation::ExpeditedGracePeriod`]).
    fn synchronize_grace_period_expedited(&self) -> Result<(), PlatformError> {
        self.synchronize_grace_period()
    }

    /// Starts every CPU of `cpus` executing (between the `Prepare` and
    /// `Starting` steps of a bring-up) and returns once all are. A platform
    /// that can start CPUs in parallel does (as Linux's parallel bring-up
    /// kicks every AP before waiting for any).
    ///
    /// # Errors
    ///
    /// A CPU that did not start ([`PlatformOperation::PowerOn`]). All or
    /// nothing: none of `cpus` runs then (a platform stops again those
    /// that did start; the shared `Lifecycle` refuses a CPU in the wrong
    /// state before it kicks any).
    fn power_on_many(&self, cpus: CpuMask<WORDS>) -> Result<(), PlatformError>;

    /// Stops every CPU of `cpus` for good (after their `Starting` steps
    /// were torn down) and returns once all have stopped.
    ///
    /// # Errors
    ///
    /// A CPU that did not stop ([`PlatformOperation::PowerOff`]). Its dying
    /// steps have run by then, so the engine goes on, as Linux's
    /// `__cpu_die` only warns when a CPU does not report dead: the CPU is
    /// offline in the engine's books and the failure is listed in the
    /// operation's [`Report::failures`](crate::Report::failures).
    fn power_off_many(&self, cpus: CpuMask<WORDS>) -> Result<(), PlatformError>;

    /// Takes the hotplug lock for writing, around one transition (Linux's
    /// `cpus_write_lock` in `_cpu_up` and `_cpu_down`): code that holds it
    /// for reading (`cpus_read_lock`) sees no CPU come or go meanwhile.
    /// With Linux's `percpu_rw_semaphore` the first writer after a quiet
    /// spell waits for a grace period; `expedited` asks for an expedited
    /// one (bolt), as under Linux's `rcu_expedite_gp()`. Default: nothing.
    ///
    /// # Errors
    ///
    /// The lock's grace period stalled ([`PlatformOperation::HotplugLock`]);
    /// the lock is not held then, and the engine will not unlock it.
    fn hotplug_lock(&self, expedited: bool) -> Result<(), PlatformError> {
        let _ = expedited;
        Ok(())
    }

    /// Gives back what [`hotplug_lock`](Platform::hotplug_lock) took.
    /// Default: nothing.
    fn hotplug_unlock(&self) {}

    /// Deferred work is pending: arrange for
    /// [`Hotplug::run_deferred`](crate::Hotplug::run_deferred) to be called
    /// soon on a worker thread. Called with no engine lock held. Default:
    /// nothing, so work waits for [`Hotplug::flush_deferred`](crate::Hotplug::flush_deferred).
    fn kick_deferred(&self) {}

    /// A step's callback is about to run (Linux's `trace_cpuhp_enter` in
    /// `cpuhp_invoke_callback`), on the thread that runs it. The engine
    /// calls it for every call it makes, on the critical path, deferred,
    /// rolling back or at registration, so a platform traces steps here
    /// instead of wrapping callbacks. Default: nothing.
    fn step_entered(&self, context: &Context<WORDS>) {
        let _ = context;
    }

    /// A step's callback returned `result` (Linux's `trace_cpuhp_exit`).
    /// An injected failure is reported here too, as a call that returned
    /// [`CallbackError::INJECTED`] without running. Default: nothing.
    fn step_exited(&self, context: &Context<WORDS>, result: Result<(), CallbackError>) {
        let _ = (context, result);
    }
}

/// What the engine asked of the platform when it failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PlatformOperation {
    /// [`Platform::hotplug_lock`].
    HotplugLock,
    /// [`Platform::run_on_each`]: `Online` steps on a hotplug thread.
    RunOn,
    /// [`Platform::stop_machine`].
    StopMachine,
    /// [`Platform::run_dying`]: the dying steps without a stop-machine.
    RunDying,
    /// [`Platform::power_on_many`] or [`Platform::bring_up`].
    PowerOn,
    /// [`Platform::power_off_many`].
    PowerOff,
    /// [`Platform::synchronize_grace_period`].
    GracePeriod,
    /// [`Platform::synchronize_grace_period_expedited`].
    ExpeditedGracePeriod,
}

impl PlatformOperation {
    /// Every operation, in the order a bring-up and a take-down meet them.
    pub const ALL: [PlatformOperation; 8] = [
        PlatformOperation::HotplugLock,
        PlatformOperation::RunOn,
        PlatformOperation::StopMachine,
        PlatformOperation::RunDying,
        PlatformOperation::PowerOn,
        PlatformOperation::PowerOff,
        PlatformOperation::GracePeriod,
        PlatformOperation::ExpeditedGracePeriod,
    ];

    /// Its name in reports and on command lines: `hotplug-lock`, `run-on`,
    /// `stop-machine`, `run-dying`, `power-on`, `power-off`, `grace-period`,
    /// `expedited-grace-period`.
    pub const fn name(self) -> &'static str {
        match self {
            PlatformOperation::HotplugLock => "hotplug-lock",
            PlatformOperation::RunOn => "run-on",
            PlatformOperation::StopMachine => "stop-machine",
            PlatformOperation::RunDying => "run-dying",
            PlatformOperation::PowerOn => "power-on",
            PlatformOperation::PowerOff => "power-off",
            PlatformOperation::GracePeriod => "grace-period",
            PlatformOperation::ExpeditedGracePeriod => "expedited-grace-period",
        }
    }

    /// The operation named `name` (see [`name`](PlatformOperation::name)).
    ///
    /// ```
    /// use hotkern_cpuhp::PlatformOperation;
    /// assert_eq!(PlatformOperation::from_name("power-on"), Some(PlatformOperation::PowerOn));
    /// assert_eq!(PlatformOperation::from_name("reboot"), None);
    /// ```
    pub fn from_name(name: &str) -> Option<PlatformOperation> {
        PlatformOperation::ALL
            .into_iter()
            .find(|operation| operation.name() == name)
    }
}

impl fmt::Display for PlatformOperation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A platform operation that failed: which, for which CPU, and why.
///
/// ```
/// use hotkern_cpuhp::{CpuId, PlatformError, PlatformOperation};
/// let error = PlatformError::new(PlatformOperation::PowerOn, CpuId(3), "did not start");
/// assert_eq!(error.to_string(), "power-on failed for cpu3: did not start");
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PlatformError {
    /// What the engine asked for.
    pub operation: PlatformOperation,
    /// The CPU it failed for: the one that did not start, stop, answer or
    /// pass a quiescent state.
    pub cpu: CpuId,
    /// A short static reason, e.g. `"did not start"`.
    pub cause: &'static str,
}

impl PlatformError {
    /// The cause of a failure that [`Hotplug::inject_platform_failure`](crate::Hotplug::inject_platform_failure)
    /// made.
    pub const INJECTED: &'static str = "injected failure";

    /// `operation` failed for `cpu` because of `cause`.
    pub const fn new(operation: PlatformOperation, cpu: CpuId, cause: &'static str) -> Self {
        PlatformError {
            operation,
            cpu,
            cause,
        }
    }
}

impl fmt::Display for PlatformError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} failed for {}: {}",
            self.operation, self.cpu, self.cause
        )
    }
}

impl core::error::Error for PlatformError {}

/// A platform that runs everything on the calling thread, one CPU after the
/// other, and whose CPUs always start, stop and pass quiescent states: what
/// single-threaded tests and examples need, and nothing a kernel would use.
///
/// ```
/// use hotkern_cpuhp::{CpuId, CpuSet, InlinePlatform, Platform};
/// let seen = std::sync::Mutex::new(Vec::new());
/// InlinePlatform
///     .run_on_each(CpuSet::range(1, 3), &|cpu| seen.lock().unwrap().push(cpu))
///     .unwrap();
/// InlinePlatform
///     .stop_machine(CpuSet::single(CpuId(3)), &|cpu| seen.lock().unwrap().push(cpu))
///     .unwrap();
/// assert_eq!(*seen.lock().unwrap(), [CpuId(1), CpuId(2), CpuId(3)]);
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct InlinePlatform;

impl<const WORDS: usize> Platform<WORDS> for InlinePlatform {
    fn now_ns(&self) -> u64 {
        0
    }

    fn run_on_each(
        &self,
        cpus: CpuMask<WORDS>,
        work: &(dyn Fn(CpuId) + Sync),
    ) -> Result<(), PlatformError> {
        cpus.iter().for_each(work);
        Ok(())
    }

    fn stop_machine(
        &self,
        cpus: CpuMask<WORDS>,
        work: &(dyn Fn(CpuId) + Sync),
    ) -> Result<(), PlatformError> {
        cpus.iter().for_each(work);
        Ok(())
    }

    fn power_on_many(&self, _: CpuMask<WORDS>) -> Result<(), PlatformError> {
        Ok(())
    }

    fn power_off_many(&self, _: CpuMask<WORDS>) -> Result<(), PlatformError> {
        Ok(())
    }

    fn synchronize_grace_period(&self) -> Result<(), PlatformError> {
        Ok(())
    }
}
