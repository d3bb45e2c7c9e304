//! Both engines over the mock machine: order, contexts, deferral and its
//! cancellation, bulk operations, refusals and timing.

mod common;

use common::*;
use hotkern_cpuhp::{
    Callbacks, Class, CpuId, CpuSet, Direction, Engine, Error, FailAt, Reuse, Section, StepId,
    StepSpec, StepStatus,
};

#[test]
fn classic_is_synchronous_ordered_pessimistic_and_serial() {
    let (hp, world) = machine(Engine::Classic, 4, false);
    let report = hp.offline(CpuId(3)).unwrap();
    let calls = world.take_calls();
    let mut expected = table_names();
    expected.reverse();
    assert_eq!(
        names(&calls, Direction::Down),
        expected,
        "teardown in exact reverse"
    );
    assert!(calls
        .iter()
        .all(|c| c.reuse == Reuse::No && !c.deferred && !c.rollback));
    assert_eq!(report.deferred, 0);
    assert_eq!(hp.pending_deferred(), 0);
    assert_consistent(&hp, &world);

    hp.online(CpuId(3)).unwrap();
    let calls = world.take_calls();
    assert_eq!(
        names(&calls, Direction::Up),
        table_names(),
        "startup in ascending order"
    );
    assert_consistent(&hp, &world);

    hp.platform().take_events();
    let report = hp.offline_many(CpuSet::range(1, 4)).unwrap();
    let events = hp.platform().take_events();
    let stops = events
        .iter()
        .filter(|e| matches!(e, Event::StopMachine(_)))
        .count();
    let grace = events
        .iter()
        .filter(|e| matches!(e, Event::GracePeriod))
        .count();
    assert_eq!(
        (stops, grace),
        (3, 3),
        "one stop-machine and normal grace period per CPU"
    );
    assert!(!events.contains(&Event::ExpeditedGracePeriod));
    assert!(events
        .iter()
        .all(|e| !matches!(e, Event::StopMachine(set) if set.len() > 1)));
    assert_eq!(report.cpus, CpuSet::range(1, 4));
    // Prepare steps are called once per CPU.
    let calls = world.take_calls();
    assert!(calls.iter().all(|c| c.cpus.len() == 1));
    assert_eq!(hp.online_cpus(), CpuSet::single(CpuId(0)));
    assert_consistent(&hp, &world);
}

#[test]
fn bolt_defers_deferrable_teardowns_and_flush_runs_them_in_reverse() {
    let (hp, world) = machine(Engine::Bolt, 4, false);
    let report = hp.offline(CpuId(2)).unwrap();
    let calls = world.take_calls();
    let critical: Vec<_> = TABLE
        .iter()
        .rev()
        .filter(|s| s.class == Class::Critical)
        .map(|s| s.name)
        .collect();
    assert_eq!(names(&calls, Direction::Down), critical);
    assert!(calls.iter().all(|c| c.reuse == Reuse::Yes && !c.deferred));
    let deferrable = TABLE
        .iter()
        .filter(|s| s.class == Class::Deferrable)
        .count();
    assert_eq!(report.deferred, deferrable);
    assert_eq!(hp.pending_deferred(), deferrable);
    assert!(hp.platform().take_events().contains(&Event::Kick));
    assert!(!hp.is_online(CpuId(2)));
    assert_eq!(
        hp.step_status(CpuId(2), step(&hp, "ap:sysfs")),
        Some(StepStatus::PendingTeardown)
    );
    assert!(!hp
        .step_status(CpuId(2), step(&hp, "ap:sysfs"))
        .unwrap()
        .is_logically_up());
    assert_consistent(&hp, &world);

    assert_eq!(hp.flush_deferred(), deferrable);
    let calls = world.take_calls();
    let deferred: Vec<_> = TABLE
        .iter()
        .rev()
        .filter(|s| s.class == Class::Deferrable)
        .map(|s| s.name)
        .collect();
    assert_eq!(names(&calls, Direction::Down), deferred);
    assert!(calls.iter().all(|c| c.deferred));
    assert_eq!(hp.pending_deferred(), 0);
    assert_eq!(
        hp.step_status(CpuId(2), step(&hp, "ap:sysfs")),
        Some(StepStatus::Down)
    );
    let time = hp.step_time(step(&hp, "ap:sysfs")).unwrap();
    assert!(time.teardown_deferred && time.teardown_nanos.unwrap() > 0);
    assert_consistent(&hp, &world);

    // Online defers deferrable startups the same way.
    let report = hp.online(CpuId(2)).unwrap();
    assert_eq!(report.deferred, deferrable);
    let calls = world.take_calls();
    let critical_up: Vec<_> = TABLE
        .iter()
        .filter(|s| s.class == Class::Critical)
        .map(|s| s.name)
        .collect();
    assert_eq!(names(&calls, Direction::Up), critical_up);
    assert_eq!(
        hp.step_status(CpuId(2), step(&hp, "ap:kthread")),
        Some(StepStatus::PendingStartup)
    );
    hp.flush_deferred();
    assert_consistent(&hp, &world);
    assert!(TABLE
        .iter()
        .enumerate()
        .all(|(i, _)| hp.step_status(CpuId(2), StepId(i as u16)) == Some(StepStatus::Up)));
}

#[test]
fn bolt_coming_back_before_the_deferred_teardown_cancels_it() {
    let (hp, world) = machine(Engine::Bolt, 4, false);
    hp.offline(CpuId(1)).unwrap();
    world.take_calls();
    let report = hp.online(CpuId(1)).unwrap();
    let deferrable: Vec<_> = TABLE
        .iter()
        .filter(|s| s.class == Class::Deferrable)
        .collect();
    // Every pending (cpu, step, instance-set) pair was cancelled...
    assert_eq!(report.cancelled, deferrable.len());
    assert_eq!(
        report.deferred, 0,
        "nothing to start: the kept steps are still up"
    );
    let calls = world.take_calls();
    // ...and their startups skipped: the kept structures are reused as they are.
    assert!(calls
        .iter()
        .all(|c| TABLE.iter().find(|s| s.name == c.name).unwrap().class == Class::Critical));
    assert_eq!(hp.pending_deferred(), 0);
    assert_eq!(hp.flush_deferred(), 0);
    for spec in deferrable {
        assert_eq!(
            hp.step_status(CpuId(1), hp.step_id(spec.name).unwrap()),
            Some(StepStatus::Up)
        );
    }
    assert_consistent(&hp, &world);
}

#[test]
fn bolt_going_away_before_the_deferred_startup_completes_it() {
    let (hp, world) = machine(Engine::Bolt, 4, false);
    hp.offline(CpuId(1)).unwrap();
    hp.flush_deferred();
    hp.online(CpuId(1)).unwrap();
    world.take_calls();
    let report = hp.offline(CpuId(1)).unwrap();
    let deferrable: Vec<_> = TABLE
        .iter()
        .filter(|s| s.class == Class::Deferrable)
        .map(|s| s.name)
        .collect();
    assert_eq!(report.cancelled, 0);
    assert!(report.stage("finish-deferred").is_some());
    // The pending startups ran first (in table order, as deferred calls)...
    let calls = world.take_calls();
    let first: Vec<_> = calls
        .iter()
        .take_while(|c| c.direction == Direction::Up)
        .collect();
    assert!(first.iter().all(|c| c.deferred));
    assert_eq!(names(&calls, Direction::Up), deferrable);
    // ...and the steps are then torn down like any other: deferred again.
    assert_eq!(report.deferred, deferrable.len());
    assert_consistent(&hp, &world);
    assert_eq!(hp.flush_deferred(), deferrable.len());
    assert_consistent(&hp, &world);
    // Pending work of another CPU is left to the worker.
    hp.offline(CpuId(2)).unwrap();
    hp.online(CpuId(1)).unwrap();
    assert!(hp.pending_deferred() > 0);
    assert_eq!(
        hp.step_status(CpuId(2), step(&hp, "ap:sysfs")),
        Some(StepStatus::PendingTeardown)
    );
    hp.flush_deferred();
    assert_eq!(
        hp.step_status(CpuId(2), step(&hp, "ap:sysfs")),
        Some(StepStatus::Down)
    );
    assert_consistent(&hp, &world);
}

#[test]
fn bolt_bulk_aggregates_prepare_steps_and_uses_one_stop_machine() {
    for parallel in [false, true] {
        let (hp, world) = machine(Engine::Bolt, 8, parallel);
        let set = CpuSet::range(1, 8);
        let report = hp.offline_many(set).unwrap();
        let events = hp.platform().take_events();
        let stops: Vec<_> = events
            .iter()
            .filter(|e| matches!(e, Event::StopMachine(_)))
            .collect();
        assert_eq!(stops, vec![&Event::StopMachine(set)]);
        // One grace period for all, expedited: bolt keeps the wait but
        // not its ticks; a normal one would be classic's.
        assert_eq!(
            events
                .iter()
                .filter(|e| matches!(e, Event::ExpeditedGracePeriod))
                .count(),
            1
        );
        assert!(!events.contains(&Event::GracePeriod));
        assert!(events.contains(&Event::RunOnEach(set)));
        let calls = world.take_calls();
        let perf: Vec<_> = calls.iter().filter(|c| c.name == "bp:perf").collect();
        assert_eq!(perf.len(), 1, "one aggregated call");
        assert_eq!(perf[0].cpus, set);
        assert_eq!(
            calls
                .iter()
                .filter(|c| c.name == "ap:sched-starting")
                .count(),
            7
        );
        assert!(report.stage("stop-machine").is_some());
        assert_eq!(hp.online_cpus(), CpuSet::single(CpuId(0)));
        assert_consistent(&hp, &world);
        hp.flush_deferred();
        // The deferred Prepare teardown is aggregated too.
        let calls = world.take_calls();
        let pages: Vec<_> = calls.iter().filter(|c| c.name == "bp:pages").collect();
        assert_eq!(pages.len(), 1);
        assert_eq!(pages[0].cpus, set);
        assert_consistent(&hp, &world);

        hp.online_many(set).unwrap();
        let events = hp.platform().take_events();
        assert_eq!(
            events
                .iter()
                .filter(|e| matches!(e, Event::StopMachine(_)))
                .count(),
            1
        );
        assert_eq!(hp.online_cpus(), CpuSet::range(0, 8));
        hp.flush_deferred();
        assert_consistent(&hp, &world);
    }
}

#[test]
fn bad_requests_are_refused_and_change_nothing() {
    for engine in ENGINES {
        let (hp, world) = machine(engine, 3, false);
        hp.offline(CpuId(2)).unwrap();
        hp.flush_deferred();
        world.take_calls();
        let before = statuses(&hp);
        let online = hp.online_cpus();
        let cases = [
            (hp.online(CpuId(0)), Error::AlreadyOnline(CpuId(0))),
            (hp.offline(CpuId(2)), Error::AlreadyOffline(CpuId(2))),
            (hp.online(CpuId(7)), Error::NoSuchCpu(CpuId(7))),
            (
                hp.offline(CpuId(u32::MAX)),
                Error::NoSuchCpu(CpuId(u32::MAX)),
            ),
            (hp.online_many(CpuSet::EMPTY), Error::EmptySet),
            (hp.offline_many(CpuSet::range(0, 2)), Error::LastCpu),
            (
                hp.online_many(CpuSet::range(1, 3)),
                Error::AlreadyOnline(CpuId(1)),
            ),
            (
                hp.offline_many(CpuSet::range(1, 3)),
                Error::AlreadyOffline(CpuId(2)),
            ),
        ];
        for (result, expected) in cases {
            assert_eq!(result.err(), Some(expected), "{engine:?}");
        }
        hp.offline(CpuId(1)).unwrap();
        assert_eq!(hp.offline(CpuId(0)).err(), Some(Error::LastCpu));
        hp.online(CpuId(1)).unwrap();
        hp.flush_deferred();
        assert_eq!(statuses(&hp), before);
        assert_eq!(hp.online_cpus(), online);
        assert_consistent(&hp, &world);
        assert_eq!(
            hp.inject_failure(FailAt {
                step: step(&hp, "ap:sched-starting"),
                direction: Direction::Up,
                cpu: None
            })
            .err(),
            Some(Error::CannotFail(step(&hp, "ap:sched-starting")))
        );
        assert_eq!(
            hp.inject_failure(FailAt {
                step: StepId(50),
                direction: Direction::Up,
                cpu: None
            })
            .err(),
            Some(Error::NoSuchStep(StepId(50)))
        );
        assert_eq!(
            hp.inject_failure(FailAt {
                step: StepId(0),
                direction: Direction::Up,
                cpu: Some(CpuId(9))
            })
            .err(),
            Some(Error::NoSuchCpu(CpuId(9)))
        );
        assert_eq!(hp.armed_failure(), None);
    }
}

#[test]
fn reports_time_every_step_and_stage() {
    for engine in ENGINES {
        let (hp, _world) = machine(engine, 3, false);
        let report = hp.offline(CpuId(2)).unwrap();
        assert_eq!(report.engine, engine);
        assert_eq!(report.direction, Direction::Down);
        assert!(report.nanos > 0);
        let takedown: &[&str] = if engine.stops_machine() {
            &["stop-machine"]
        } else {
            &["reader-drain", "dying"]
        };
        for stage in ["grace-period", "power", "bp:perf", "ap:sched-active"]
            .iter()
            .chain(takedown)
        {
            assert!(report.stage(stage).is_some(), "{engine:?} {stage}");
        }
        // Without a stop-machine there is none to time.
        assert_eq!(
            report.stage("stop-machine").is_some(),
            engine.stops_machine(),
            "{engine:?}"
        );
        let deferred_stage = report.stage("ap:sysfs");
        assert_eq!(deferred_stage.is_some(), engine == Engine::Classic);
        let perf = hp.step_time(step(&hp, "bp:perf")).unwrap();
        assert_eq!(perf.teardown_nanos, report.stage("bp:perf"));
        assert!(!perf.teardown_deferred);
        assert_eq!(perf.startup_nanos, None);
        let report = hp.online(CpuId(2)).unwrap();
        assert!(report.stage("grace-period").is_none());
        // A bulk operation records the whole operation's time per step.
        let report = hp.offline_many(CpuSet::range(1, 3)).unwrap();
        let perf = hp.step_time(step(&hp, "bp:perf")).unwrap();
        assert_eq!(perf.teardown_nanos, report.stage("bp:perf"));
        if engine == Engine::Classic {
            // Two CPUs, one after the other: the mock clock makes each 10 ns.
            assert_eq!(report.stage("bp:perf"), Some(20));
        }
        assert!(hp
            .step_time(step(&hp, "bp:perf"))
            .unwrap()
            .startup_nanos
            .is_some());
    }
}

#[test]
fn switching_engine_flushes_and_keeps_everything() {
    let (hp, world) = machine(Engine::Bolt, 3, false);
    hp.offline(CpuId(2)).unwrap();
    assert!(hp.pending_deferred() > 0);
    hp.set_engine(Engine::Classic);
    assert_eq!(hp.engine(), Engine::Classic);
    assert_eq!(hp.pending_deferred(), 0);
    hp.online(CpuId(2)).unwrap();
    assert_consistent(&hp, &world);
}

/// The worker is kicked once by an operation that deferred something and
/// never by one that did not, and a report has a stage for completing
/// pending startups only when it completed some.
#[test]
fn worker_kick_and_finish_stage_only_with_deferred_work() {
    let (hp, _world) = machine(Engine::Classic, 3, false);
    let kicks = |hp: &Hp| {
        let events = hp.platform().take_events();
        events.iter().filter(|e| **e == Event::Kick).count()
    };
    let finished =
        |report: &hotkern_cpuhp::Report| report.stages.iter().any(|s| s.name == "finish-deferred");
    let report = hp.offline(CpuId(2)).unwrap();
    assert_eq!((kicks(&hp), finished(&report)), (0, false), "classic");
    hp.set_engine(Engine::Bolt);
    hp.platform().take_events();
    // Deferrable startups go to the worker.
    let report = hp.online(CpuId(2)).unwrap();
    assert_eq!((kicks(&hp), finished(&report)), (1, false), "online");
    // They are still pending: the offline completes them first.
    let report = hp.offline(CpuId(2)).unwrap();
    assert_eq!((kicks(&hp), finished(&report)), (1, true), "offline");
}

/// A platform that gives only what it must: `run_on` is the trait's
/// default, a set of one through `run_on_each`, which must still run
/// every target's `Online` steps.
#[test]
fn default_run_on_goes_through_run_on_each() {
    use std::sync::Mutex;
    struct Plain {
        ran_on: Mutex<Vec<CpuId>>,
        grace_periods: std::sync::atomic::AtomicUsize,
    }
    impl hotkern_cpuhp::Platform for Plain {
        fn now_ns(&self) -> u64 {
            0
        }
        fn run_on_each(
            &self,
            cpus: CpuSet,
            work: &(dyn Fn(CpuId) + Sync),
        ) -> Result<(), hotkern_cpuhp::PlatformError> {
            for cpu in cpus {
                self.ran_on.lock().unwrap().push(cpu);
                work(cpu);
            }
            Ok(())
        }
        fn stop_machine(
            &self,
            cpus: CpuSet,
            work: &(dyn Fn(CpuId) + Sync),
        ) -> Result<(), hotkern_cpuhp::PlatformError> {
            cpus.iter().for_each(work);
            Ok(())
        }
        fn power_on_many(&self, _: CpuSet) -> Result<(), hotkern_cpuhp::PlatformError> {
            Ok(())
        }
        fn power_off_many(&self, _: CpuSet) -> Result<(), hotkern_cpuhp::PlatformError> {
            Ok(())
        }
        fn synchronize_grace_period(&self) -> Result<(), hotkern_cpuhp::PlatformError> {
            self.grace_periods
                .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok(())
        }
    }
    let table = [StepSpec::new("ap:active", Section::Online, Class::Critical)];
    let all = CpuSet::range(0, 3);
    let plain = Plain {
        ran_on: Mutex::new(Vec::new()),
        grace_periods: std::sync::atomic::AtomicUsize::new(0),
    };
    let hp = hotkern_cpuhp::Hotplug::<parking_lot::RawMutex, Plain>::new(
        plain,
        &table,
        all,
        CpuSet::single(CpuId(0)),
        Engine::Bolt,
    )
    .unwrap();
    let started = std::sync::Arc::new(Mutex::new(Vec::new()));
    let record = started.clone();
    hp.setup(
        StepId(0),
        Callbacks::new().startup(move |ctx| {
            record.lock().unwrap().push(ctx.cpu);
            Ok(())
        }),
    )
    .unwrap();
    started.lock().unwrap().clear();
    hp.platform().ran_on.lock().unwrap().clear();
    hp.online_many(CpuSet::range(1, 3)).unwrap();
    assert_eq!(*started.lock().unwrap(), [CpuId(1), CpuId(2)]);
    assert_eq!(*hp.platform().ran_on.lock().unwrap(), [CpuId(1), CpuId(2)]);
    assert_eq!(hp.online_cpus(), all);
    // One CPU goes through the default `run_on`: a set of one.
    hp.offline(CpuId(2)).unwrap();
    started.lock().unwrap().clear();
    hp.platform().ran_on.lock().unwrap().clear();
    hp.online(CpuId(2)).unwrap();
    assert_eq!(*started.lock().unwrap(), [CpuId(2)]);
    assert_eq!(*hp.platform().ran_on.lock().unwrap(), [CpuId(2)]);
    // Bolt's grace period is the default expedited one: a normal one.
    let before = hp
        .platform()
        .grace_periods
        .load(std::sync::atomic::Ordering::SeqCst);
    hp.offline(CpuId(2)).unwrap();
    assert_eq!(
        hp.platform()
            .grace_periods
            .load(std::sync::atomic::Ordering::SeqCst),
        before + 1
    );
}

/// Every transition holds the hotplug lock's write side from before its
/// first step to after its last, as Linux's `_cpu_down` and `_cpu_up` hold
/// `cpus_write_lock`: classic once per CPU, bolt once for a bulk set (and
/// expedited), and it is given back when a step fails.
#[test]
fn every_transition_holds_the_hotplug_lock() {
    for engine in ENGINES {
        let (hp, world) = machine(engine, 4, false);
        hp.platform().take_events();
        hp.offline_many(CpuSet::range(1, 4)).unwrap();
        let events = hp.platform().take_events();
        let transitions = if engine == Engine::Classic { 3 } else { 1 };
        let expedited = engine.is_bolt();
        let locks: Vec<_> = events
            .iter()
            .enumerate()
            .filter(|(_, e)| matches!(e, Event::HotplugLock(_)))
            .collect();
        assert_eq!(locks.len(), transitions, "{engine:?}");
        assert!(locks
            .iter()
            .all(|(_, e)| **e == Event::HotplugLock(expedited)));
        // Held across the stop-machine, given back before the next lock.
        let mut held = false;
        for event in &events {
            match event {
                Event::HotplugLock(_) => {
                    assert!(!held, "{engine:?}: taken twice");
                    held = true;
                }
                Event::HotplugUnlock => {
                    assert!(held, "{engine:?}: given back untaken");
                    held = false;
                }
                Event::StopMachine(_)
                | Event::RunDying(_)
                | Event::RunOn(_)
                | Event::RunOnEach(_) => {
                    assert!(held, "{engine:?}: {event:?} without the lock")
                }
                _ => {}
            }
        }
        assert!(!held, "{engine:?}: still held after the operation");
        // A failing step gives it back too.
        world.refuse(refusal("bp:perf", Direction::Up, 2));
        assert!(hp.online(CpuId(2)).is_err());
        let events = hp.platform().take_events();
        let taken = events
            .iter()
            .filter(|e| matches!(e, Event::HotplugLock(_)))
            .count();
        let given = events
            .iter()
            .filter(|e| **e == Event::HotplugUnlock)
            .count();
        assert_eq!((taken, given), (1, 1), "{engine:?}");
    }
}
