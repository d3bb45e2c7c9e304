//! The engine powers CPUs through `power_on_many` / `power_off_many`, so
//! that a platform able to start or stop CPUs in parallel gets a whole
//! bulk operation's targets in one call (bolt), and one CPU per call when
//! the engine goes one CPU at a time (classic).

use std::sync::Mutex;

use hotkern_cpuhp::{
    Class, CpuId, CpuSet, Engine, Hotplug, Platform, PlatformError, Section, StepSpec,
};

#[derive(Default)]
struct Recorder {
    calls: Mutex<Vec<(&'static str, CpuSet)>>,
}

impl Platform for Recorder {
    fn now_ns(&self) -> u64 {
        0
    }
    fn run_on_each(
        &self,
        cpus: CpuSet,
        work: &(dyn Fn(CpuId) + Sync),
    ) -> Result<(), PlatformError> {
        cpus.iter().for_each(work);
        Ok(())
    }
    fn stop_machine(
        &self,
        cpus: CpuSet,
        work: &(dyn Fn(CpuId) + Sync),
    ) -> Result<(), PlatformError> {
        cpus.iter().for_each(work);
        Ok(())
    }
    fn synchronize_grace_period(&self) -> Result<(), PlatformError> {
        Ok(())
    }
    fn power_on_many(&self, cpus: CpuSet) -> Result<(), PlatformError> {
        self.calls.lock().unwrap().push(("on", cpus));
        Ok(())
    }
    fn power_off_many(&self, cpus: CpuSet) -> Result<(), PlatformError> {
        self.calls.lock().unwrap().push(("off", cpus));
        Ok(())
    }
}

const TABLE: &[StepSpec] = &[StepSpec::new(
    "sched:starting",
    Section::Starting,
    Class::Critical,
)];

fn calls(engine: Engine) -> Vec<(&'static str, CpuSet)> {
    let all = CpuSet::range(0, 4);
    let hp = Hotplug::<parking_lot::RawMutex, _>::new(Recorder::default(), TABLE, all, all, engine)
        .unwrap();
    hp.offline_many(CpuSet::range(1, 4)).unwrap();
    hp.online_many(CpuSet::range(1, 4)).unwrap();
    hp.offline(CpuId(2)).unwrap();
    hp.online(CpuId(2)).unwrap();
    let calls = hp.platform().calls.lock().unwrap().clone();
    calls
}

#[test]
fn bolt_powers_a_bulk_operations_targets_in_one_call() {
    let bulk = CpuSet::range(1, 4);
    let two = CpuSet::single(CpuId(2));
    assert_eq!(
        calls(Engine::Bolt),
        [("off", bulk), ("on", bulk), ("off", two), ("on", two)]
    );
}

#[test]
fn classic_powers_one_cpu_per_call() {
    let one = |cpu| CpuSet::single(CpuId(cpu));
    assert_eq!(
        calls(Engine::Classic),
        [
            ("off", one(1)),
            ("off", one(2)),
            ("off", one(3)),
            ("on", one(1)),
            ("on", one(2)),
            ("on", one(3)),
            ("off", one(2)),
            ("on", one(2)),
        ]
    );
}
