//! The CPU limit is the user's: an engine over a larger `CpuMask` runs a
//! 1024-CPU machine, and one whose machine has 8 CPUs refuses the ninth.

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;

use hotkern_cpuhp::{
    Callbacks, Class, CpuId, CpuMask, Engine, Error, Hotplug, InlinePlatform, Section, StepSpec,
    StepStatus,
};

const TABLE: [StepSpec; 3] = [
    StepSpec::new("mm:pages", Section::Prepare, Class::Critical),
    StepSpec::new("timers:starting", Section::Starting, Class::Critical),
    StepSpec::new("sched:migrate", Section::Online, Class::Critical),
];

/// An engine over `WORDS` words whose every step counts the CPUs it is up on.
fn counted<const WORDS: usize>(
    possible: CpuMask<WORDS>,
    engine: Engine,
) -> (
    Hotplug<parking_lot::RawMutex, InlinePlatform, WORDS>,
    Vec<Arc<AtomicUsize>>,
) {
    let boot = CpuMask::single(CpuId(0));
    let hotplug = Hotplug::new(InlinePlatform, &TABLE, possible, boot, engine).unwrap();
    let mut counters = Vec::new();
    for spec in TABLE {
        let live = Arc::new(AtomicUsize::new(0));
        let (up, down) = (live.clone(), live.clone());
        let step = hotplug.step_id(spec.name).unwrap();
        hotplug
            .setup_nocalls(
                step,
                Callbacks::<WORDS>::default()
                    .startup(move |context| {
                        up.fetch_add(context.cpus.len(), SeqCst);
                        Ok(())
                    })
                    .teardown(move |context| {
                        down.fetch_sub(context.cpus.len(), SeqCst);
                        Ok(())
                    }),
            )
            .unwrap();
        counters.push(live);
    }
    (hotplug, counters)
}

#[test]
fn a_sixteen_word_engine_runs_1024_cpus_with_both_engines() {
    for engine in [Engine::Classic, Engine::Bolt] {
        let possible = CpuMask::<16>::range(0, 1024);
        let (hotplug, counters) = counted(possible, engine);
        let rest = possible.without(CpuId(0));

        let report = hotplug.online_many(rest).unwrap();
        assert_eq!(report.cpus.len(), 1023);
        assert_eq!(hotplug.online_cpus(), possible);
        for live in &counters {
            // Every step ran once for each CPU past the default's 256.
            assert_eq!(live.load(SeqCst), 1023, "{engine:?}");
        }
        let last = CpuId(1023);
        assert_eq!(
            hotplug.step_status(last, hotkern_cpuhp::StepId(2)),
            Some(StepStatus::Up)
        );

        hotplug.offline(last).unwrap();
        assert!(!hotplug.online_cpus().contains(last));
        hotplug.offline_many(CpuMask::range(512, 1023)).unwrap();
        hotplug.flush_deferred();
        assert_eq!(hotplug.online_cpus(), CpuMask::range(0, 512));
        for live in &counters {
            assert_eq!(live.load(SeqCst), 511, "{engine:?}");
        }
        hotplug.online(last).unwrap();
        assert!(hotplug.online_cpus().contains(last));
    }
}

#[test]
fn an_eight_cpu_machine_refuses_cpu_8_and_changes_nothing() {
    // The smallest mask is one word (64 CPUs); the machine's own limit is
    // its possible set.
    let (hotplug, counters) = counted(CpuMask::<1>::range(0, 8), Engine::Bolt);
    hotplug.online_many(CpuMask::range(1, 8)).unwrap();
    let before = hotplug.online_cpus();

    assert_eq!(hotplug.online(CpuId(8)), Err(Error::NoSuchCpu(CpuId(8))));
    assert_eq!(
        hotplug.online_many(CpuMask::range(6, 10)).map(|_| ()),
        Err(Error::NoSuchCpu(CpuId(8)))
    );
    // Beyond the mask's capacity: refused the same way, not wrapped around.
    assert_eq!(hotplug.online(CpuId(64)), Err(Error::NoSuchCpu(CpuId(64))));
    assert_eq!(
        hotplug.offline(CpuId(700)),
        Err(Error::NoSuchCpu(CpuId(700)))
    );

    assert_eq!(hotplug.online_cpus(), before);
    assert_eq!(before.len(), 8);
    for live in &counters {
        assert_eq!(live.load(SeqCst), 7);
    }
    assert_eq!(
        hotplug.step_status(CpuId(8), hotkern_cpuhp::StepId(0)),
        None
    );
}
