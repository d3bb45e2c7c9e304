//! What the report's stages account for: the whole critical path.

mod common;

use common::*;
use hotkern_cpuhp::{CpuId, CpuSet, Engine};

/// Every platform operation an operation makes lies inside one of the
/// report's stages, and the engine's stages tile the operation: with each
/// platform operation costing a millisecond, what no stage holds is a few
/// of the engine's own clock reads (10 ns each on the mock) at its two
/// ends, and the stages never count a step twice.
#[test]
fn the_stages_account_for_the_whole_critical_path() {
    for engine in ENGINES {
        let (hp, _world) = machine(engine, 4, false);
        hp.platform()
            .op_nanos
            .store(1_000_000, std::sync::atomic::Ordering::SeqCst);
        let reports = [
            hp.offline(CpuId(3)).unwrap(),
            hp.online(CpuId(3)).unwrap(),
            hp.offline_many(CpuSet::range(2, 4)).unwrap(),
            hp.online_many(CpuSet::range(2, 4)).unwrap(),
        ];
        for report in reports {
            let path = report.path_nanos();
            assert!(path <= report.nanos, "{engine:?} counted twice: {report}");
            assert!(
                report.nanos - path < 100,
                "{engine:?}: {} ns in no stage: {report}",
                report.nanos - path
            );
            assert!(report.stage("run-on").is_some() && report.stage("hotplug-unlock").is_some());
        }
    }
}

/// A `bolt` bulk online reports, in the order they ran, every step it ran
/// and the machine's stages, each once with its time summed over the
/// targets (the mock clock moves 10 ns per read, and a call reads it
/// twice); deferred steps have no stage.
#[test]
fn bolt_report_lists_each_stage_once_with_its_time() {
    let (hp, _world) = machine(Engine::Bolt, 4, false);
    hp.offline_many(CpuSet::range(2, 4)).unwrap();
    hp.flush_deferred();
    let report = hp.online_many(CpuSet::range(2, 4)).unwrap();
    let stages: Vec<(&str, u64)> = report.stages.iter().map(|s| (s.name, s.nanos)).collect();
    assert_eq!(
        stages,
        [
            // The request checked, then the engine's copy of the states
            // it works on.
            ("checks", 10),
            // From the start of the transition: settling deferred work
            // (none here) and the copy.
            ("snapshot", 20),
            // Taken once for the whole set.
            ("hotplug-lock", 10),
            // One aggregated call for both CPUs, inside the section.
            ("bp:perf", 10),
            ("prepare", 30),
            // Two power-ons between two clock reads.
            ("power", 10),
            ("stop-machine", 50),
            ("ap:sched-starting", 20),
            // Each step's outcome recorded, after each section (two).
            ("outcomes", 20),
            // Both CPUs' Online steps, posted and waited for, around the
            // two steps' own times.
            ("run-on", 90),
            ("ap:workqueue", 20),
            ("ap:sched-active", 20),
            ("commit", 10),
            ("kick-deferred", 10),
            ("hotplug-unlock", 10),
        ]
    );
    let nested: Vec<&str> = report
        .stages
        .iter()
        .filter(|s| s.nested)
        .map(|s| s.name)
        .collect();
    assert_eq!(
        nested,
        [
            "bp:perf",
            "ap:sched-starting",
            "ap:workqueue",
            "ap:sched-active"
        ]
    );
}
