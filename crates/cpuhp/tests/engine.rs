//! Deterministic tests of both engines over the mock machine.

mod common;

use common::*;
use hotkern_cpuhp::{
    CallbackError, Callbacks, Class, CpuId, CpuSet, Direction, Engine, Error, FailAt, InstanceId,
    Reuse, Section, StepId, StepSpec, StepStatus,
};

const ENGINES: [Engine; 2] = [Engine::Classic, Engine::Bolt];

fn names(calls: &[Call], direction: Direction) -> Vec<&'static str> {
    let mut out: Vec<&'static str> = Vec::new();
    for call in calls.iter().filter(|c| c.direction == direction) {
        if out.last() != Some(&call.name) {
            out.push(call.name);
        }
    }
    out
}

fn table_names() -> Vec<&'static str> {
    TABLE.iter().map(|s| s.name).collect()
}

#[test]
fn new_validates_the_table_and_masks() {
    let one = CpuSet::single(CpuId(0));
    let dup = [
        StepSpec::new("a", Section::Prepare, Class::Critical),
        StepSpec::new("a", Section::Online, Class::Critical),
    ];
    assert_eq!(
        Hp::new(Mock::new(one, false), &dup, one, one, Engine::Bolt).err(),
        Some(Error::DuplicateName("a"))
    );
    let order = [
        StepSpec::new("a", Section::Online, Class::Critical),
        StepSpec::new("b", Section::Prepare, Class::Critical),
    ];
    assert_eq!(
        Hp::new(Mock::new(one, false), &order, one, one, Engine::Bolt).err(),
        Some(Error::SectionOrder("b"))
    );
    assert_eq!(
        Hp::new(
            Mock::new(one, false),
            TABLE,
            one,
            CpuSet::range(0, 2),
            Engine::Bolt
        )
        .err(),
        Some(Error::NoSuchCpu(CpuId(1)))
    );
    assert_eq!(
        Hp::new(
            Mock::new(one, false),
            TABLE,
            one,
            CpuSet::EMPTY,
            Engine::Bolt
        )
        .err(),
        Some(Error::NoOnlineCpu)
    );
    let hp = Hp::new(
        Mock::new(one, false),
        TABLE,
        CpuSet::range(0, 3),
        one,
        Engine::Classic,
    )
    .unwrap();
    assert_eq!(hp.step_status(CpuId(0), StepId(0)), Some(StepStatus::Up));
    assert_eq!(hp.step_status(CpuId(2), StepId(8)), Some(StepStatus::Down));
    assert_eq!(hp.step_spec(StepId(5)), Some(TABLE[5]));
    assert_eq!(hp.step_count(), TABLE.len());
}

#[test]
fn setup_runs_startup_on_online_cpus_only_and_nocalls_runs_nothing() {
    let hp = Hp::new(
        Mock::new(CpuSet::range(0, 2), false),
        TABLE,
        CpuSet::range(0, 4),
        CpuSet::range(0, 2),
        Engine::Classic,
    )
    .unwrap();
    let world = std::sync::Arc::new(World::default());
    let sysfs = step(&hp, "ap:sysfs");
    hp.setup(sysfs, world.callbacks(Section::Online)).unwrap();
    let calls = world.take_calls();
    assert_eq!(calls.len(), 2);
    assert!(
        calls
            .iter()
            .all(|c| c.direction == Direction::Up
                && c.place == Place::Target(c.cpus.first().unwrap()))
    );
    assert!(world.is_up("ap:sysfs", CpuId(1), None) && !world.is_up("ap:sysfs", CpuId(2), None));
    assert_eq!(
        hp.setup(sysfs, world.callbacks(Section::Online)).err(),
        Some(Error::AlreadySetUp(sysfs))
    );

    let pages = step(&hp, "bp:pages");
    hp.setup_nocalls(pages, world.callbacks(Section::Prepare))
        .unwrap();
    assert!(world.take_calls().is_empty());

    // The step now runs in operations.
    hp.online(CpuId(2)).unwrap();
    assert!(world.is_up("ap:sysfs", CpuId(2), None));
    assert!(world.is_up("bp:pages", CpuId(2), None));

    hp.remove(sysfs).unwrap();
    assert!(!world.is_up("ap:sysfs", CpuId(0), None) && !world.is_up("ap:sysfs", CpuId(2), None));
    assert_eq!(hp.remove(sysfs).err(), Some(Error::NotSetUp(sysfs)));
    hp.remove_nocalls(pages).unwrap();
    assert!(
        world.is_up("bp:pages", CpuId(2), None),
        "nocalls must not tear down"
    );
    assert_eq!(
        hp.setup(StepId(99), Callbacks::new()).err(),
        Some(Error::NoSuchStep(StepId(99)))
    );
}

#[test]
fn failing_setup_undoes_the_cpus_done_and_installs_nothing() {
    let all = CpuSet::range(0, 4);
    let hp = Hp::new(Mock::new(all, false), TABLE, all, all, Engine::Bolt).unwrap();
    let world = std::sync::Arc::new(World::default());
    world.refuse(Refusal {
        name: "bp:perf",
        direction: Direction::Up,
        cpu: Some(CpuId(2)),
        instance: None,
    });
    let perf = step(&hp, "bp:perf");
    let error = hp
        .setup(perf, world.callbacks(Section::Prepare))
        .unwrap_err();
    assert!(
        matches!(error, Error::StepFailed { step, cpu: CpuId(2), direction: Direction::Up, .. } if step == perf)
    );
    for cpu in all {
        assert!(!world.is_up("bp:perf", cpu, None));
    }
    world.assert_no_violations();
    // Nothing was installed: a second setup works and runs everywhere.
    hp.setup(perf, world.callbacks(Section::Prepare)).unwrap();
    assert!(all.iter().all(|cpu| world.is_up("bp:perf", cpu, None)));
}

#[test]
fn instances_are_called_one_by_one_and_validated() {
    let (hp, world) = machine(Engine::Classic, 2, false);
    let queues = step(&hp, "bp:queues");
    let perf = step(&hp, "bp:perf");
    assert_eq!(
        hp.add_instance(perf, A).err(),
        Some(Error::NotMultiInstance(perf))
    );
    assert_eq!(
        hp.add_instance(queues, A).err(),
        Some(Error::DuplicateInstance(queues, A))
    );
    assert_eq!(
        hp.remove_instance(queues, InstanceId(9)).err(),
        Some(Error::NoSuchInstance(queues, InstanceId(9)))
    );
    assert_eq!(hp.remove(queues).err(), Some(Error::HasInstances(queues)));

    let c = InstanceId(3);
    hp.add_instance(queues, c).unwrap();
    let calls = world.take_calls();
    assert_eq!(calls.len(), 2);
    assert!(calls.iter().all(|call| call.instance == Some(c)));

    hp.offline(CpuId(1)).unwrap();
    let calls = world.take_calls();
    let per_instance: Vec<_> = calls
        .iter()
        .filter(|c| c.name == "bp:queues")
        .map(|c| c.instance)
        .collect();
    assert_eq!(per_instance, vec![Some(A), Some(B), Some(c)]);

    // A failing instance: the ones before it are undone, the operation rolls back.
    world.refuse(Refusal {
        name: "bp:queues",
        direction: Direction::Up,
        cpu: None,
        instance: Some(B),
    });
    let error = hp.online(CpuId(1)).unwrap_err();
    assert!(matches!(
        error,
        Error::StepFailed {
            instance: Some(B),
            ..
        }
    ));
    assert!(!hp.is_online(CpuId(1)));
    for instance in [A, B, c] {
        assert!(!world.is_up("bp:queues", CpuId(1), Some(instance)));
    }
    world.assert_no_violations();

    hp.remove_instance_nocalls(queues, c).unwrap();
    hp.add_instance_nocalls(queues, c).unwrap();
    hp.remove_instance(queues, c).unwrap();
    assert!(!world.is_up("bp:queues", CpuId(0), Some(c)));
}

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
        "one stop-machine and grace period per CPU"
    );
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
fn bolt_going_away_before_the_deferred_startup_cancels_it() {
    let (hp, world) = machine(Engine::Bolt, 4, false);
    hp.offline(CpuId(1)).unwrap();
    hp.flush_deferred();
    hp.online(CpuId(1)).unwrap();
    world.take_calls();
    let report = hp.offline(CpuId(1)).unwrap();
    let deferrable = TABLE
        .iter()
        .filter(|s| s.class == Class::Deferrable)
        .count();
    assert_eq!(report.cancelled, deferrable);
    assert_eq!(report.deferred, 0);
    assert_eq!(hp.flush_deferred(), 0);
    assert_consistent(&hp, &world);
    // A pending job for another CPU is not touched by the cancellation.
    hp.offline(CpuId(2)).unwrap();
    hp.online(CpuId(1)).unwrap();
    assert!(hp.pending_deferred() > 0);
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
        assert_eq!(
            events
                .iter()
                .filter(|e| matches!(e, Event::GracePeriod))
                .count(),
            1
        );
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

/// Injects a failure at every fallible step, both directions, both engines,
/// single and bulk, flushed or with deferred work pending: the operation
/// fails naming the step and every CPU ends where it started.
#[test]
fn injected_failure_at_every_step_rolls_back() {
    for engine in ENGINES {
        for bulk in [false, true] {
            for pending in [false, true] {
                for (index, spec) in TABLE.iter().enumerate() {
                    if spec.section == Section::Starting {
                        continue;
                    }
                    for direction in [Direction::Up, Direction::Down] {
                        let (hp, world) = machine(engine, 5, false);
                        let targets = if bulk {
                            CpuSet::range(2, 5)
                        } else {
                            CpuSet::single(CpuId(3))
                        };
                        if direction == Direction::Up {
                            hp.offline_many(targets).unwrap();
                        } else {
                            // Online with deferred startups possibly pending.
                            hp.offline_many(targets).unwrap();
                            hp.flush_deferred();
                            hp.online_many(targets).unwrap();
                        }
                        if !pending {
                            hp.flush_deferred();
                        }
                        let before = statuses(&hp);
                        let online = hp.online_cpus();
                        let pending_before = hp.pending_deferred();
                        let failing = StepId(index as u16);
                        // The last target fails: the others are already done by then.
                        let cpu = targets.iter().last().unwrap();
                        hp.inject_failure(FailAt {
                            step: failing,
                            direction,
                            cpu: Some(cpu),
                        })
                        .unwrap();
                        let result = match direction {
                            Direction::Up => hp.online_many(targets),
                            Direction::Down => hp.offline_many(targets),
                        };
                        let what = format!(
                            "{engine:?} bulk={bulk} pending={pending} {} {direction:?}",
                            spec.name
                        );
                        if pending && engine == Engine::Bolt && spec.class == Class::Deferrable {
                            // The step was pending the other way: cancelling it
                            // leaves nothing to do, so it is never reached.
                            assert!(result.is_ok(), "{what}: {result:?}");
                            assert_eq!(hp.armed_failure().map(|f| f.step), Some(failing), "{what}");
                            hp.flush_deferred();
                            assert_consistent(&hp, &world);
                            continue;
                        }
                        match result {
                            Err(Error::StepFailed {
                                step,
                                direction: d,
                                cause,
                                ..
                            }) => {
                                assert_eq!(
                                    (step, d, cause),
                                    (failing, direction, CallbackError::INJECTED),
                                    "{what}"
                                );
                            }
                            other => panic!("{what}: {other:?}"),
                        }
                        assert_eq!(statuses(&hp), before, "{what}");
                        assert_eq!(hp.online_cpus(), online, "{what}");
                        assert_eq!(hp.pending_deferred(), pending_before, "{what}");
                        assert_eq!(hp.armed_failure(), None, "{what}: one-shot");
                        assert_consistent(&hp, &world);
                        hp.flush_deferred();
                        assert_consistent(&hp, &world);
                        // The same operation now succeeds.
                        match direction {
                            Direction::Up => hp.online_many(targets).unwrap(),
                            Direction::Down => hp.offline_many(targets).unwrap(),
                        };
                        hp.flush_deferred();
                        assert_consistent(&hp, &world);
                    }
                }
            }
        }
    }
}

/// A real callback failure (not injected) rolls back the same way, and the
/// rollback calls are marked as such.
#[test]
fn failing_callback_rolls_back_every_step_done() {
    for engine in ENGINES {
        for (index, spec) in TABLE.iter().enumerate() {
            if spec.section == Section::Starting
                || (engine == Engine::Bolt && spec.class == Class::Deferrable)
            {
                continue;
            }
            for direction in [Direction::Up, Direction::Down] {
                let (hp, world) = machine(engine, 3, false);
                if direction == Direction::Up {
                    hp.offline(CpuId(2)).unwrap();
                }
                hp.flush_deferred();
                let before = statuses(&hp);
                world.take_calls();
                world.refuse(Refusal {
                    name: spec.name,
                    direction,
                    cpu: Some(CpuId(2)),
                    instance: None,
                });
                let result = match direction {
                    Direction::Up => hp.online(CpuId(2)),
                    Direction::Down => hp.offline(CpuId(2)),
                };
                assert!(
                    matches!(result, Err(Error::StepFailed { step, cpu: CpuId(2), .. }) if step == StepId(index as u16)),
                    "{engine:?} {} {direction:?}: {result:?}",
                    spec.name
                );
                let calls = world.take_calls();
                let undone = calls.iter().filter(|c| c.rollback).count();
                let done = calls
                    .iter()
                    .filter(|c| !c.rollback && c.direction == direction)
                    .count()
                    - 1;
                assert_eq!(undone, done, "every call done is undone once");
                assert_eq!(statuses(&hp), before);
                assert_consistent(&hp, &world);
            }
        }
    }
}

#[test]
fn classic_bulk_failure_brings_back_the_cpus_already_done() {
    let (hp, world) = machine(Engine::Classic, 5, false);
    let before = statuses(&hp);
    world.refuse(Refusal {
        name: "ap:sysfs",
        direction: Direction::Down,
        cpu: Some(CpuId(4)),
        instance: None,
    });
    let error = hp.offline_many(CpuSet::range(1, 5)).unwrap_err();
    assert!(matches!(error, Error::StepFailed { cpu: CpuId(4), .. }));
    assert_eq!(hp.online_cpus(), CpuSet::range(0, 5));
    assert_eq!(statuses(&hp), before);
    assert_consistent(&hp, &world);
}

#[test]
fn failed_deferred_teardown_is_reported_and_keeps_the_step() {
    let (hp, world) = machine(Engine::Bolt, 3, false);
    world.refuse(Refusal {
        name: "ap:kthread",
        direction: Direction::Down,
        cpu: Some(CpuId(1)),
        instance: None,
    });
    hp.offline(CpuId(1)).unwrap();
    hp.flush_deferred();
    let failures = hp.take_deferred_failures();
    assert_eq!(failures.len(), 1);
    assert!(matches!(
        failures[0],
        Error::StepFailed {
            name: "ap:kthread",
            ..
        }
    ));
    assert!(hp.take_deferred_failures().is_empty());
    assert_eq!(hp.warnings().deferred_failures, 1);
    let kthread = step(&hp, "ap:kthread");
    assert_eq!(hp.step_status(CpuId(1), kthread), Some(StepStatus::Up));
    assert_consistent(&hp, &world);
    // Back online: the step is still up, so its startup is not called again.
    world.take_calls();
    hp.online(CpuId(1)).unwrap();
    hp.flush_deferred();
    assert!(world.take_calls().iter().all(|c| c.name != "ap:kthread"));
    assert_consistent(&hp, &world);
}

#[test]
fn starting_failures_are_counted_not_rolled_back() {
    let (hp, world) = machine(Engine::Classic, 3, false);
    world.refuse(Refusal {
        name: "ap:sched-starting",
        direction: Direction::Down,
        cpu: None,
        instance: None,
    });
    hp.offline(CpuId(2)).unwrap();
    assert_eq!(hp.warnings().atomic_failures, 1);
    assert!(!hp.is_online(CpuId(2)));
    assert_eq!(
        hp.step_status(CpuId(2), step(&hp, "ap:sched-starting")),
        Some(StepStatus::Down)
    );
}

#[test]
fn reports_time_every_step_and_stage() {
    for engine in ENGINES {
        let (hp, _world) = machine(engine, 3, false);
        let report = hp.offline(CpuId(2)).unwrap();
        assert_eq!(report.engine, engine);
        assert_eq!(report.direction, Direction::Down);
        assert!(report.nanos > 0);
        for stage in [
            "grace-period",
            "stop-machine",
            "power",
            "bp:perf",
            "ap:sched-active",
        ] {
            assert!(report.stage(stage).is_some(), "{engine:?} {stage}");
        }
        let deferred_stage = report.stage("ap:sysfs");
        assert_eq!(deferred_stage.is_some(), engine == Engine::Classic);
        let perf = hp.step_time(step(&hp, "bp:perf")).unwrap();
        assert_eq!(perf.teardown_nanos, report.stage("bp:perf"));
        assert!(!perf.teardown_deferred);
        assert_eq!(perf.startup_nanos, None);
        let report = hp.online(CpuId(2)).unwrap();
        assert!(report.stage("grace-period").is_none());
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

#[test]
fn running_deferred_job_is_waited_for() {
    use std::sync::mpsc;
    use std::sync::Arc;
    // A deferrable teardown that blocks until the test releases it.
    let table = [
        StepSpec::new("bp:pages", Section::Prepare, Class::Deferrable),
        StepSpec::new("ap:active", Section::Online, Class::Critical),
    ];
    let all = CpuSet::range(0, 2);
    let hp = Arc::new(Hp::new(Mock::new(all, false), &table, all, all, Engine::Bolt).unwrap());
    let (entered_tx, entered_rx) = mpsc::channel::<()>();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let release_rx = std::sync::Mutex::new(release_rx);
    let entered_tx = std::sync::Mutex::new(entered_tx);
    let up = Arc::new(std::sync::Mutex::new(false));
    let (up_a, up_b) = (up.clone(), up.clone());
    hp.setup(
        StepId(0),
        Callbacks::new()
            .startup(move |ctx| {
                if !ctx.cpus.contains(CpuId(1)) {
                    return Ok(());
                }
                let mut up = up_a.lock().unwrap();
                assert!(!*up);
                *up = true;
                Ok(())
            })
            .teardown(move |_| {
                entered_tx.lock().unwrap().send(()).unwrap();
                release_rx.lock().unwrap().recv().unwrap();
                let mut up = up_b.lock().unwrap();
                assert!(*up);
                *up = false;
                Ok(())
            }),
    )
    .unwrap();
    hp.offline(CpuId(1)).unwrap();
    let worker = {
        let hp = hp.clone();
        std::thread::spawn(move || hp.run_deferred())
    };
    entered_rx.recv().unwrap();
    let online = {
        let hp = hp.clone();
        std::thread::spawn(move || hp.online(CpuId(1)).unwrap())
    };
    std::thread::sleep(std::time::Duration::from_millis(50));
    assert!(
        !online.is_finished(),
        "online must wait for the running teardown"
    );
    release_tx.send(()).unwrap();
    // The worker may also pick up the startup that the online deferred.
    assert!(worker.join().unwrap() >= 1);
    let report = online.join().unwrap();
    assert_eq!(report.cancelled, 0);
    assert_eq!(report.deferred, 1, "the startup is deferred again");
    hp.flush_deferred();
    assert!(*up.lock().unwrap());
}
