//! Failures: injected at every step in both directions for both engines,
//! real callback refusals, and failures where nothing can be rolled back.

mod common;

use common::*;
use hotkern_cpuhp::{
    CallbackError, Class, CpuId, CpuSet, Direction, Engine, Error, FailAt, Section, StepId,
    StepStatus, Warnings,
};

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
                        let settles = pending && engine.is_bolt();
                        if settles && direction == Direction::Up && spec.class == Class::Deferrable
                        {
                            // Its teardown was pending: cancelling it leaves
                            // the step up, so the online never reaches it.
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
                        if settles && direction == Direction::Down {
                            // The targets' pending startups were completed
                            // before the failed offline: only that changed.
                            let mut expected = before.clone();
                            for row in &mut expected {
                                for status in row.iter_mut() {
                                    if *status == StepStatus::PendingStartup {
                                        *status = StepStatus::Up;
                                    }
                                }
                            }
                            assert_eq!(statuses(&hp), expected, "{what}");
                            assert_eq!(hp.pending_deferred(), 0, "{what}");
                        } else {
                            assert_eq!(statuses(&hp), before, "{what}");
                            assert_eq!(hp.pending_deferred(), pending_before, "{what}");
                        }
                        assert_eq!(hp.online_cpus(), online, "{what}");
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
                || (engine.is_bolt() && spec.class == Class::Deferrable)
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

/// `classic` brings the CPUs a failed bulk offline had taken down back one
/// by one; when one of them refuses to come back, its own failed online is
/// undone (it stays offline), the others still come back, and the refusal
/// is counted as a failed rollback.
#[test]
fn classic_bulk_undo_that_fails_is_counted_and_leaves_that_cpu_offline() {
    let (hp, world) = machine(Engine::Classic, 5, false);
    hp.inject_failure(FailAt {
        step: step(&hp, "ap:sysfs"),
        direction: Direction::Down,
        cpu: Some(CpuId(4)),
    })
    .unwrap();
    world.refuse(refusal("ap:sysfs", Direction::Up, 3));
    let error = hp.offline_many(CpuSet::range(2, 5)).unwrap_err();
    assert!(matches!(error, Error::StepFailed { cpu: CpuId(4), .. }));
    assert_eq!(hp.warnings().rollback_failures, 1);
    assert_eq!(hp.online_cpus(), CpuSet::range(0, 5).without(CpuId(3)));
    assert_consistent(&hp, &world);
}

/// CPU 2, taken offline, fails to come back at `failing` (injected) after
/// the callbacks named in `refused` refused once on it.
fn failed_online_of_cpu2(
    refused: &[(&'static str, Direction)],
    failing: &str,
) -> (Hp, std::sync::Arc<World>) {
    let (hp, world) = machine(Engine::Classic, 3, false);
    hp.offline(CpuId(2)).unwrap();
    for (name, direction) in refused {
        world.refuse(refusal(name, *direction, 2));
    }
    hp.inject_failure(FailAt {
        step: step(&hp, failing),
        direction: Direction::Up,
        cpu: Some(CpuId(2)),
    })
    .unwrap();
    let error = hp.online(CpuId(2)).unwrap_err();
    assert!(matches!(error, Error::StepFailed { name, .. } if name == failing));
    assert!(!hp.is_online(CpuId(2)));
    (hp, world)
}

/// Warnings raised inside an operation that then fails are kept: a
/// `Starting` startup that refused (Linux carries on) and a teardown refused
/// while rolling back (the rollback carries on with the steps before it).
/// A later successful operation does not reset them.
#[test]
fn warnings_of_a_failed_operation_are_counted_and_kept() {
    let (hp, world) = failed_online_of_cpu2(
        &[
            ("ap:sched-starting", Direction::Up),
            ("bp:pages", Direction::Down),
        ],
        "ap:sysfs",
    );
    let counted = Warnings {
        atomic_failures: 1,
        rollback_failures: 1,
        deferred_failures: 0,
    };
    assert_eq!(hp.warnings(), counted);
    assert!(world.is_up("bp:pages", CpuId(2), None), "teardown refused");
    assert!(
        !world.is_up("bp:perf", CpuId(2), None),
        "the rollback stopped at the refused teardown"
    );
    hp.online(CpuId(2)).unwrap();
    assert_eq!(hp.warnings(), counted);
}

/// A teardown refused while an `Online` section is rolled back is counted,
/// and the rollback goes on with the steps before it.
#[test]
fn online_teardown_refused_in_rollback_is_counted_and_passed_over() {
    let (hp, world) = failed_online_of_cpu2(&[("ap:sysfs", Direction::Down)], "ap:sched-active");
    assert_eq!(hp.warnings().rollback_failures, 1);
    assert_eq!(hp.warnings().atomic_failures, 0);
    assert!(world.is_up("ap:sysfs", CpuId(2), None), "refused");
    for name in ["ap:kthread", "ap:workqueue", "bp:perf"] {
        assert!(!world.is_up(name, CpuId(2), None), "{name} still up");
    }
}
