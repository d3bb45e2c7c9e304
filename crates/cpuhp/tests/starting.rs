//! Going up, the `Starting` steps run through `Platform::run_starting`
//! (Linux runs them on the incoming CPU, stopping no other); going down,
//! through a stop-machine. A platform that does not override
//! `run_starting` gets a stop-machine both ways.

use std::sync::Mutex;

use hotkern_cpuhp::{
    Callbacks, Class, CpuId, CpuSet, Engine, Hotplug, Platform, Section, StepId, StepSpec,
};

#[derive(Default)]
struct Recorder {
    /// Whether `run_starting` is overridden.
    on_target: bool,
    calls: Mutex<Vec<(&'static str, CpuSet)>>,
}

impl Platform for Recorder {
    fn now_ns(&self) -> u64 {
        0
    }
    fn run_on(&self, cpu: CpuId, work: &(dyn Fn(CpuId) + Sync)) {
        work(cpu)
    }
    fn stop_machine(&self, cpus: CpuSet, work: &(dyn Fn(CpuId) + Sync)) {
        self.calls.lock().unwrap().push(("stop-machine", cpus));
        cpus.iter().for_each(work)
    }
    fn run_starting(&self, cpus: CpuSet, work: &(dyn Fn(CpuId) + Sync)) -> &'static str {
        if !self.on_target {
            self.stop_machine(cpus, work);
            return "stop-machine";
        }
        self.calls.lock().unwrap().push(("starting", cpus));
        cpus.iter().for_each(work);
        "starting"
    }
    fn synchronize_grace_period(&self) {}
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

#[test]
fn going_up_the_starting_steps_run_as_the_platform_brings_cpus_up() {
    let two = CpuSet::single(CpuId(2));
    for engine in [Engine::Classic, Engine::Bolt] {
        let (calls, stages) = run(engine, true);
        assert_eq!(
            calls,
            [("stop-machine", two), ("starting", two)],
            "{engine:?}"
        );
        assert!(stages.contains(&"starting"), "{engine:?}: {stages:?}");
        assert!(!stages.contains(&"stop-machine"), "{engine:?}: {stages:?}");
    }
}

#[test]
fn by_default_a_stop_machine_runs_them_both_ways() {
    let two = CpuSet::single(CpuId(2));
    for engine in [Engine::Classic, Engine::Bolt] {
        let (calls, stages) = run(engine, false);
        assert_eq!(calls, [("stop-machine", two), ("stop-machine", two)]);
        assert!(stages.contains(&"stop-machine"), "{engine:?}: {stages:?}");
    }
}
