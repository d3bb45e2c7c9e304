//! A mock machine for the engine's tests: a platform that records what the
//! engine asks of it, and subscribers whose callbacks keep a physical model
//! of which (step, CPU, instance) is up and report every misuse.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use hotkern_cpuhp::{
    CallbackError, Callbacks, Class, Context, CpuId, CpuSet, Direction, Engine, InstanceId, Reuse,
    Section, StepId, StepSpec, StepStatus,
};

mod mock;

pub use mock::*;

pub type Hp = hotkern_cpuhp::Hotplug<parking_lot::RawMutex, Mock>;

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
