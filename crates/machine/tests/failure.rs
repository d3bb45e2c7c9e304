//! Linux's `hotplug/fail`, through the machine: a failure at every step
//! that may fail, in both directions, with both engines, single and bulk.
//! Rollback must leave the CPU and every subsystem exactly where it started,
//! undoing what the operation did in exactly the reverse order.

mod common;

use hotkern_machine::{
    Class, CpuId, CpuSet, Direction, Engine, Hz, Machine, MachineError, Section, StepCall,
    StepInfo, TaskStatus,
};

fn with_load(machine: &Machine) {
    for _ in 0..40 {
        let mut left = 3;
        machine.submit(move |ctx| {
            ctx.queue_work(|_| {});
            left -= 1;
            if left == 0 {
                TaskStatus::Done
            } else {
                TaskStatus::Again
            }
        });
    }
}

/// One operation made to fail: at `step` in `direction`, for `cpu`, while
/// taking `cpus` (just `cpu` unless `bulk`) offline or online.
#[derive(Debug, Clone, Copy)]
struct Failing {
    step: StepInfo,
    direction: Direction,
    cpu: CpuId,
    cpus: CpuSet,
    bulk: bool,
}

/// Runs `op` and checks that it failed where it was told to, changed
/// nothing, and rolled back in order.
fn fail_and_check(machine: &Machine, engine: Engine, op: Failing) {
    let before = machine.state();
    machine
        .inject_failure(op.step.name, op.direction, Some(op.cpu))
        .unwrap();
    // Whatever earlier operations and their deferred work called is not
    // this operation's: `state()` waited for the deferred work.
    machine.take_step_calls();
    let result = match (op.direction, op.bulk) {
        (Direction::Down, false) => machine.offline(op.cpu),
        (Direction::Up, false) => machine.online(op.cpu),
        (Direction::Down, true) => machine.offline_many(op.cpus),
        (Direction::Up, true) => machine.online_many(op.cpus),
    };
    let calls = machine.take_step_calls();
    match result {
        Err(MachineError::Hotplug(hotkern_machine::HotplugError::StepFailed {
            name: failed,
            ..
        })) => assert_eq!(failed, op.step.name),
        other => panic!("{op:?}: expected a failure, got {other:?}"),
    }
    let violations = machine.check_invariants();
    assert!(violations.is_empty(), "after {op:?}: {violations:?}");
    assert_eq!(machine.state(), before, "{op:?}");
    check_rollback_order(engine, &op, &calls);
}

/// The machine's steps in the order `direction` runs them.
fn in_order(direction: Direction) -> Vec<StepInfo> {
    let mut steps = Machine::steps();
    if direction == Direction::Down {
        steps.reverse();
    }
    steps
}

/// The steps whose callbacks the failing operation ran for `cpu` before
/// it failed, in order, from the engines' documented behaviour: classic
/// runs every step, one CPU at a time in increasing order; Bolt leaves
/// deferrable steps to its worker (which never sees a failed operation's
/// work) and runs the online section on every target at once, so only the
/// target that failed stops there. Every target stops at a failing
/// prepare step, which Bolt calls once for the whole set.
fn expected_forward(engine: Engine, op: &Failing, cpu: CpuId) -> Vec<&'static str> {
    let steps = in_order(op.direction);
    let failing = steps.iter().position(|s| s.name == op.step.name).unwrap();
    let upto = match engine {
        _ if cpu == op.cpu => failing,
        Engine::Classic if cpu < op.cpu => steps.len(),
        Engine::Classic => 0,
        Engine::Bolt | Engine::BoltNoStop if op.step.section == Section::Online => {
            steps
                .iter()
                .rposition(|s| s.section == Section::Online)
                .unwrap()
                + 1
        }
        Engine::Bolt | Engine::BoltNoStop => failing,
    };
    steps[..upto]
        .iter()
        .filter(|s| engine == Engine::Classic || s.class == Class::Critical)
        .map(|s| s.name)
        .collect()
}

/// The calls of the failing operation: for each of its CPUs, what it ran
/// going forward, then the same steps the other way in exactly the reverse
/// order, marked as rollback; nothing for any other CPU, nothing deferred.
fn check_rollback_order(engine: Engine, op: &Failing, calls: &[StepCall]) {
    for call in calls {
        assert!(
            !call.cpus.is_empty() && call.cpus.is_subset(&op.cpus) && !call.deferred,
            "{op:?}: unexpected call {call:?}"
        );
    }
    // The whole operation ran before any of its rollback.
    let undo = calls.iter().position(|c| c.rollback).unwrap_or(calls.len());
    assert!(
        calls[undo..].iter().all(|c| c.rollback),
        "{op:?}: forward calls after the rollback began: {calls:#?}"
    );
    for cpu in op.cpus {
        let forward = expected_forward(engine, op, cpu);
        let expected: Vec<(&str, Direction, bool)> = forward
            .iter()
            .map(|&name| (name, op.direction, false))
            .chain(
                forward
                    .iter()
                    .rev()
                    .map(|&name| (name, op.direction.reverse(), true)),
            )
            .collect();
        let made: Vec<(&str, Direction, bool)> = calls
            .iter()
            .filter(|c| c.cpus.contains(cpu))
            .map(|c| (c.name, c.direction, c.rollback))
            .collect();
        assert_eq!(made, expected, "{engine:?} {op:?}: calls for {cpu:?}");
    }
    let prepare = |name: &str| {
        Machine::steps()
            .iter()
            .any(|s| s.name == name && s.section == Section::Prepare)
    };
    match engine {
        // One CPU at a time, undone in the reverse of the order they went.
        Engine::Classic => {
            let mut runs: Vec<CpuSet> = calls.iter().map(|c| c.cpus).collect();
            runs.dedup();
            let before: Vec<CpuSet> = op
                .cpus
                .iter()
                .filter(|&c| c < op.cpu)
                .map(CpuSet::single)
                .collect();
            // A target that fails at its first step calls nothing.
            let failed = Some(CpuSet::single(op.cpu))
                .filter(|_| !expected_forward(engine, op, op.cpu).is_empty());
            let mut expected: Vec<CpuSet> = before
                .iter()
                .copied()
                .chain(failed)
                .chain(before.iter().rev().copied())
                .collect();
            expected.dedup();
            assert_eq!(runs, expected, "{op:?}: order of the CPUs");
        }
        // Prepare steps: one call for the whole set, forward and back.
        Engine::Bolt | Engine::BoltNoStop => {
            for call in calls.iter().filter(|c| prepare(c.name)) {
                assert_eq!(call.cpus, op.cpus, "{op:?}: {call:?}");
            }
        }
    }
}

fn every_step(engine: Engine) {
    // Each of Linux's tick rates times the grace periods differently.
    for hz in [100, 250, 1000] {
        every_step_at(engine, Hz::new(hz).unwrap());
    }
}

fn every_step_at(engine: Engine, hz: Hz) {
    let machine = Machine::builder()
        .cpus(4)
        .engine(engine)
        .hz(hz)
        .record_step_calls()
        .build()
        .unwrap();
    let mut tried = 0;
    for step in Machine::steps() {
        if step.section == Section::Starting {
            // Starting/dying steps may not fail; the engine refuses to inject.
            assert!(machine
                .inject_failure(step.name, Direction::Down, None)
                .is_err());
            continue;
        }
        let failing = |direction, cpu, cpus, bulk| Failing {
            step,
            direction,
            cpu,
            cpus,
            bulk,
        };
        with_load(&machine);
        // Going down: cpu 2 stays online.
        let two = CpuSet::single(CpuId(2));
        fail_and_check(
            &machine,
            engine,
            failing(Direction::Down, CpuId(2), two, false),
        );
        // Bulk going down, failing on the last of three CPUs, so that
        // classic has two to bring back (in reverse): cpus 1 to 3 stay online.
        let one_to_three = CpuSet::range(1, 4);
        fail_and_check(
            &machine,
            engine,
            failing(Direction::Down, CpuId(3), one_to_three, true),
        );
        // Going up: cpu 2 stays offline.
        machine.offline(CpuId(2)).unwrap();
        fail_and_check(
            &machine,
            engine,
            failing(Direction::Up, CpuId(2), two, false),
        );
        // Bulk going up, failing on the last of three: cpus 1 to 3 stay offline.
        machine
            .offline_many(CpuSet::single(CpuId(1)).with(CpuId(3)))
            .unwrap();
        fail_and_check(
            &machine,
            engine,
            failing(Direction::Up, CpuId(3), one_to_three, true),
        );
        machine.online_many(one_to_three).unwrap();
        tried += 1;
    }
    assert!(tried >= 12);
    common::drain(&machine);
    let report = machine.shutdown();
    assert!(report.is_clean(), "{report:?}");
}

#[test]
fn classic_rolls_back_at_every_step() {
    every_step(Engine::Classic);
}

#[test]
fn bolt_rolls_back_at_every_step() {
    every_step(Engine::Bolt);
}

#[test]
fn bolt_nostop_rolls_back_at_every_step() {
    every_step(Engine::BoltNoStop);
}
