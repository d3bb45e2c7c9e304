//! A mock machine for the engine's tests: a platform that records what the
//! engine asks of it, and subscribers whose callbacks keep a physical model
//! of which (step, CPU, instance) is up and report every misuse.
#![allow(dead_code)]

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Condvar, Mutex};

use hotkern_cpuhp::{
    CallbackError, Callbacks, Class, Context, CpuId, CpuSet, Direction, Engine, InstanceId,
    Platform, PlatformError, PlatformOperation, Reuse, Section, StepId, StepSpec, StepStatus,
};

pub type Hp = hotkern_cpuhp::Hotplug<parking_lot::RawMutex, Mock>;

/// Where code is running, as the mock platform arranged it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    Controller,
    Target(CpuId),
    StopMachine(CpuId),
}

thread_local! {
    static PLACE: Cell<Place> = const { Cell::new(Place::Controller) };
}

fn at<T>(place: Place, f: impl FnOnce() -> T) -> T {
    let before = PLACE.with(|p| p.replace(place));
    let out = f();
    PLACE.with(|p| p.set(before));
    out
}

/// What the engine asked of the platform.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    RunOn(CpuId),
    RunOnEach(CpuSet),
    StopMachine(CpuSet),
    /// The dying steps without a stop-machine (`bolt-nostop`).
    RunDying(CpuSet),
    GracePeriod,
    ExpeditedGracePeriod,
    /// The hotplug lock's write side taken; whether expedited.
    HotplugLock(bool),
    HotplugUnlock,
    PowerOn(CpuId),
    PowerOff(CpuId),
    Kick,
}

pub struct Mock {
    clock: AtomicU64,
    /// How far the clock moves during each platform operation: 0 (every
    /// read moves it 10 ns), or more for a platform whose operations cost.
    pub op_nanos: AtomicU64,
    /// Run `run_on_each` and `stop_machine` targets on real threads.
    pub parallel: bool,
    pub events: Mutex<Vec<Event>>,
    pub powered: Mutex<CpuSet>,
    /// Stop-machines running now; more than one means two reconfigurations overlapped.
    stopping: AtomicU64,
    pub overlaps: AtomicU64,
    /// Calls a real machine could not have made: a stop-machine over a CPU
    /// that is off, powering on a CPU that runs or off one that does not.
    pub misuses: Mutex<Vec<String>>,
    /// Kicks of the deferred worker so far, and whether it must stop: a
    /// worker thread sleeps on `kicked` until there is work, as a real one
    /// does, instead of polling.
    kicks: Mutex<(u64, bool)>,
    kicked: Condvar,
    /// A one-shot failure of the platform itself (not the engine's
    /// injection): the next call of the operation that concerns the CPU
    /// fails as the trait documents a real failure.
    pub fails: Mutex<Option<(PlatformOperation, CpuId)>>,
    /// Calls of that operation that succeed before it fails.
    pub fails_after: AtomicU64,
    /// Every step call the engine traced: entered, or returned (`Some`).
    pub traced: Mutex<Vec<Traced>>,
}

/// A traced step call: its step, direction, CPUs and whether it is the
/// return (with the result) or the entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Traced {
    pub name: &'static str,
    pub direction: Direction,
    pub cpus: CpuSet,
    pub rollback: bool,
    pub returned: Option<Result<(), CallbackError>>,
}

impl Mock {
    pub fn new(online: CpuSet, parallel: bool) -> Self {
        Mock {
            clock: AtomicU64::new(0),
            op_nanos: AtomicU64::new(0),
            parallel,
            events: Mutex::new(Vec::new()),
            powered: Mutex::new(online),
            stopping: AtomicU64::new(0),
            overlaps: AtomicU64::new(0),
            misuses: Mutex::new(Vec::new()),
            kicks: Mutex::new((0, false)),
            kicked: Condvar::new(),
            fails: Mutex::new(None),
            fails_after: AtomicU64::new(0),
            traced: Mutex::new(Vec::new()),
        }
    }

    /// The CPU of `cpus` for which `operation` fails now (once).
    fn failing(&self, operation: PlatformOperation, cpus: CpuSet) -> Option<CpuId> {
        let mut fails = self.fails.lock().unwrap();
        match *fails {
            Some((failing, cpu)) if failing == operation && cpus.contains(cpu) => {
                if self.fails_after.load(SeqCst) > 0 {
                    self.fails_after.fetch_sub(1, SeqCst);
                    return None;
                }
                *fails = None;
                Some(cpu)
            }
            _ => None,
        }
    }

    /// Blocks until the engine kicked the worker more than `seen` times in
    /// all; returns the new count, or `None` once `stop_worker` was called.
    pub fn wait_for_kick(&self, seen: u64) -> Option<u64> {
        let kicks = self
            .kicked
            .wait_while(self.kicks.lock().unwrap(), |(count, stop)| {
                *count <= seen && !*stop
            })
            .unwrap();
        (!kicks.1).then_some(kicks.0)
    }

    pub fn stop_worker(&self) {
        self.kicks.lock().unwrap().1 = true;
        self.kicked.notify_all();
    }

    fn record(&self, event: Event) {
        self.clock.fetch_add(self.op_nanos.load(SeqCst), SeqCst);
        self.events.lock().unwrap().push(event);
    }

    pub fn take_events(&self) -> Vec<Event> {
        std::mem::take(&mut *self.events.lock().unwrap())
    }

    fn each(&self, cpus: CpuSet, place: fn(CpuId) -> Place, work: &(dyn Fn(CpuId) + Sync)) {
        if self.parallel {
            std::thread::scope(|scope| {
                for cpu in cpus {
                    scope.spawn(move || at(place(cpu), || work(cpu)));
                }
            });
        } else {
            for cpu in cpus {
                at(place(cpu), || work(cpu));
            }
        }
    }
}

impl Platform for Mock {
    fn now_ns(&self) -> u64 {
        // Every clock read is 10 ns later: timings are deterministic.
        self.clock.fetch_add(10, SeqCst)
    }

    fn run_on(&self, cpu: CpuId, work: &(dyn Fn(CpuId) + Sync)) -> Result<(), PlatformError> {
        self.record(Event::RunOn(cpu));
        if let Some(cpu) = self.failing(PlatformOperation::RunOn, CpuSet::single(cpu)) {
            return Err(PlatformError::new(
                PlatformOperation::RunOn,
                cpu,
                "no hotplug thread",
            ));
        }
        at(Place::Target(cpu), || work(cpu));
        Ok(())
    }

    fn run_on_each(
        &self,
        cpus: CpuSet,
        work: &(dyn Fn(CpuId) + Sync),
    ) -> Result<(), PlatformError> {
        self.record(Event::RunOnEach(cpus));
        let failing = self.failing(PlatformOperation::RunOn, cpus);
        let reached = failing.map_or(cpus, |cpu| cpus.difference(&CpuSet::single(cpu)));
        self.each(reached, Place::Target, work);
        match failing {
            Some(cpu) => Err(PlatformError::new(
                PlatformOperation::RunOn,
                cpu,
                "no hotplug thread",
            )),
            None => Ok(()),
        }
    }

    fn stop_machine(
        &self,
        cpus: CpuSet,
        work: &(dyn Fn(CpuId) + Sync),
    ) -> Result<(), PlatformError> {
        self.record(Event::StopMachine(cpus));
        if let Some(cpu) = self.failing(PlatformOperation::StopMachine, cpus) {
            return Err(PlatformError::new(
                PlatformOperation::StopMachine,
                cpu,
                "did not come",
            ));
        }
        let off = cpus.difference(&self.powered.lock().unwrap());
        if !off.is_empty() {
            self.misuses
                .lock()
                .unwrap()
                .push(format!("stop-machine over {off}, which is off"));
        }
        if self.stopping.fetch_add(1, SeqCst) > 0 {
            self.overlaps.fetch_add(1, SeqCst);
        }
        self.each(cpus, Place::StopMachine, work);
        self.stopping.fetch_sub(1, SeqCst);
        Ok(())
    }

    /// The dying steps on the dying CPUs alone: the mock has no readers
    /// to drain, so it only marks the stages and checks the CPUs are on.
    fn run_dying(
        &self,
        cpus: CpuSet,
        work: &(dyn Fn(CpuId) + Sync),
        mark: &mut dyn FnMut(&'static str),
    ) -> Result<(), PlatformError> {
        self.record(Event::RunDying(cpus));
        mark("reader-drain");
        if let Some(cpu) = self.failing(PlatformOperation::RunDying, cpus) {
            mark("dying");
            return Err(PlatformError::new(
                PlatformOperation::RunDying,
                cpu,
                "did not run its steps",
            ));
        }
        let off = cpus.difference(&self.powered.lock().unwrap());
        if !off.is_empty() {
            self.misuses
                .lock()
                .unwrap()
                .push(format!("dying steps over {off}, which is off"));
        }
        self.each(cpus, Place::StopMachine, work);
        mark("dying");
        Ok(())
    }

    fn synchronize_grace_period(&self) -> Result<(), PlatformError> {
        self.record(Event::GracePeriod);
        match self.failing(PlatformOperation::GracePeriod, CpuSet::range(0, 64)) {
            Some(cpu) => Err(PlatformError::new(
                PlatformOperation::GracePeriod,
                cpu,
                "stalled",
            )),
            None => Ok(()),
        }
    }

    fn synchronize_grace_period_expedited(&self) -> Result<(), PlatformError> {
        self.record(Event::ExpeditedGracePeriod);
        let operation = PlatformOperation::ExpeditedGracePeriod;
        match self.failing(operation, CpuSet::range(0, 64)) {
            Some(cpu) => Err(PlatformError::new(operation, cpu, "stalled")),
            None => Ok(()),
        }
    }

    fn hotplug_lock(&self, expedited: bool) -> Result<(), PlatformError> {
        let operation = PlatformOperation::HotplugLock;
        if let Some(cpu) = self.failing(operation, CpuSet::range(0, 64)) {
            return Err(PlatformError::new(operation, cpu, "stalled"));
        }
        self.record(Event::HotplugLock(expedited));
        Ok(())
    }

    fn hotplug_unlock(&self) {
        self.record(Event::HotplugUnlock);
    }

    /// All or nothing: a CPU that fails leaves every CPU of the set off.
    fn power_on_many(&self, cpus: CpuSet) -> Result<(), PlatformError> {
        if let Some(cpu) = self.failing(PlatformOperation::PowerOn, cpus) {
            return Err(PlatformError::new(
                PlatformOperation::PowerOn,
                cpu,
                "did not start",
            ));
        }
        for cpu in cpus {
            self.record(Event::PowerOn(cpu));
            let mut powered = self.powered.lock().unwrap();
            let running = powered.contains(cpu);
            powered.insert(cpu);
            drop(powered);
            if running {
                self.misuses
                    .lock()
                    .unwrap()
                    .push(format!("{cpu} powered on while running"));
            }
        }
        Ok(())
    }

    /// A CPU that fails stays powered.
    fn power_off_many(&self, cpus: CpuSet) -> Result<(), PlatformError> {
        let failing = self.failing(PlatformOperation::PowerOff, cpus);
        for cpu in cpus {
            if Some(cpu) != failing {
                self.record(Event::PowerOff(cpu));
                let mut powered = self.powered.lock().unwrap();
                let running = powered.contains(cpu);
                powered.remove(cpu);
                drop(powered);
                if !running {
                    self.misuses
                        .lock()
                        .unwrap()
                        .push(format!("{cpu} powered off while off"));
                }
            }
        }
        match failing {
            Some(cpu) => Err(PlatformError::new(
                PlatformOperation::PowerOff,
                cpu,
                "did not stop",
            )),
            None => Ok(()),
        }
    }

    fn kick_deferred(&self) {
        self.record(Event::Kick);
        self.kicks.lock().unwrap().0 += 1;
        self.kicked.notify_all();
    }

    fn step_entered(&self, context: &Context) {
        self.traced.lock().unwrap().push(Traced {
            name: context.name,
            direction: context.direction,
            cpus: context.cpus,
            rollback: context.rollback,
            returned: None,
        });
    }

    fn step_exited(&self, context: &Context, result: Result<(), CallbackError>) {
        self.traced.lock().unwrap().push(Traced {
            name: context.name,
            direction: context.direction,
            cpus: context.cpus,
            rollback: context.rollback,
            returned: Some(result),
        });
    }
}

/// One callback invocation, as a subscriber saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    pub name: &'static str,
    pub direction: Direction,
    pub cpus: CpuSet,
    pub instance: Option<InstanceId>,
    pub reuse: Reuse,
    pub deferred: bool,
    pub rollback: bool,
    pub place: Place,
}

/// A real (not injected) one-shot callback failure.
#[derive(Clone, Copy, Debug)]
pub struct Refusal {
    pub name: &'static str,
    pub direction: Direction,
    pub cpu: Option<CpuId>,
    pub instance: Option<InstanceId>,
}

/// A one-shot refusal of `name` in `direction` on `cpu`, any instance.
pub fn refusal(name: &'static str, direction: Direction, cpu: u32) -> Refusal {
    Refusal {
        name,
        direction,
        cpu: Some(CpuId(cpu)),
        instance: None,
    }
}

/// A step's name, a CPU and an instance.
pub type Key = (&'static str, CpuId, Option<InstanceId>);

#[derive(Default)]
pub struct World {
    /// Physical state: which (step, CPU, instance) its callbacks brought up.
    pub up: Mutex<HashMap<Key, bool>>,
    pub calls: Mutex<Vec<Call>>,
    pub violations: Mutex<Vec<String>>,
    pub refusals: Mutex<Vec<Refusal>>,
}

impl World {
    pub fn is_up(&self, name: &'static str, cpu: CpuId, instance: Option<InstanceId>) -> bool {
        *self
            .up
            .lock()
            .unwrap()
            .get(&(name, cpu, instance))
            .unwrap_or(&false)
    }

    pub fn take_calls(&self) -> Vec<Call> {
        std::mem::take(&mut *self.calls.lock().unwrap())
    }

    pub fn refuse(&self, refusal: Refusal) {
        self.refusals.lock().unwrap().push(refusal);
    }

    pub fn assert_no_violations(&self) {
        let violations = self.violations.lock().unwrap();
        assert!(violations.is_empty(), "violations: {violations:?}");
    }

    fn callback(self: &Arc<Self>, ctx: &Context, section: Section) -> Result<(), CallbackError> {
        let place = PLACE.with(|p| p.get());
        self.calls.lock().unwrap().push(Call {
            name: ctx.name,
            direction: ctx.direction,
            cpus: ctx.cpus,
            instance: ctx.instance,
            reuse: ctx.reuse,
            deferred: ctx.deferred,
            rollback: ctx.rollback,
            place,
        });
        // Where the engine must have put us.
        if !ctx.deferred {
            let fine = match (section, place) {
                (Section::Prepare, Place::Controller) => true,
                (Section::Starting, Place::StopMachine(cpu)) => {
                    cpu == ctx.cpu && ctx.cpus.len() == 1
                }
                // Registration runs starting/online callbacks on the hotplug thread.
                (Section::Starting | Section::Online, Place::Target(cpu)) => {
                    cpu == ctx.cpu && ctx.cpus.len() == 1
                }
                // A step left up on an offline CPU is called from the controller.
                (Section::Starting | Section::Online, Place::Controller) => ctx.cpus.len() == 1,
                _ => false,
            };
            if !fine {
                self.violations
                    .lock()
                    .unwrap()
                    .push(format!("{} {:?} ran at {place:?}", ctx.name, section));
            }
        }
        {
            let mut refusals = self.refusals.lock().unwrap();
            if let Some(found) = refusals.iter().position(|r| {
                r.name == ctx.name
                    && r.direction == ctx.direction
                    && r.cpu.is_none_or(|cpu| ctx.cpus.contains(cpu))
                    && (r.instance.is_none() || r.instance == ctx.instance)
            }) {
                refusals.remove(found);
                return Err(CallbackError::new("refused by test"));
            }
        }
        let mut up = self.up.lock().unwrap();
        for cpu in ctx.cpus {
            let key = (ctx.name, cpu, ctx.instance);
            let was = *up.get(&key).unwrap_or(&false);
            let want = ctx.direction == Direction::Up;
            if was == want {
                self.violations.lock().unwrap().push(format!(
                    "{} of {} on {cpu} instance {:?} twice",
                    ctx.direction, ctx.name, ctx.instance
                ));
            }
            up.insert(key, want);
        }
        Ok(())
    }

    pub fn callbacks(self: &Arc<Self>, section: Section) -> Callbacks {
        let (a, b) = (self.clone(), self.clone());
        Callbacks::new()
            .startup(move |ctx| a.callback(ctx, section))
            .teardown(move |ctx| b.callback(ctx, section))
    }
}

pub const A: InstanceId = InstanceId(1);
pub const B: InstanceId = InstanceId(2);

/// A table with every section, both classes and multi-instance steps.
pub const TABLE: &[StepSpec] = &[
    StepSpec::new("bp:perf", Section::Prepare, Class::Critical),
    StepSpec::new("bp:pages", Section::Prepare, Class::Deferrable),
    StepSpec::new("bp:queues", Section::Prepare, Class::Deferrable).multi_instance(),
    StepSpec::new("ap:sched-starting", Section::Starting, Class::Critical),
    StepSpec::new("ap:timers-starting", Section::Starting, Class::Deferrable),
    StepSpec::new("ap:workqueue", Section::Online, Class::Critical).multi_instance(),
    StepSpec::new("ap:sysfs", Section::Online, Class::Deferrable),
    StepSpec::new("ap:kthread", Section::Online, Class::Deferrable),
    StepSpec::new("ap:sched-active", Section::Online, Class::Critical),
];

/// `cpus` CPUs, all online, every step of `TABLE` set up, two instances on
/// each multi-instance step.
pub fn machine(engine: Engine, cpus: u32, parallel: bool) -> (Hp, Arc<World>) {
    let all = CpuSet::range(0, cpus);
    let hp = Hp::new(Mock::new(all, parallel), TABLE, all, all, engine).unwrap();
    let world = Arc::new(World::default());
    for (i, spec) in TABLE.iter().enumerate() {
        let step = StepId(i as u16);
        hp.setup(step, world.callbacks(spec.section)).unwrap();
        if spec.multi {
            hp.add_instance(step, A).unwrap();
            hp.add_instance(step, B).unwrap();
        }
    }
    world.take_calls();
    hp.platform().take_events();
    (hp, world)
}

/// Every step's recorded status agrees with the subscribers' physical
/// state, and the engine's online mask with the powered CPUs.
pub fn assert_consistent(hp: &Hp, world: &World) {
    world.assert_no_violations();
    assert_eq!(*hp.platform().misuses.lock().unwrap(), Vec::<String>::new());
    assert_eq!(hp.online_cpus(), *hp.platform().powered.lock().unwrap());
    for cpu in hp.possible_cpus() {
        for (i, spec) in TABLE.iter().enumerate() {
            let status = hp.step_status(cpu, StepId(i as u16)).unwrap();
            let physical = matches!(status, StepStatus::Up | StepStatus::PendingTeardown);
            let instances: &[Option<InstanceId>] = if spec.multi {
                &[Some(A), Some(B)]
            } else {
                &[None]
            };
            for instance in instances {
                assert_eq!(
                    world.is_up(spec.name, cpu, *instance),
                    physical,
                    "{} on {cpu} ({instance:?}) is {status:?}",
                    spec.name
                );
            }
        }
    }
}

/// Statuses of every step on every possible CPU.
pub fn statuses(hp: &Hp) -> Vec<Vec<StepStatus>> {
    hp.possible_cpus()
        .iter()
        .map(|cpu| {
            (0..hp.step_count())
                .map(|i| hp.step_status(cpu, StepId(i as u16)).unwrap())
                .collect()
        })
        .collect()
}

pub fn step(hp: &Hp, name: &str) -> StepId {
    hp.step_id(name).unwrap()
}

pub const ENGINES: [Engine; 3] = Engine::ALL;

pub fn names(calls: &[Call], direction: Direction) -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for call in calls.iter().filter(|c| c.direction == direction) {
        if out.last() != Some(&call.name) {
            out.push(call.name);
        }
    }
    out
}

pub fn table_names() -> Vec<&'static str> {
    TABLE.iter().map(|s| s.name).collect()
}
