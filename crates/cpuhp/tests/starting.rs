//! Going up, CPUs are powered on and run their `Starting` steps through
//! `Platform::bring_up` (Linux's incoming CPU runs them itself, stopping no
//! other); going down, the steps run in a stop-machine. A platform that
//! does not override `bring_up` gets a power-on and a stop-machine.

use std::sync::Mutex;

use hotkern_cpuhp::{
    Callbacks, Class, CpuId, CpuSet, Engine, Hotplug, Platform, PlatformError, Section, StepId,
    StepSpec,
};

#[derive(Default)]
struct Recorder {
    /// Whether `bring_up` is overridden.
    on_target: bool,
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
        self.calls.lock().unwrap().push(("stop-machine", cpus));
        cpus.iter().for_each(work);
        Ok(())
    }
    fn power_on_many(&self, cpus: CpuSet) -> Result<(), PlatformError> {
        self.calls.lock().unwrap().push(("power-on", cpus));
        Ok(())
    }
    fn power_off_many(&self, _: CpuSet) -> Result<(), PlatformError> {
        Ok(())
    }
    fn bring_up(
        &self,
        cpus: CpuSet,
        work: &(dyn Fn(CpuId) + Sync),
        mark: &mut dyn FnMut(&'static str),
    ) -> Result<(), PlatformError> {
        if !self.on_target {
            self.power_on_many(cpus)?;
            mark("power");
            self.stop_machine(cpus, work)?;
            mark("stop-machine");
            return Ok(());
        }
        self.calls.lock().unwrap().push(("bring-up", cpus));
        mark("power");
        cpus.iter().for_each(work);
        mark("starting");
        Ok(())
    }
    fn synchronize_grace_period(&self) -> Result<(), PlatformError> {
        Ok(())
    }
}

const TABLE: &[StepSpec] = &[StepSpec::new(
    "sched:starting",
    Section::Starting,
    Class::Critical,
)];

/// Each platform call, and each callback's direction and CPUs.
fn run(engine: Engine, on_target: bool) -> (Vec<(&'static str, CpuSet)>, Vec<&'static str>) {
    let all = CpuSet::range(0, 4);
    let platform = Recorder {
        on_target,
        ..Recorder::default()
    };
    let hp = Hotplug::<parking_lot::RawMutex, _>::new(platform, TABLE, all, all, engine).unwrap();
    let ran = std::sync::Arc::new(Mutex::new(Vec::new()));
    let (up, down) = (ran.clone(), ran.clone());
    hp.setup(
        StepId(0),
        Callbacks::new()
            .startup(move |ctx| {
                up.lock().unwrap().push(("up", ctx.cpus));
                Ok(())
            })
            .teardown(move |ctx| {
                down.lock().unwrap().push(("down", ctx.cpus));
                Ok(())
            }),
    )
    .unwrap();
    // Setting the step up ran its startup for every online CPU.
    ran.lock().unwrap().clear();
    let two = CpuSet::single(CpuId(2));
    hp.offline(CpuId(2)).unwrap();
    let report = hp.online(CpuId(2)).unwrap();
    let stages = report.stages.iter().map(|stage| stage.name).collect();
    let calls = hp.platform().calls.lock().unwrap().clone();
    assert_eq!(*ran.lock().unwrap(), [("down", two), ("up", two)]);
    (calls, stages)
}

/// The engine's own stages of the online, in order.
fn engine_stages(stages: &[&'static str]) -> Vec<&'static str> {
    let own = ["power", "starting", "stop-machine"];
    stages.iter().copied().filter(|s| own.contains(s)).collect()
}

#[test]
fn going_up_the_platform_powers_cpus_on_and_they_run_their_starting_steps() {
    let two = CpuSet::single(CpuId(2));
    for engine in [Engine::Classic, Engine::Bolt] {
        let (calls, stages) = run(engine, true);
        assert_eq!(
            calls,
            [("stop-machine", two), ("bring-up", two)],
            "{engine:?}"
        );
        assert_eq!(engine_stages(&stages), ["power", "starting"], "{engine:?}");
    }
}

#[test]
fn by_default_a_power_on_then_a_stop_machine() {
    let two = CpuSet::single(CpuId(2));
    for engine in [Engine::Classic, Engine::Bolt] {
        let (calls, stages) = run(engine, false);
        assert_eq!(
            calls,
            [
                ("stop-machine", two),
                ("power-on", two),
                ("stop-machine", two)
            ]
        );
        assert_eq!(
            engine_stages(&stages),
            ["power", "stop-machine"],
            "{engine:?}"
        );
    }
}
