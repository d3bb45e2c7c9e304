//! Linux's `hotplug/fail`, through the machine: a failure at every step
//! that may fail, in both directions, with both engines, single and bulk.
//! Rollback must leave the CPU and every subsystem exactly where it started.

use std::time::Duration;

use hotkern_machine::{
    CpuId, CpuSet, Direction, Engine, Machine, MachineError, Section, TaskStatus,
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

fn fails_at(machine: &Machine, name: &str, result: Result<hotkern_machine::Report, MachineError>) {
    match result {
        Err(MachineError::Hotplug(hotkern_machine::HotplugError::StepFailed {
            name: failed,
            ..
        })) => {
            assert_eq!(failed, name)
        }
        other => panic!("step {name}: expected a failure, got {other:?}"),
    }
    let violations = machine.check_invariants();
    assert!(
        violations.is_empty(),
        "after failing {name}: {violations:?}"
    );
}

fn every_step(engine: Engine) {
    let machine = Machine::builder().cpus(4).engine(engine).build().unwrap();
    let mut tried = 0;
    for step in Machine::steps() {
        if step.section == Section::Starting {
            // Starting/dying steps may not fail; the engine refuses to inject.
            assert!(machine
                .inject_failure(step.name, Direction::Down, None)
                .is_err());
            continue;
        }
        // Going down: cpu 2 stays online.
        with_load(&machine);
        let before = machine.state();
        machine
            .inject_failure(step.name, Direction::Down, Some(CpuId(2)))
            .unwrap();
        fails_at(&machine, step.name, machine.offline(CpuId(2)));
        assert_eq!(machine.state(), before, "offline failing at {}", step.name);

        // Bulk going down: cpus 1 and 2 both stay online.
        machine
            .inject_failure(step.name, Direction::Down, Some(CpuId(2)))
            .unwrap();
        fails_at(
            &machine,
            step.name,
            machine.offline_many(CpuSet::range(1, 3)),
        );
        assert_eq!(
            machine.state(),
            before,
            "bulk offline failing at {}",
            step.name
        );

        // Going up: cpu 2 stays offline.
        machine.offline(CpuId(2)).unwrap();
        let before = machine.state();
        machine
            .inject_failure(step.name, Direction::Up, Some(CpuId(2)))
            .unwrap();
        fails_at(&machine, step.name, machine.online(CpuId(2)));
        assert_eq!(machine.state(), before, "online failing at {}", step.name);

        // Bulk going up: cpus 2 and 3 both stay offline.
        machine.offline(CpuId(3)).unwrap();
        let before = machine.state();
        machine
            .inject_failure(step.name, Direction::Up, Some(CpuId(3)))
            .unwrap();
        fails_at(
            &machine,
            step.name,
            machine.online_many(CpuSet::range(2, 4)),
        );
        assert_eq!(
            machine.state(),
            before,
            "bulk online failing at {}",
            step.name
        );
        machine.online_many(CpuSet::range(2, 4)).unwrap();
        tried += 1;
    }
    assert!(tried >= 12);
    assert!(machine.wait_idle(Duration::from_secs(30)));
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
