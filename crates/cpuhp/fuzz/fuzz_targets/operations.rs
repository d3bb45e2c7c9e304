//! Arbitrary sequences of registration, reconfiguration, deferred work,
//! engine switches and failures (injected or refused by a callback). After
//! every call: nothing panicked, callbacks were never asked to start what is
//! up or tear down what is down, a refused or failed call changed nothing,
//! and every step's recorded status agrees with what its callbacks did.
#![no_main]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use arbitrary::Arbitrary;
use hotkern_cpuhp::{
    CallbackError, Callbacks, Class, CpuId, CpuSet, Direction, Engine, FailAt, Hotplug,
    InstanceId, Platform, PlatformError, Section, StepId, StepSpec, StepStatus,
};
use libfuzzer_sys::fuzz_target;

const CPUS: u32 = 4;

const TABLE: &[StepSpec] = &[
    StepSpec::new("bp:a", Section::Prepare, Class::Critical),
    StepSpec::new("bp:b", Section::Prepare, Class::Deferrable).multi_instance(),
    StepSpec::new("ap:c", Section::Starting, Class::Critical),
    StepSpec::new("ap:d", Section::Starting, Class::Deferrable),
    StepSpec::new("ap:e", Section::Online, Class::Deferrable),
    StepSpec::new("ap:f", Section::Online, Class::Critical).multi_instance(),
];

#[derive(Arbitrary, Debug)]
enum Op {
    Online(u8),
    Offline(u8),
    OnlineMany(u8),
    OfflineMany(u8),
    RunDeferred,
    Bolt(bool),
    Inject { step: u8, up: bool, cpu: Option<u8> },
    Refuse { step: u8, up: bool, cpu: Option<u8> },
    Setup { step: u8, calls: bool },
    Remove { step: u8, calls: bool },
    AddInstance { step: u8, instance: u8, calls: bool },
    RemoveInstance { step: u8, instance: u8, calls: bool },
}

struct Inline {
    powered: Mutex<CpuSet>,
}

impl Platform for Inline {
    fn now_ns(&self) -> u64 {
        0
    }
    fn run_on_each(&self, cpus: CpuSet, work: &(dyn Fn(CpuId) + Sync)) -> Result<(), PlatformError> {
        cpus.iter().for_each(work);
        Ok(())
    }
    fn stop_machine(&self, cpus: CpuSet, work: &(dyn Fn(CpuId) + Sync)) -> Result<(), PlatformError> {
        cpus.iter().for_each(work);
        Ok(())
    }
    fn synchronize_grace_period(&self) -> Result<(), PlatformError> {
        Ok(())
    }
    fn power_on_many(&self, cpus: CpuSet) -> Result<(), PlatformError> {
        let mut powered = self.powered.lock().unwrap();
        *powered = powered.union(&cpus);
        Ok(())
    }
    fn power_off_many(&self, cpus: CpuSet) -> Result<(), PlatformError> {
        let mut powered = self.powered.lock().unwrap();
        *powered = powered.difference(&cpus);
        Ok(())
    }
}

type Key = (usize, CpuId, Option<InstanceId>);

#[derive(Default)]
struct World {
    up: Mutex<HashMap<Key, bool>>,
    violations: Mutex<Vec<String>>,
    refusal: Mutex<Option<(usize, Direction, Option<CpuId>)>>,
}

impl World {
    fn callback(&self, index: usize, ctx: &hotkern_cpuhp::Context) -> Result<(), CallbackError> {
        {
            let mut refusal = self.refusal.lock().unwrap();
            if let Some((step, direction, cpu)) = *refusal {
                if step == index
                    && direction == ctx.direction
                    && !ctx.rollback
                    && cpu.is_none_or(|c| ctx.cpus.contains(c))
                {
                    *refusal = None;
                    return Err(CallbackError::new("refused"));
                }
            }
        }
        let mut up = self.up.lock().unwrap();
        for cpu in ctx.cpus {
            let key = (index, cpu, ctx.instance);
            let want = ctx.direction == Direction::Up;
            if up.insert(key, want).unwrap_or(false) == want {
                self.violations.lock().unwrap().push(format!("{key:?} {:?} twice", ctx.direction));
            }
        }
        Ok(())
    }
}

type Hp = Hotplug<parking_lot::RawMutex, Inline>;

fn callbacks(world: &Arc<World>, index: usize) -> Callbacks {
    let (a, b) = (world.clone(), world.clone());
    Callbacks::new()
        .startup(move |ctx| a.callback(index, ctx))
        .teardown(move |ctx| b.callback(index, ctx))
}

fn statuses(hp: &Hp) -> Vec<StepStatus> {
    let mut out = Vec::new();
    for cpu in 0..CPUS {
        for step in 0..TABLE.len() {
            out.push(hp.step_status(CpuId(cpu), StepId(step as u16)).unwrap());
        }
    }
    out
}

/// What the harness knows is registered: callbacks and instances per step.
struct Registered {
    callbacks: Vec<bool>,
    instances: Vec<Vec<InstanceId>>,
}

fn check(hp: &Hp, world: &World, registered: &Registered) {
    let violations = world.violations.lock().unwrap();
    assert!(violations.is_empty(), "{violations:?}");
    assert_eq!(hp.online_cpus(), *hp.platform().powered.lock().unwrap());
    let up = world.up.lock().unwrap();
    for cpu in 0..CPUS {
        let cpu = CpuId(cpu);
        for (index, spec) in TABLE.iter().enumerate() {
            if !registered.callbacks[index] {
                continue;
            }
            let status = hp.step_status(cpu, StepId(index as u16)).unwrap();
            let physical = matches!(status, StepStatus::Up | StepStatus::PendingTeardown);
            let instances: Vec<Option<InstanceId>> = if spec.multi {
                registered.instances[index].iter().copied().map(Some).collect()
            } else {
                vec![None]
            };
            for instance in instances {
                let is_up = *up.get(&(index, cpu, instance)).unwrap_or(&false);
                assert_eq!(is_up, physical, "step {index} on {cpu} {instance:?}: {status:?}");
            }
        }
    }
}

/// After a `_nocalls` change the subscriber takes the engine's word for
/// where the step (or instance) stands.
fn adopt(hp: &Hp, world: &World, index: usize, instance: Option<InstanceId>, present: bool) {
    let mut up = world.up.lock().unwrap();
    for cpu in 0..CPUS {
        let cpu = CpuId(cpu);
        let status = hp.step_status(cpu, StepId(index as u16)).unwrap();
        let physical = present && matches!(status, StepStatus::Up | StepStatus::PendingTeardown);
        up.insert((index, cpu, instance), physical);
    }
}

fn mask(bits: u8) -> CpuSet {
    (0..8).filter(|b| bits & (1 << b) != 0).map(CpuId).collect()
}

fuzz_target!(|ops: Vec<Op>| {
    let all = CpuSet::range(0, CPUS);
    let platform = Inline { powered: Mutex::new(all) };
    let hp = Hp::new(platform, TABLE, all, all, Engine::Bolt).unwrap();
    let world = Arc::new(World::default());
    let mut registered = Registered {
        callbacks: vec![false; TABLE.len()],
        instances: vec![Vec::new(); TABLE.len()],
    };
    for op in ops.into_iter().take(64) {
        let before = (statuses(&hp), hp.online_cpus());
        let failed = match op {
            Op::Online(cpu) => hp.online(CpuId(cpu.into())).is_err(),
            Op::Offline(cpu) => hp.offline(CpuId(cpu.into())).is_err(),
            Op::OnlineMany(bits) => hp.online_many(mask(bits)).is_err(),
            Op::OfflineMany(bits) => hp.offline_many(mask(bits)).is_err(),
            Op::RunDeferred => {
                hp.run_deferred();
                false
            }
            Op::Bolt(bolt) => {
                hp.set_engine(if bolt { Engine::Bolt } else { Engine::Classic });
                false
            }
            Op::Inject { step, up, cpu } => {
                let point = FailAt {
                    step: StepId(step.into()),
                    direction: if up { Direction::Up } else { Direction::Down },
                    cpu: cpu.map(|c| CpuId(c.into())),
                };
                let armed = hp.armed_failure();
                if hp.inject_failure(point).is_err() {
                    assert_eq!(hp.armed_failure(), armed);
                }
                false
            }
            Op::Refuse { step, up, cpu } => {
                let index = usize::from(step) % TABLE.len();
                let direction = if up { Direction::Up } else { Direction::Down };
                // Starting/dying callbacks must not fail (the engine counts it
                // and goes on), so only the others refuse.
                if TABLE[index].section != Section::Starting {
                    *world.refusal.lock().unwrap() = Some((index, direction, cpu.map(|c| CpuId(c.into()))));
                }
                false
            }
            Op::Setup { step, calls } => {
                let index = usize::from(step) % TABLE.len();
                let result = if calls {
                    hp.setup(StepId(index as u16), callbacks(&world, index))
                } else {
                    hp.setup_nocalls(StepId(index as u16), callbacks(&world, index))
                };
                if result.is_ok() {
                    registered.callbacks[index] = true;
                    if !calls {
                        let instances: Vec<Option<InstanceId>> = if TABLE[index].multi {
                            registered.instances[index].iter().copied().map(Some).collect()
                        } else {
                            vec![None]
                        };
                        for instance in instances {
                            adopt(&hp, &world, index, instance, true);
                        }
                    }
                }
                result.is_err()
            }
            Op::Remove { step, calls } => {
                let index = usize::from(step) % TABLE.len();
                let result = if calls {
                    hp.remove(StepId(index as u16))
                } else {
                    hp.remove_nocalls(StepId(index as u16))
                };
                if result.is_ok() {
                    registered.callbacks[index] = false;
                    world.up.lock().unwrap().retain(|key, _| key.0 != index);
                }
                result.is_err()
            }
            Op::AddInstance { step, instance, calls } => {
                let index = usize::from(step) % TABLE.len();
                let instance = InstanceId((instance % 4).into());
                let result = if calls {
                    hp.add_instance(StepId(index as u16), instance)
                } else {
                    hp.add_instance_nocalls(StepId(index as u16), instance)
                };
                if result.is_ok() {
                    registered.instances[index].push(instance);
                    if !calls && registered.callbacks[index] {
                        adopt(&hp, &world, index, Some(instance), true);
                    }
                }
                result.is_err()
            }
            Op::RemoveInstance { step, instance, calls } => {
                let index = usize::from(step) % TABLE.len();
                let instance = InstanceId((instance % 4).into());
                let result = if calls {
                    hp.remove_instance(StepId(index as u16), instance)
                } else {
                    hp.remove_instance_nocalls(StepId(index as u16), instance)
                };
                if result.is_ok() {
                    registered.instances[index].retain(|i| *i != instance);
                    world.up.lock().unwrap().retain(|key, _| !(key.0 == index && key.2 == Some(instance)));
                }
                result.is_err()
            }
        };
        if failed {
            // Registration failures may flush deferred work first; statuses
            // then legitimately move from pending to done.
            let after = (statuses(&hp), hp.online_cpus());
            if hp.pending_deferred() == 0 && before.0.iter().all(|s| matches!(s, StepStatus::Up | StepStatus::Down)) {
                assert_eq!(after, before);
            }
            assert_eq!(after.1, before.1);
        }
        check(&hp, &world, &registered);
    }
    hp.flush_deferred();
    check(&hp, &world, &registered);
});
