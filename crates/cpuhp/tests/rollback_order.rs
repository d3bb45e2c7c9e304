//! Rollback order: a failure at any step, for both engines, single and
//! bulk, must undo exactly the callbacks the operation had made, in exact
//! reverse: across sections (going up, `Online` is undone before
//! `Starting`, and that before `Prepare`) and, for `classic`, which runs a
//! bulk operation one CPU at a time, across CPUs (the last CPU done is the
//! first brought back). The other rollback tests only count calls, so an
//! engine that undid the right calls in the wrong order would pass them.

mod common;

use std::sync::Arc;

use common::*;
use hotkern_cpuhp::{
    Class, CpuId, CpuSet, Direction, Engine, Error, FailAt, InstanceId, Section, StepId,
};

/// One step's callback for a set of CPUs, as the rollback check compares
/// it: a multi-instance step is called once per instance, and like Linux's
/// `cpuhp_invoke_callback` the engine walks the instances in registration
/// order whichever the direction, so a step's instances form one unit that
/// the rollback must repeat in the same order.
type Unit = (&'static str, CpuSet, Vec<Option<InstanceId>>);

/// Groups consecutive calls of one step for one set of CPUs (and one side:
/// done or undone) into units.
fn units(calls: &[&Call]) -> Vec<(bool, Unit)> {
    let mut out: Vec<(bool, Unit)> = Vec::new();
    for call in calls {
        match out.last_mut() {
            Some((rollback, (name, cpus, instances)))
                if *rollback == call.rollback && *name == call.name && *cpus == call.cpus =>
            {
                instances.push(call.instance)
            }
            _ => out.push((call.rollback, (call.name, call.cpus, vec![call.instance]))),
        }
    }
    out
}

fn section(name: &str) -> Section {
    TABLE.iter().find(|spec| spec.name == name).unwrap().section
}

/// Where `section` comes in an operation in `direction`: 0 first, 2 last.
fn rank(section: Section, direction: Direction) -> usize {
    let up = match section {
        Section::Prepare => 0,
        Section::Starting => 1,
        Section::Online => 2,
    };
    match direction {
        Direction::Up => up,
        Direction::Down => 2 - up,
    }
}

/// What one failed operation did and what its rollback did.
struct Split {
    done: Vec<Unit>,
    undone: Vec<Unit>,
}

impl Split {
    fn sections(&self) -> usize {
        let mut seen: Vec<Section> = self.undone.iter().map(|k| section(k.0)).collect();
        seen.dedup();
        seen.len()
    }

    fn cpus(&self) -> CpuSet {
        self.undone
            .iter()
            .fold(CpuSet::EMPTY, |all, k| all.union(&k.1))
    }
}

/// Splits the calls of an operation in `direction` that failed (the call
/// `refused` made refused and did nothing) into what it did and what its
/// rollback undid, and checks that the rollback is the exact reverse.
///
/// `classic` runs everything one call at a time, so its whole sequence must
/// reverse. `bolt` runs a section's targets in parallel, where the order
/// between CPUs means nothing: there each CPU's own calls must reverse, the
/// aggregated `Prepare` calls (made once for all targets, on the controller)
/// must reverse as whole calls, and sections are undone in reverse order.
fn assert_reversed(
    what: &str,
    engine: Engine,
    direction: Direction,
    calls: &[Call],
    refused: Option<Refusal>,
) -> Split {
    // Deferred calls are pending work the operation completed first; they
    // are not part of what it did.
    let mut calls: Vec<&Call> = calls.iter().filter(|c| !c.deferred).collect();
    if let Some(refusal) = refused {
        // The mock refuses the first call that matches, after recording it.
        let at = calls
            .iter()
            .position(|c| {
                !c.rollback
                    && c.name == refusal.name
                    && c.direction == refusal.direction
                    && refusal.cpu.is_none_or(|cpu| c.cpus.contains(cpu))
                    && (refusal.instance.is_none() || c.instance == refusal.instance)
            })
            .unwrap_or_else(|| panic!("{what}: the refused call was never made"));
        calls.remove(at);
    }
    for call in &calls {
        let want = if call.rollback {
            direction.reverse()
        } else {
            direction
        };
        assert_eq!(call.direction, want, "{what}: {call:?}");
    }
    let (undone, done): (Vec<_>, Vec<_>) = units(&calls).into_iter().partition(|u| u.0);
    let split = Split {
        done: done.into_iter().map(|u| u.1).collect(),
        undone: undone.into_iter().map(|u| u.1).collect(),
    };
    let mut expected = split.done.clone();
    expected.reverse();
    match engine {
        Engine::Classic => {
            assert_eq!(
                split.undone, expected,
                "{what}: rollback is not the reverse"
            );
        }
        Engine::Bolt | Engine::BoltNoStop => {
            let all = split.done.iter().fold(CpuSet::EMPTY, |a, k| a.union(&k.1));
            for cpu in all {
                let on = |units: &[Unit]| -> Vec<(&'static str, Vec<Option<InstanceId>>)> {
                    units
                        .iter()
                        .filter(|u| u.1.contains(cpu))
                        .map(|u| (u.0, u.2.clone()))
                        .collect()
                };
                assert_eq!(
                    on(&split.undone),
                    on(&expected),
                    "{what}: rollback on {cpu} is not the reverse"
                );
            }
            let prepare = |units: &[Unit]| -> Vec<Unit> {
                units
                    .iter()
                    .filter(|u| section(u.0) == Section::Prepare)
                    .cloned()
                    .collect()
            };
            assert_eq!(
                prepare(&split.undone),
                prepare(&expected),
                "{what}: aggregated prepare calls are not undone in reverse"
            );
            let ranks: Vec<usize> = split
                .undone
                .iter()
                .map(|k| rank(section(k.0), direction))
                .collect();
            assert!(
                ranks.windows(2).all(|w| w[0] >= w[1]),
                "{what}: sections undone out of order: {:?}",
                split.undone
            );
        }
    }
    split
}

/// The targets of an operation and the machine in the state it starts from.
fn prepared(
    engine: Engine,
    bulk: bool,
    pending: bool,
    direction: Direction,
) -> (Hp, CpuSet, Arc<World>) {
    let (hp, world) = machine(engine, 5, false);
    let targets = if bulk {
        CpuSet::range(2, 5)
    } else {
        CpuSet::single(CpuId(3))
    };
    hp.offline_many(targets).unwrap();
    if direction == Direction::Down {
        hp.flush_deferred();
        hp.online_many(targets).unwrap();
    }
    if !pending {
        hp.flush_deferred();
    }
    world.take_calls();
    (hp, targets, world)
}

fn operate(hp: &Hp, targets: CpuSet, direction: Direction) -> Result<(), Error> {
    match direction {
        Direction::Up => hp.online_many(targets).map(drop),
        Direction::Down => hp.offline_many(targets).map(drop),
    }
}

/// Counts what the cases exercised, so that a table or engine change that
/// left every rollback empty or single-section fails instead of passing.
#[derive(Default)]
struct Reach {
    cases: usize,
    several_sections: usize,
    several_cpus: usize,
}

impl Reach {
    /// Failing late in a direction undoes two or three sections, and a
    /// failure on a later target of a bulk operation undoes earlier ones:
    /// both must be common (at least 40 % of the cases), not corner cases.
    fn assert_common(&self) {
        eprintln!(
            "{} failed operations, {} undone across sections, {} across CPUs",
            self.cases, self.several_sections, self.several_cpus
        );
        assert!(
            self.several_sections * 5 >= self.cases * 2,
            "too few cross-section rollbacks"
        );
        assert!(
            self.several_cpus * 5 >= self.cases * 2,
            "too few cross-CPU rollbacks"
        );
    }

    fn add(&mut self, split: &Split) {
        self.cases += 1;
        self.several_sections += usize::from(split.sections() > 1);
        self.several_cpus += usize::from(split.cpus().len() > 1);
    }
}

/// Injected failures at every fallible step, both directions, both engines,
/// single and bulk (failing on each target in turn), with deferred work
/// flushed or pending under `bolt`.
#[test]
fn injected_failure_is_undone_in_exact_reverse() {
    let mut reach = Reach::default();
    for engine in ENGINES {
        for bulk in [false, true] {
            let pendings: &[bool] = match engine {
                Engine::Bolt | Engine::BoltNoStop => &[false, true],
                Engine::Classic => &[false],
            };
            for &pending in pendings {
                for (index, spec) in TABLE.iter().enumerate() {
                    if spec.section == Section::Starting {
                        continue;
                    }
                    for direction in [Direction::Up, Direction::Down] {
                        let failing: Vec<CpuId> = if bulk {
                            CpuSet::range(2, 5).iter().collect()
                        } else {
                            vec![CpuId(3)]
                        };
                        for cpu in failing {
                            let what = format!(
                                "{engine:?} bulk={bulk} pending={pending} {} {direction:?} on {cpu}",
                                spec.name
                            );
                            let (hp, targets, world) = prepared(engine, bulk, pending, direction);
                            hp.inject_failure(FailAt {
                                step: StepId(index as u16),
                                direction,
                                cpu: Some(cpu),
                            })
                            .unwrap();
                            let result = operate(&hp, targets, direction);
                            if result.is_ok() {
                                // A pending teardown cancelled by the online
                                // leaves the step up: the failure is never reached.
                                assert!(
                                    pending
                                        && direction == Direction::Up
                                        && spec.class == Class::Deferrable,
                                    "{what}: the injected failure did not fire"
                                );
                                continue;
                            }
                            assert!(
                                matches!(result, Err(Error::StepFailed { step, .. }) if step.index() == index),
                                "{what}: {result:?}"
                            );
                            let calls = world.take_calls();
                            reach.add(&assert_reversed(&what, engine, direction, &calls, None));
                            assert_consistent(&hp, &world);
                        }
                    }
                }
            }
        }
    }
    reach.assert_common();
}

/// Real callback refusals on every step that runs in the operation: the
/// refused call did nothing, everything before it is undone in reverse.
/// Refusing the second instance of a multi-instance step leaves the first
/// instance up, so it too must be undone, before anything earlier.
#[test]
fn refused_callback_is_undone_in_exact_reverse() {
    let mut reach = Reach::default();
    let mut partial_steps = 0;
    for engine in ENGINES {
        for bulk in [false, true] {
            for spec in TABLE {
                // Starting steps cannot fail; a deferrable step under bolt
                // runs on the worker, outside the operation.
                if spec.section == Section::Starting
                    || (engine.is_bolt() && spec.class == Class::Deferrable)
                {
                    continue;
                }
                let instances: &[Option<InstanceId>] = if spec.multi {
                    &[None, Some(B)]
                } else {
                    &[None]
                };
                for &instance in instances {
                    for direction in [Direction::Up, Direction::Down] {
                        let cpu = if bulk { CpuId(4) } else { CpuId(3) };
                        let what = format!(
                            "{engine:?} bulk={bulk} {} {instance:?} {direction:?}",
                            spec.name
                        );
                        let (hp, targets, world) = prepared(engine, bulk, false, direction);
                        let refusal = Refusal {
                            name: spec.name,
                            direction,
                            cpu: Some(cpu),
                            instance,
                        };
                        world.refuse(refusal);
                        let result = operate(&hp, targets, direction);
                        assert!(
                            matches!(result, Err(Error::StepFailed { name, .. }) if name == spec.name),
                            "{what}: {result:?}"
                        );
                        let calls = world.take_calls();
                        let split =
                            assert_reversed(&what, engine, direction, &calls, Some(refusal));
                        if instance.is_some() {
                            // The first instance's undo comes first.
                            assert_eq!(
                                split.undone.first().map(|u| (u.0, u.2.clone())),
                                Some((spec.name, vec![Some(A)])),
                                "{what}"
                            );
                            partial_steps += 1;
                        }
                        reach.add(&split);
                        assert_consistent(&hp, &world);
                    }
                }
            }
        }
    }
    eprintln!("{partial_steps} refusals in the middle of a multi-instance step");
    assert!(partial_steps >= 8, "only {partial_steps} mid-step refusals");
    reach.assert_common();
}

/// `classic` takes a set offline one CPU at a time; a failure on the third
/// brings back the second and then the first, each in table order, after
/// the third's own steps are restored: spelled out by hand.
#[test]
fn classic_bulk_failure_brings_cpus_back_last_first() {
    let (hp, targets, world) = prepared(Engine::Classic, true, false, Direction::Down);
    hp.inject_failure(FailAt {
        step: step(&hp, "ap:kthread"),
        direction: Direction::Down,
        cpu: Some(CpuId(4)),
    })
    .unwrap();
    assert!(operate(&hp, targets, Direction::Down).is_err());
    let undone: Vec<(&'static str, CpuId)> = world
        .take_calls()
        .iter()
        .filter(|c| c.rollback)
        .map(|c| (c.name, c.cpus.first().unwrap()))
        .collect();
    // CPU 4 had torn down only ap:sched-active (ap:kthread failed).
    let mut expected = vec![("ap:sched-active", CpuId(4))];
    for cpu in [CpuId(3), CpuId(2)] {
        for spec in TABLE {
            let instances = if spec.multi { 2 } else { 1 };
            expected.extend(std::iter::repeat_n((spec.name, cpu), instances));
        }
    }
    assert_eq!(undone, expected);
    assert_consistent(&hp, &world);
}
