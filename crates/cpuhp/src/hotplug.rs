//! The engine's handle: the step table, per-CPU step states, registration
//! and queries. Operations are in `operation.rs`, deferred work in `deferred.rs`.

use alloc::collections::VecDeque;
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;

use lock_api::{Mutex, RawMutex};

use crate::cpu::{CpuId, CpuMask, DEFAULT_WORDS};
use crate::deferred::Job;
use crate::error::Error;
use crate::invoke::{FailAt, PlatformFailAt, Registered};
use crate::platform::Platform;
use crate::report::StepTime;
use crate::states::{StateTable, StepStatus};
use crate::step::{Reuse, Section, StepId, StepSpec};

/// Which engine runs operations. Both use the same table and callbacks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Engine {
    /// Linux as the Bolt paper describes it: synchronous (every step on the
    /// critical path), pessimistic (callbacks told [`Reuse::No`]) and serial
    /// (a set of CPUs is done one by one, each with its own grace period and
    /// stop-machine).
    Classic,
    /// Bolt: deferrable steps go to the deferred worker, callbacks are told
    /// [`Reuse::Yes`], and a set of CPUs is done at once: `Prepare` steps
    /// called once with the whole set, `Online` steps on all targets in
    /// parallel, one grace period and one stop-machine for all.
    Bolt,
    /// Bolt without the stop-machine: everything [`Engine::Bolt`] does,
    /// but the dying steps run on the dying CPUs alone while the others
    /// keep running ([`Platform::run_dying`]: the platform hides the CPUs
    /// from its atomic hotplug readers and waits only for the readers that
    /// may have seen them). Linux tried this as Paul McKenney's 2012
    /// "wean _cpu_down() from __stop_machine()" and Srivatsa Bhat's 2013
    /// "stop_machine()-free CPU hotplug"; neither was merged.
    BoltNoStop,
}

impl Engine {
    /// Every engine, in the order reports and benchmarks list them.
    pub const ALL: [Engine; 3] = [Engine::Classic, Engine::Bolt, Engine::BoltNoStop];

    pub(crate) fn reuse(self) -> Reuse {
        if self.is_bolt() {
            Reuse::Yes
        } else {
            Reuse::No
        }
    }

    /// Whether the engine follows Bolt's policy (deferral, reuse, bulk
    /// operations): [`Engine::Bolt`] and [`Engine::BoltNoStop`].
    ///
    /// ```
    /// use hotkern_cpuhp::Engine;
    /// assert!(Engine::BoltNoStop.is_bolt() && !Engine::Classic.is_bolt());
    /// ```
    pub const fn is_bolt(self) -> bool {
        matches!(self, Engine::Bolt | Engine::BoltNoStop)
    }

    /// Whether taking a CPU down stops every other CPU
    /// ([`Platform::stop_machine`]) rather than running the dying steps on
    /// the dying CPU alone ([`Platform::run_dying`]).
    ///
    /// ```
    /// use hotkern_cpuhp::Engine;
    /// assert!(Engine::Classic.stops_machine() && !Engine::BoltNoStop.stops_machine());
    /// ```
    pub const fn stops_machine(self) -> bool {
        !matches!(self, Engine::BoltNoStop)
    }

    /// Its name in reports, JSON and on command lines: `classic`, `bolt`,
    /// `bolt-nostop`.
    ///
    /// ```
    /// use hotkern_cpuhp::Engine;
    /// assert_eq!(Engine::BoltNoStop.name(), "bolt-nostop");
    /// ```
    pub const fn name(self) -> &'static str {
        match self {
            Engine::Classic => "classic",
            Engine::Bolt => "bolt",
            Engine::BoltNoStop => "bolt-nostop",
        }
    }

    /// The engine named `name` (see [`name`](Engine::name)).
    ///
    /// ```
    /// use hotkern_cpuhp::Engine;
    /// assert_eq!(Engine::from_name("bolt-nostop"), Some(Engine::BoltNoStop));
    /// assert_eq!(Engine::from_name("linux"), None);
    /// ```
    pub fn from_name(name: &str) -> Option<Engine> {
        Engine::ALL.into_iter().find(|engine| engine.name() == name)
    }
}

/// Things that went wrong where no error could be returned. Linux prints a
/// warning for each; the engine counts them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Warnings {
    /// A `Starting` callback failed (treated as done).
    pub atomic_failures: u64,
    /// A callback failed while rolling back (treated as done).
    pub rollback_failures: u64,
    /// A deferred callback failed; the step stays as it was (see
    /// [`Hotplug::take_deferred_failures`]).
    pub deferred_failures: u64,
}

pub(crate) struct Inner<const WORDS: usize> {
    pub(crate) engine: Engine,
    pub(crate) possible: CpuMask<WORDS>,
    pub(crate) online: CpuMask<WORDS>,
    pub(crate) table: Arc<Vec<Registered<WORDS>>>,
    /// Every step on every CPU up to the highest possible one.
    pub(crate) states: StateTable,
    pub(crate) times: Vec<StepTime>,
    pub(crate) queue: VecDeque<Job<WORDS>>,
    pub(crate) next_job: u64,
    pub(crate) running: Option<Job<WORDS>>,
    pub(crate) armed: Option<FailAt>,
    pub(crate) armed_platform: Option<PlatformFailAt>,
    pub(crate) warnings: Warnings,
    pub(crate) deferred_failures: Vec<Error>,
}

/// The hotplug engine: one step table, per-CPU step states, and the two
/// engines that move CPUs between online and offline.
///
/// `R` is the lock: any [`lock_api::RawMutex`], [`RawSpinlock`](crate::RawSpinlock)
/// (this crate's, see [`SpinHotplug`](crate::SpinHotplug)) when the user has
/// none, `parking_lot::RawMutex` in user space, the kernel's own spin lock in
/// a kernel. `P` is the machine; `WORDS` the CPU capacity (see the crate docs). All methods take `&self`, so a `Hotplug`
/// can be shared (e.g. in an `Arc`) between the controlling thread and the
/// deferred worker. Operations are serialised by an internal hotplug lock.
///
/// Callbacks must not call back into the `Hotplug` (its hotplug lock is
/// held), and must tolerate running at the same time for different CPUs.
///
/// ```
/// use hotkern_cpuhp::{Callbacks, Class, CpuId, CpuSet, Engine, Hotplug, InlinePlatform as Inline, Section, StepSpec};
/// use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
/// use std::sync::Arc;
///
/// let table = [
///     StepSpec::new("mm:pages", Section::Prepare, Class::Deferrable),
///     StepSpec::new("sched:migrate", Section::Online, Class::Critical),
/// ];
/// let hp: Hotplug<hotkern_cpuhp::RawSpinlock, _> =
///     Hotplug::new(Inline, &table, CpuSet::range(0, 4), CpuSet::range(0, 4), Engine::Bolt).unwrap();
/// let live = Arc::new(AtomicUsize::new(0));
/// let (up, down) = (live.clone(), live.clone());
/// let pages = hp.step_id("mm:pages").unwrap();
/// hp.setup(pages, Callbacks::new()
///     .startup(move |ctx| { up.fetch_add(ctx.cpus.len(), SeqCst); Ok(()) })
///     .teardown(move |ctx| { down.fetch_sub(ctx.cpus.len(), SeqCst); Ok(()) })).unwrap();
/// assert_eq!(live.load(SeqCst), 4); // started on the four online CPUs
///
/// let report = hp.offline_many(CpuSet::range(1, 4)).unwrap();
/// assert_eq!(report.deferred, 1);     // one aggregated teardown, deferred
/// assert_eq!(live.load(SeqCst), 4);   // not run yet
/// hp.flush_deferred();
/// assert_eq!(live.load(SeqCst), 1);
/// assert_eq!(hp.online_cpus(), CpuSet::single(CpuId(0)));
/// ```
pub struct Hotplug<R: RawMutex, P: Platform<WORDS>, const WORDS: usize = DEFAULT_WORDS> {
    pub(crate) platform: P,
    /// The hotplug lock: one reconfiguration (or registration) at a time.
    pub(crate) ops: Mutex<R, ()>,
    /// Held while a deferred job runs, so an operation can wait for it.
    pub(crate) worker: Mutex<R, ()>,
    pub(crate) inner: Mutex<R, Inner<WORDS>>,
}

impl<R: RawMutex + Sync, P: Platform<WORDS>, const WORDS: usize> Hotplug<R, P, WORDS> {
    /// Builds the engine over `table` (the one order of every step).
    /// CPUs in `online` start with every step up; the others with every step
    /// down. Steps have no callbacks until [`setup`](Self::setup).
    pub fn new(
        platform: P,
        table: &[StepSpec],
        possible: CpuMask<WORDS>,
        online: CpuMask<WORDS>,
        engine: Engine,
    ) -> Result<Self, Error> {
        if table.len() > u16::MAX as usize {
            return Err(Error::TooManySteps);
        }
        for (i, spec) in table.iter().enumerate() {
            if table[..i].iter().any(|earlier| earlier.name == spec.name) {
                return Err(Error::DuplicateName(spec.name));
            }
            if i > 0 && spec.section < table[i - 1].section {
                return Err(Error::SectionOrder(spec.name));
            }
        }
        if let Some(cpu) = online.difference(&possible).first() {
            return Err(Error::NoSuchCpu(cpu));
        }
        if online.is_empty() {
            return Err(Error::NoOnlineCpu);
        }
        let rows = possible.iter().last().map_or(0, |cpu| cpu.index() + 1);
        let states = StateTable::new(rows, table.len(), |cpu| {
            if online.contains(CpuId(cpu as u32)) {
                StepStatus::Up
            } else {
                StepStatus::Down
            }
        });
        let registered = table
            .iter()
            .map(|spec| Registered {
                spec: *spec,
                callbacks: None,
                instances: Vec::new(),
            })
            .collect();
        Ok(Hotplug {
            platform,
            ops: Mutex::new(()),
            worker: Mutex::new(()),
            inner: Mutex::new(Inner {
                engine,
                possible,
                online,
                table: Arc::new(registered),
                states,
                times: vec![StepTime::default(); table.len()],
                queue: VecDeque::new(),
                next_job: 0,
                running: None,
                armed: None,
                armed_platform: None,
                warnings: Warnings::default(),
                deferred_failures: Vec::new(),
            }),
        })
    }

    /// The machine the engine runs on.
    pub fn platform(&self) -> &P {
        &self.platform
    }

    /// The engine that runs operations.
    pub fn engine(&self) -> Engine {
        self.inner.lock().engine
    }

    /// Switches engine (after waiting for the hotplug lock and flushing
    /// deferred work), keeping the table, callbacks and CPU states.
    pub fn set_engine(&self, engine: Engine) {
        let _ops = self.ops.lock();
        self.flush_deferred();
        self.inner.lock().engine = engine;
    }

    /// CPUs that may be brought online.
    pub fn possible_cpus(&self) -> CpuMask<WORDS> {
        self.inner.lock().possible
    }

    /// CPUs online now.
    pub fn online_cpus(&self) -> CpuMask<WORDS> {
        self.inner.lock().online
    }

    /// Whether `cpu` is online.
    pub fn is_online(&self, cpu: CpuId) -> bool {
        self.inner.lock().online.contains(cpu)
    }

    /// The step with this name.
    pub fn step_id(&self, name: &str) -> Option<StepId> {
        let inner = self.inner.lock();
        let position = inner.table.iter().position(|r| r.spec.name == name)?;
        Some(StepId(position as u16))
    }

    /// The table entry of `step`.
    pub fn step_spec(&self, step: StepId) -> Option<StepSpec> {
        self.inner.lock().table.get(step.index()).map(|r| r.spec)
    }

    /// Number of steps in the table.
    pub fn step_count(&self) -> usize {
        self.inner.lock().table.len()
    }

    /// Where `step` stands on `cpu`.
    pub fn step_status(&self, cpu: CpuId, step: StepId) -> Option<StepStatus> {
        let inner = self.inner.lock();
        inner.states.get(cpu, step)
    }

    /// Timing of the last run of `step`'s startup and teardown.
    pub fn step_time(&self, step: StepId) -> Option<StepTime> {
        self.inner.lock().times.get(step.index()).copied()
    }

    /// Counters of failures that could not be returned as errors.
    pub fn warnings(&self) -> Warnings {
        self.inner.lock().warnings
    }

    /// Takes the errors of deferred callbacks that failed since the last call.
    /// A failed deferred teardown leaves its step up (the next online keeps
    /// it); a failed deferred startup leaves it down (the next offline skips it).
    pub fn take_deferred_failures(&self) -> Vec<Error> {
        core::mem::take(&mut self.inner.lock().deferred_failures)
    }

    /// Arms a one-shot failure (Linux's `hotplug/fail`); replaces any armed one.
    /// Refused for `Starting` steps, which must not fail.
    ///
    /// With `bolt`, a deferrable step fails when the operation reaches it
    /// (before it would be deferred), so the operation rolls back. A step
    /// that an operation does not reach (e.g. one whose pending deferred
    /// teardown is cancelled instead) leaves the failure armed.
    ///
    /// ```
    /// # use hotkern_cpuhp::*;
    /// # use hotkern_cpuhp::InlinePlatform as Inline;
    /// let table = [
    ///     StepSpec::new("mm:pages", Section::Prepare, Class::Critical),
    ///     StepSpec::new("sched:starting", Section::Starting, Class::Critical),
    ///     StepSpec::new("sched:active", Section::Online, Class::Critical),
    /// ];
    /// let all = CpuSet::range(0, 2);
    /// let hp: Hotplug<parking_lot::RawMutex, _> =
    ///     Hotplug::new(Inline, &table, all, all, Engine::Classic).unwrap();
    /// let pages = hp.step_id("mm:pages").unwrap();
    /// hp.inject_failure(FailAt { step: pages, direction: Direction::Down, cpu: None }).unwrap();
    ///
    /// // mm:pages is the last teardown: every step before it is rolled back.
    /// let error = hp.offline(CpuId(1)).unwrap_err();
    /// assert!(matches!(error, Error::StepFailed { step, .. } if step == pages));
    /// assert!(hp.is_online(CpuId(1)));
    /// assert_eq!(hp.step_status(CpuId(1), StepId(2)), Some(StepStatus::Up));
    /// assert_eq!(hp.armed_failure(), None); // one-shot
    /// hp.offline(CpuId(1)).unwrap();
    ///
    /// let starting = hp.step_id("sched:starting").unwrap();
    /// let refused = hp.inject_failure(FailAt { step: starting, direction: Direction::Up, cpu: None });
    /// assert_eq!(refused, Err(Error::CannotFail(starting)));
    /// ```
    pub fn inject_failure(&self, point: FailAt) -> Result<(), Error> {
        let mut inner = self.inner.lock();
        let spec = inner
            .table
            .get(point.step.index())
            .map(|r| r.spec)
            .ok_or(Error::NoSuchStep(point.step))?;
        if spec.section == Section::Starting {
            return Err(Error::CannotFail(point.step));
        }
        if let Some(cpu) = point.cpu {
            if !inner.possible.contains(cpu) {
                return Err(Error::NoSuchCpu(cpu));
            }
        }
        inner.armed = Some(point);
        Ok(())
    }

    /// Disarms the injected failure; returns it if it had not fired.
    pub fn clear_failure(&self) -> Option<FailAt> {
        self.inner.lock().armed.take()
    }

    /// The armed failure, if it has not fired yet.
    pub fn armed_failure(&self) -> Option<FailAt> {
        self.inner.lock().armed
    }

    /// Arms a one-shot failure of the platform (see [`PlatformFailAt`] for
    /// what each one does); replaces any armed one. The engine then acts on
    /// it exactly as on the real failure, so both platforms of a kernel
    /// can be shown to roll back alike.
    ///
    /// ```
    /// # use hotkern_cpuhp::*;
    /// # use hotkern_cpuhp::InlinePlatform as Inline;
    /// let table = [
    ///     StepSpec::new("mm:pages", Section::Prepare, Class::Critical),
    ///     StepSpec::new("sched:starting", Section::Starting, Class::Critical),
    ///     StepSpec::new("sched:active", Section::Online, Class::Critical),
    /// ];
    /// let all = CpuSet::range(0, 4);
    /// let hp: Hotplug<parking_lot::RawMutex, _> =
    ///     Hotplug::new(Inline, &table, all, CpuSet::single(CpuId(0)), Engine::Bolt).unwrap();
    /// let point = PlatformFailAt { operation: PlatformOperation::PowerOn, cpu: Some(CpuId(2)) };
    /// hp.inject_platform_failure(point).unwrap();
    ///
    /// // cpu2 does not start: cpu1 and cpu3, which did, are taken down again.
    /// let error = hp.online_many(CpuSet::range(1, 4)).unwrap_err();
    /// assert_eq!(error.to_string(), "the platform's power-on failed for cpu2: injected failure");
    /// assert_eq!(hp.online_cpus(), CpuSet::single(CpuId(0)));
    /// assert_eq!(hp.armed_platform_failure(), None); // one-shot
    /// hp.online_many(CpuSet::range(1, 4)).unwrap();
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::NoSuchCpu`] for a CPU that is not possible; nothing is armed.
    pub fn inject_platform_failure(&self, point: PlatformFailAt) -> Result<(), Error> {
        let mut inner = self.inner.lock();
        if let Some(cpu) = point.cpu {
            if !inner.possible.contains(cpu) {
                return Err(Error::NoSuchCpu(cpu));
            }
        }
        inner.armed_platform = Some(point);
        Ok(())
    }

    /// Disarms the injected platform failure; returns it if it had not fired.
    pub fn clear_platform_failure(&self) -> Option<PlatformFailAt> {
        self.inner.lock().armed_platform.take()
    }

    /// The armed platform failure, if it has not fired yet.
    pub fn armed_platform_failure(&self) -> Option<PlatformFailAt> {
        self.inner.lock().armed_platform
    }
}
