//! The hotplug engine's platform ([`hotkern_cpuhp::Platform`]), written
//! once for every kernel that runs the shared core: [`EnginePlatform`]
//! over a platform's [`Hardware`].
//!
//! What each of the engine's operations is made of, and where it comes
//! from (Linux's `kernel/cpu.c` names in brackets):
//!
//! * **run on a CPU** (`cpuhp_kick_ap_work`): the work is posted to the
//!   CPU's slot in [`Control`]'s [`Mailboxes`], which the CPU runs from its
//!   hotplug thread or its loop; the controller sleeps until it is done.
//!   A CPU that is not running is refused at once, never waited for: the
//!   engine calls a CPU only while it runs (a step left up on a CPU that
//!   went down is called by the engine itself).
//! * **bring up** (`bringup_cpu` + `notify_cpu_starting`): the `Starting`
//!   steps are posted to each incoming CPU *before* it is started, so that
//!   its first turn runs them, interrupts off, before anything else; no
//!   other CPU stops. A CPU that does not start has its request taken back
//!   ([`Mailboxes::take_back`]: whoever claims first wins), so it can never
//!   run the steps late.
//! * **stop-machine** (`take_cpu_down` under `stop_machine_cpuslocked`):
//!   the shared [`Rendezvous`], its members every running CPU, gathered by
//!   the platform ([`Hardware::gather`]: a cross-CPU call, a doorbell).
//! * **dying steps without a stop-machine** (`bolt-nostop`; no Linux
//!   counterpart was merged): the dying CPUs are hidden from the atomic
//!   read side ([`HotplugReadSide`], [`Hardware::hotplug_read_side`]), the
//!   readers that entered before are drained, then each dying CPU runs its
//!   steps from its slot in the [`Mailboxes`], interrupts off, while every
//!   other CPU keeps running. A platform whose readers are not all inside
//!   the read side returns `None` there and keeps the rendezvous.
//! * **grace periods** ([`Hardware::synchronize`]): the platform's RCU; a
//!   stall is reported ([`Hardware::report_stall`], Linux's stall warning)
//!   and becomes the engine's error naming the first CPU it waited for.
//! * **the hotplug lock** (`cpus_write_lock`): [`Control`]'s
//!   [`PercpuRwsem`]; its writer waits for a grace period when readers
//!   were on their fast path, and the last writer out queues the callback
//!   after which they go fast again (`rcu_sync_exit` → `call_rcu`),
//!   queueing it once more when another writer came and went first.
//! * **power** (`__cpu_up`, `__cpu_die`): the shared [`Lifecycle`] with
//!   the platform's kick ([`Power`]); all or nothing: CPUs that came
//!   before one timed out are stopped again.
//! * **step tracing** (`trace_cpuhp_enter`/`exit`): the engine fires the
//!   kernel's `cpuhp_callback` tracepoint
//!   ([`kernel_trace::events`](crate::kernel_trace::events)) for each CPU
//!   a call covers, so no platform wraps callbacks, and [`Control`]'s
//!   recorder keeps the calls the differential scenario reads on every
//!   platform.

use hotkern_cpuhp::{
    CallbackError, Context, CpuId, CpuSet, Platform, PlatformError, PlatformOperation,
};

use crate::cpuset::MAX_CPUS;
use crate::hotplug_read::HotplugReadSide;
use crate::mailbox::{Mailboxes, Posted, Unfinished};
use crate::percpu_rwsem::PercpuRwsem;
use crate::platform::Cpus;
use crate::power::{Lifecycle, Power, PowerError};
use crate::rcu::{Kind, Stall};
use crate::steps::differential::{StepRecord, StepRecorder};
use crate::stop_machine::Rendezvous;
use crate::sync::{AtomicBool, Ordering};

mod settle;
mod threads;
pub use settle::{settle, Unsettled};
pub use threads::{HotplugThreads, PostedCalls};

/// What the engine's platform keeps, one per kernel: the hotplug lock,
/// each CPU's slot for posted work, stop-machine's rendezvous and the
/// recorder of step calls. Its CPUs reach it from their loops: a CPU runs
/// [`Control::run_pending`] from its hotplug thread (or its loop) and
/// [`Control::join_stop`] from wherever it is gathered.
pub struct Control {
    lock: PercpuRwsem,
    mailboxes: Mailboxes,
    rendezvous: Rendezvous,
    recorder: StepRecorder,
    recording: AtomicBool,
}

impl Control {
    /// Control of CPUs `0..cpus`.
    pub fn new(cpus: usize) -> Control {
        Control {
            lock: PercpuRwsem::new(cpus),
            mailboxes: Mailboxes::new(cpus),
            rendezvous: Rendezvous::new(),
            recorder: StepRecorder::new(),
            recording: AtomicBool::new(false),
        }
    }

    /// Linux's `cpu_hotplug_lock`: each transition holds it for writing,
    /// code that needs the online mask to hold still for reading.
    pub fn hotplug_lock(&self) -> &PercpuRwsem {
        &self.lock
    }

    /// Runs the work posted to `cpu`, if any is new; called on `cpu`.
    /// Returns whether it ran something.
    pub fn run_pending<C: Cpus + ?Sized>(&self, cpus: &C, cpu: CpuId) -> bool {
        self.mailboxes.run_pending(cpus, cpu.index())
    }

    /// Whether work waits for `cpu` (its hotplug thread has a turn to run).
    pub fn has_pending(&self, cpu: CpuId) -> bool {
        self.mailboxes.has_pending(cpu.index())
    }

    /// Joins a stop-machine the calling CPU is a member of; returns whether
    /// it took part. Called where the platform gathers its CPUs.
    pub fn join_stop<C: Cpus + ?Sized>(&self, cpus: &C) -> bool {
        self.rendezvous.join(cpus)
    }

    /// Starts or stops recording the engine's step calls.
    pub fn record_steps(&self, on: bool) {
        // Release: a step call that sees the flag sees the recorder ready.
        self.recording.store(on, Ordering::Release);
    }

    /// The step calls recorded since the last take, in the order made.
    pub fn take_steps(&self) -> alloc::vec::Vec<StepRecord> {
        self.recorder.take()
    }
}

/// What only the platform does for the engine's platform: its CPUs (who
/// am I, wake, wait, the clock, kick one into its loop), where its
/// [`Control`] and [`Lifecycle`] are, how a stop-machine reaches a CPU,
/// its grace periods, and its tracepoint.
pub trait Hardware: Sync + Sized {
    /// The platform's CPUs.
    type Cpus: Power + Sync;

    /// How long a CPU may take to run posted work, in nanoseconds of the
    /// platform's clock (`u64::MAX`: as long as it takes).
    const CALL_TIMEOUT_NS: u64;

    /// How long a CPU may take to start or stop (`u64::MAX`: forever).
    const POWER_TIMEOUT_NS: u64;

    /// The platform's CPUs.
    fn cpus(&self) -> &Self::Cpus;

    /// The kernel's [`Control`].
    fn control(&self) -> &Control;

    /// Each CPU's life, which power-on and power-off change.
    fn lives(&self) -> &Lifecycle;

    /// Whether `cpu` is one the platform can start and stop; why not.
    /// The default accepts every CPU [`Lifecycle`] has a slot for.
    fn check_power(&self, cpu: CpuId) -> Result<(), &'static str> {
        let _ = cpu;
        Ok(())
    }

    /// Makes running CPU `cpu` call [`Control::join_stop`] soon (a
    /// cross-CPU call whose handler joins; a doorbell its loop answers).
    fn gather(&self, cpu: CpuId) -> Result<(), &'static str>;

    /// After the stop-machine: what gathering `cpu` left to collect (the
    /// call's completion). The default has nothing to collect.
    fn release(&self, cpu: CpuId) -> Result<(), &'static str> {
        let _ = cpu;
        Ok(())
    }

    /// The atomic hotplug read side every reader of the online mask on
    /// this platform enters (the kernel's [`Subsystems`](crate::subsystems::Subsystems)
    /// one), if all of them do: then a CPU goes down without a
    /// stop-machine ([`Platform::run_dying`]). The default, `None`, keeps
    /// the rendezvous for `bolt-nostop` too.
    fn hotplug_read_side(&self) -> Option<&HotplugReadSide> {
        None
    }

    /// Waits for a grace period of `kind`.
    fn synchronize(&self, kind: Kind) -> Result<(), Stall>;

    /// Queues `callback` to run, with the platform, after a grace period
    /// (Linux's `call_rcu`). A plain function, so that a queued callback
    /// keeps nothing alive that the kernel's end would free.
    fn call_rcu(&self, callback: fn(&Self));

    /// Runs `f` with this CPU's interrupts off (the recorder's lock is
    /// taken by dying steps inside a stop-machine too).
    fn without_interrupts<R>(&self, f: impl FnOnce() -> R) -> R {
        f()
    }

    /// Says what stalled `operation`, as Linux's RCU stall warning does;
    /// the default says nothing.
    fn report_stall(&self, operation: PlatformOperation, stall: &Stall) {
        let _ = (operation, stall);
    }

    /// Wakes whoever runs the engine's deferred work (Bolt's master
    /// thread); the default has none.
    fn kick_deferred(&self) {}
}

/// The engine's platform over `H`.
pub struct EnginePlatform<H> {
    hardware: H,
}

impl<H: Hardware> EnginePlatform<H> {
    /// The engine's platform over `hardware`.
    pub fn new(hardware: H) -> Self {
        EnginePlatform { hardware }
    }

    /// The hardware underneath.
    pub fn hardware(&self) -> &H {
        &self.hardware
    }

    /// The CPUs running now: every member of a stop-machine.
    pub fn running(&self) -> CpuSet {
        let lives = self.hardware.lives();
        (0..MAX_CPUS)
            .filter(|&cpu| lives.is_alive(cpu))
            .map(|cpu| CpuId(cpu as u32))
            .collect()
    }

    fn deadline(&self, timeout_ns: u64) -> u64 {
        if timeout_ns == u64::MAX {
            return u64::MAX;
        }
        self.hardware.cpus().now_ns().saturating_add(timeout_ns)
    }

    fn stalled(&self, operation: PlatformOperation, stall: &Stall) -> PlatformError {
        self.hardware.report_stall(operation, stall);
        let cpu = stall.holding_up().first().unwrap_or(CpuId(0));
        PlatformError::new(operation, cpu, "stalled the grace period")
    }

    /// Every CPU of `cpus` one the platform can power, or the first that
    /// is not.
    fn check_power(&self, operation: PlatformOperation, cpus: CpuSet) -> Result<(), PlatformError> {
        for cpu in cpus.iter() {
            self.hardware
                .check_power(cpu)
                .map_err(|cause| PlatformError::new(operation, cpu, cause))?;
        }
        Ok(())
    }

    fn start(&self, cpus: CpuSet) -> Result<(), PowerError> {
        let deadline = self.deadline(H::POWER_TIMEOUT_NS);
        self.hardware
            .lives()
            .start_many(self.hardware.cpus(), cpus, deadline)
    }

    /// Waits for the `Starting` steps posted to the incoming CPUs; a CPU
    /// that has not claimed them by the deadline has them taken back.
    fn wait_for(&self, posted: Posted) {
        let control = self.hardware.control();
        let cpus = self.hardware.cpus();
        let deadline = self.deadline(H::CALL_TIMEOUT_NS);
        if control.mailboxes.wait(cpus, &posted, deadline).is_err() {
            self.take_back(posted);
        }
    }

    /// Takes back the requests of `posted` no CPU claimed, and waits for
    /// those a CPU did: afterwards no CPU runs the work.
    ///
    /// # Panics
    ///
    /// If a CPU claimed its request and has not finished by the deadline:
    /// it may be running the borrowed work.
    fn take_back(&self, posted: Posted) {
        let control = self.hardware.control();
        let deadline = self.deadline(H::CALL_TIMEOUT_NS);
        if let Err(Unfinished(cpu)) =
            control
                .mailboxes
                .take_back(self.hardware.cpus(), posted, deadline)
        {
            panic!("{cpu} did not finish its hotplug step");
        }
    }

    /// Queues the hotplug lock's `rcu_sync` callback (see the module doc).
    fn queue_lock_callback(hardware: &H) {
        hardware.call_rcu(|hardware| {
            if hardware.control().lock.grace_period_ended() {
                Self::queue_lock_callback(hardware);
            }
        });
    }
}

/// Flips the read side's phase and waits until every reader of the old
/// one has left. Readers never sleep inside and nothing wakes the writer,
/// so it looks again every few microseconds.
fn drain<C: Cpus + ?Sized>(cpus: &C, side: &HotplugReadSide) {
    const LOOK_AGAIN_NS: u64 = 5_000;
    let phase = side.flip();
    let drained = || side.drained(phase);
    while !drained() {
        let deadline = cpus.now_ns().saturating_add(LOOK_AGAIN_NS);
        cpus.wait_until_deadline(&drained, deadline);
    }
}

impl<H: Hardware> Platform for EnginePlatform<H> {
    fn now_ns(&self) -> u64 {
        self.hardware.cpus().now_ns()
    }

    /// The caller's own share inline, the others posted; a CPU that is
    /// not running is named without waiting, after the others ran.
    fn run_on_each(
        &self,
        cpus: CpuSet,
        work: &(dyn Fn(CpuId) + Sync),
    ) -> Result<(), PlatformError> {
        let hardware = &self.hardware;
        let me = hardware.cpus().current();
        let lives = hardware.lives();
        let reached: CpuSet = cpus
            .iter()
            .filter(|&cpu| Some(cpu) == me || lives.is_alive(cpu.index()))
            .collect();
        let deadline = self.deadline(H::CALL_TIMEOUT_NS);
        hardware
            .control()
            .mailboxes
            .run_on_each(hardware.cpus(), reached, work, deadline)
            .map_err(|Unfinished(cpu)| {
                PlatformError::new(PlatformOperation::RunOn, cpu, "did not run its step")
            })?;
        match cpus.difference(&reached).first() {
            Some(cpu) => Err(PlatformError::new(
                PlatformOperation::RunOn,
                cpu,
                "is not running",
            )),
            None => Ok(()),
        }
    }

    /// Every running CPU stops, `cpus` among them; a CPU the platform
    /// could not gather abandons the rendezvous and is named.
    fn stop_machine(
        &self,
        cpus: CpuSet,
        work: &(dyn Fn(CpuId) + Sync),
    ) -> Result<(), PlatformError> {
        let hardware = &self.hardware;
        let members = self.running().union(&cpus);
        let mut gathered = CpuSet::EMPTY;
        let gather = |others: CpuSet| {
            for cpu in others.iter() {
                hardware.gather(cpu).map_err(|cause| (cpu, cause))?;
                gathered.insert(cpu);
            }
            Ok(())
        };
        let mut result = hardware.without_interrupts(|| {
            hardware
                .control()
                .rendezvous
                .run(hardware.cpus(), members, cpus, work, gather)
        });
        for cpu in gathered.iter() {
            result = result.and(hardware.release(cpu).map_err(|cause| (cpu, cause)));
        }
        result
            .map_err(|(cpu, cause)| PlatformError::new(PlatformOperation::StopMachine, cpu, cause))
    }

    /// Without a stop-machine (see the module doc): the dying CPUs hidden
    /// from the read side, the readers that may have seen them drained,
    /// then each runs its steps, interrupts off, while the others run on.
    /// A platform with no read side keeps the rendezvous.
    fn run_dying(
        &self,
        cpus: CpuSet,
        work: &(dyn Fn(CpuId) + Sync),
        mark: &mut dyn FnMut(&'static str),
    ) -> Result<(), PlatformError> {
        let hardware = &self.hardware;
        let Some(side) = hardware.hotplug_read_side() else {
            let result = self.stop_machine(cpus, work);
            mark("stop-machine");
            return result;
        };
        let lives = hardware.lives();
        if let Some(cpu) = cpus.iter().find(|cpu| !lives.is_alive(cpu.index())) {
            mark("dying");
            return Err(PlatformError::new(
                PlatformOperation::RunDying,
                cpu,
                "is not running",
            ));
        }
        side.hide(cpus);
        drain(hardware.cpus(), side);
        mark("reader-drain");
        let deadline = self.deadline(H::CALL_TIMEOUT_NS);
        let alone = |cpu: CpuId| hardware.without_interrupts(|| work(cpu));
        let result = hardware
            .control()
            .mailboxes
            .run_on_each(hardware.cpus(), cpus, &alone, deadline)
            .map_err(|Unfinished(cpu)| {
                PlatformError::new(PlatformOperation::RunDying, cpu, "did not run its steps")
            });
        // Their dying steps cleared them from the online mask; if they
        // could not run, they are online as before.
        side.show(cpus);
        mark("dying");
        result
    }

    /// The steps are posted to each incoming CPU before it starts and run
    /// in its first turn (see the module doc); the controller waits once,
    /// no other CPU stopped. The CPUs that did come ran them, and the
    /// engine takes them down.
    fn bring_up(
        &self,
        cpus: CpuSet,
        work: &(dyn Fn(CpuId) + Sync),
        mark: &mut dyn FnMut(&'static str),
    ) -> Result<(), PlatformError> {
        self.check_power(PlatformOperation::PowerOn, cpus)?;
        let control = self.hardware.control();
        let posted = control.mailboxes.post(self.hardware.cpus(), cpus, &work);
        let started = self.start(cpus);
        mark("power");
        match started {
            Ok(()) => {
                self.wait_for(posted);
                mark("starting");
                Ok(())
            }
            Err(error) => {
                self.take_back(posted);
                Err(error.platform_error(PlatformOperation::PowerOn))
            }
        }
    }

    fn synchronize_grace_period(&self) -> Result<(), PlatformError> {
        self.hardware
            .synchronize(Kind::Normal)
            .map_err(|stall| self.stalled(PlatformOperation::GracePeriod, &stall))
    }

    fn synchronize_grace_period_expedited(&self) -> Result<(), PlatformError> {
        self.hardware
            .synchronize(Kind::Expedited)
            .map_err(|stall| self.stalled(PlatformOperation::ExpeditedGracePeriod, &stall))
    }

    /// A stalled grace period gives the lock back: the engine does not
    /// unlock what it did not get.
    fn hotplug_lock(&self, expedited: bool) -> Result<(), PlatformError> {
        let kind = if expedited {
            Kind::Expedited
        } else {
            Kind::Normal
        };
        let mut result = Ok(());
        let control = self.hardware.control();
        control.lock.write_lock(self.hardware.cpus(), || {
            result = self.hardware.synchronize(kind);
        });
        result.map_err(|stall| {
            self.hotplug_unlock();
            self.stalled(PlatformOperation::HotplugLock, &stall)
        })
    }

    fn hotplug_unlock(&self) {
        let control = self.hardware.control();
        if control.lock.write_unlock(self.hardware.cpus()) {
            Self::queue_lock_callback(&self.hardware);
        }
    }

    /// All or nothing: CPUs that came before one failed are stopped again.
    fn power_on_many(&self, cpus: CpuSet) -> Result<(), PlatformError> {
        self.check_power(PlatformOperation::PowerOn, cpus)?;
        self.start(cpus).map_err(|error| {
            let lives = self.hardware.lives();
            let came: CpuSet = cpus
                .iter()
                .filter(|cpu| lives.is_alive(cpu.index()))
                .collect();
            let deadline = self.deadline(H::POWER_TIMEOUT_NS);
            let _ = lives.stop_many(self.hardware.cpus(), came, deadline);
            error.platform_error(PlatformOperation::PowerOn)
        })
    }

    fn power_off_many(&self, cpus: CpuSet) -> Result<(), PlatformError> {
        self.check_power(PlatformOperation::PowerOff, cpus)?;
        let deadline = self.deadline(H::POWER_TIMEOUT_NS);
        self.hardware
            .lives()
            .stop_many(self.hardware.cpus(), cpus, deadline)
            .map_err(|error| error.platform_error(PlatformOperation::PowerOff))
    }

    fn kick_deferred(&self) {
        self.hardware.kick_deferred();
    }

    /// Linux's `trace_cpuhp_enter`, once per CPU the call covers, on
    /// every platform alike (a NOP until a tracer enables the event).
    fn step_entered(&self, context: &Context) {
        // loom's models build without the run trace (see `kernel_trace`).
        #[cfg(not(loom))]
        {
            let up = u32::from(context.direction == hotkern_cpuhp::Direction::Up);
            for cpu in context.cpus.iter() {
                crate::kernel_trace::events::cpuhp_callback::trace(
                    cpu.0,
                    u32::from(context.step.0),
                    up,
                );
            }
        }
        #[cfg(loom)]
        let _ = context;
    }

    fn step_exited(&self, context: &Context, result: Result<(), CallbackError>) {
        let control = self.hardware.control();
        // Acquire: pairs with the release in `record_steps`.
        if control.recording.load(Ordering::Acquire) {
            self.hardware
                .without_interrupts(|| control.recorder.record(context, result));
        }
    }
}

#[cfg(test)]
mod tests;
