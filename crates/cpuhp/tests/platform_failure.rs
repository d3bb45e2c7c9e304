//! Failures of the platform itself — a CPU that does not start, a hotplug
//! thread that cannot be reached, a stop-machine that cannot gather, a
//! grace period that stalls, the hotplug lock's grace period stalling, a
//! CPU that does not report dead — made by the platform (the mock's own
//! failure) and injected by the engine: the operation fails naming the
//! operation and the CPU and rolls back as it does for a failed step, or,
//! for a CPU that did not report dead, completes and lists the failure.

mod common;

use common::*;
use hotkern_cpuhp::{
    CallbackError, CpuId, CpuSet, Direction, Engine, Error, PlatformError, PlatformFailAt,
    PlatformOperation, Report,
};

/// The platform operations an operation in `direction` under `engine`
/// meets on its way (rollback aside).
fn met(direction: Direction, engine: Engine) -> Vec<PlatformOperation> {
    use PlatformOperation::*;
    match direction {
        Direction::Up => vec![HotplugLock, PowerOn, RunOn],
        Direction::Down => vec![
            HotplugLock,
            RunOn,
            if engine.is_bolt() {
                ExpeditedGracePeriod
            } else {
                GracePeriod
            },
            if engine.stops_machine() {
                StopMachine
            } else {
                RunDying
            },
            PowerOff,
        ],
    }
}

fn operate(hp: &Hp, direction: Direction, targets: CpuSet) -> Result<Report, Error> {
    match direction {
        Direction::Up => hp.online_many(targets),
        Direction::Down => hp.offline_many(targets),
    }
}

/// Every operation of both directions fails once for the last target of a
/// single or bulk operation, under both engines, made by the platform and
/// injected by the engine.
#[test]
fn every_platform_failure_rolls_back_or_is_listed() {
    for engine in ENGINES {
        for bulk in [false, true] {
            for direction in [Direction::Up, Direction::Down] {
                for operation in met(direction, engine) {
                    for injected in [false, true] {
                        check(engine, bulk, direction, operation, injected);
                    }
                }
            }
        }
    }
}

fn check(
    engine: Engine,
    bulk: bool,
    direction: Direction,
    operation: PlatformOperation,
    injected: bool,
) {
    let what = format!("{engine:?} bulk={bulk} {direction:?} {operation} injected={injected}");
    let (hp, world) = machine(engine, 5, false);
    let targets = if bulk {
        CpuSet::range(2, 5)
    } else {
        CpuSet::single(CpuId(3))
    };
    if direction == Direction::Up {
        hp.offline_many(targets).unwrap();
    }
    hp.flush_deferred();
    let before = statuses(&hp);
    let online = hp.online_cpus();
    let cpu = targets.iter().last().unwrap();
    if injected {
        let point = PlatformFailAt {
            operation,
            cpu: Some(cpu),
        };
        hp.inject_platform_failure(point).unwrap();
    } else {
        *hp.platform().fails.lock().unwrap() = Some((operation, cpu));
    }
    world.take_calls();
    let result = operate(&hp, direction, targets);
    let cause = if injected {
        PlatformError::INJECTED
    } else {
        match operation {
            PlatformOperation::RunOn => "no hotplug thread",
            PlatformOperation::StopMachine => "did not come",
            PlatformOperation::RunDying => "did not run its steps",
            PlatformOperation::PowerOn => "did not start",
            PlatformOperation::PowerOff => "did not stop",
            _ => "stalled",
        }
    };
    let expected = PlatformError::new(operation, cpu, cause);
    if operation == PlatformOperation::PowerOff {
        // Past the dying steps: the operation completes and says so.
        let report = result.unwrap_or_else(|error| panic!("{what}: {error}"));
        assert_eq!(report.failures, [expected], "{what}");
        assert!(hp.online_cpus().intersection(&targets).is_empty(), "{what}");
        if !injected {
            // The mock's CPU really stayed on; say it stopped late.
            hp.platform().powered.lock().unwrap().remove(cpu);
        }
        hp.flush_deferred();
        assert_consistent(&hp, &world);
        hp.online_many(targets).unwrap();
        hp.flush_deferred();
        assert_consistent(&hp, &world);
        return;
    }
    assert_eq!(result, Err(Error::PlatformFailed(expected)), "{what}");
    assert_eq!(statuses(&hp), before, "{what}");
    assert_eq!(hp.online_cpus(), online, "{what}");
    assert_eq!(hp.armed_platform_failure(), None, "{what}: one-shot");
    assert!(hp.platform().fails.lock().unwrap().is_none(), "{what}");
    assert_eq!(hp.warnings().rollback_failures, 0, "{what}");
    assert_consistent(&hp, &world);
    if operation == PlatformOperation::PowerOn {
        // The targets that started ran their starting steps and were
        // taken down again; the one that did not start ran nothing.
        let calls = world.take_calls();
        assert!(
            !calls.iter().any(|call| call.cpus.contains(cpu)
                && call.name.starts_with("ap:")
                && call.direction == Direction::Up),
            "{what}: {cpu} ran a step: {calls:?}"
        );
        if bulk && injected {
            // The injected failure starts the others (a platform that runs
            // the starting steps as CPUs come up); the mock's default
            // bring-up starts none when one fails.
            let started = targets.difference(&CpuSet::single(cpu));
            for other in started {
                assert!(
                    calls.iter().any(|call| call.cpus.contains(other)
                        && call.name == "ap:sched-starting"
                        && call.direction == Direction::Down
                        && call.rollback),
                    "{what}: {other} came up and was not taken down: {calls:?}"
                );
            }
        }
    }
    // The same operation now succeeds.
    operate(&hp, direction, targets).unwrap_or_else(|error| panic!("{what}: {error}"));
    hp.flush_deferred();
    assert_consistent(&hp, &world);
}

/// A grace period that stalls going down comes before any dying step: the
/// stop-machine never happens and only the `Online` teardowns are undone.
#[test]
fn a_stalled_grace_period_stops_before_the_dying_steps() {
    let (hp, world) = machine(Engine::Classic, 4, false);
    *hp.platform().fails.lock().unwrap() = Some((PlatformOperation::GracePeriod, CpuId(2)));
    hp.platform().take_events();
    let error = hp.offline(CpuId(2)).unwrap_err();
    assert_eq!(
        error.to_string(),
        "the platform's grace-period failed for cpu2: stalled"
    );
    let events = hp.platform().take_events();
    assert!(!events
        .iter()
        .any(|event| matches!(event, Event::StopMachine(_))));
    let calls = world.take_calls();
    assert!(calls
        .iter()
        .all(|call| !call.name.ends_with("starting") && !call.name.starts_with("bp:")));
    assert!(calls.iter().any(|call| call.rollback));
    assert!(hp.is_online(CpuId(2)));
    assert_consistent(&hp, &world);
}

/// A hotplug lock that could not be taken is not given back, and nothing
/// ran.
#[test]
fn a_lock_not_taken_is_not_given_back() {
    let (hp, world) = machine(Engine::Bolt, 3, false);
    *hp.platform().fails.lock().unwrap() = Some((PlatformOperation::HotplugLock, CpuId(1)));
    hp.platform().take_events();
    let error = hp.offline(CpuId(1)).unwrap_err();
    assert!(matches!(
        error,
        Error::PlatformFailed(PlatformError {
            operation: PlatformOperation::HotplugLock,
            cpu: CpuId(1),
            ..
        })
    ));
    assert_eq!(hp.platform().take_events(), []);
    assert!(world.take_calls().is_empty());
}

/// Every callback call is traced twice, entering and returning, in that
/// order and with the same step, direction and CPUs; the returns are
/// exactly the calls the subscribers saw. An injected step failure is a
/// traced call that returned the injected error.
#[test]
fn every_step_call_is_traced_entering_and_returning() {
    for engine in ENGINES {
        let (hp, world) = machine(engine, 4, false);
        hp.platform().traced.lock().unwrap().clear();
        hp.offline_many(CpuSet::range(1, 4)).unwrap();
        hp.flush_deferred();
        hp.online(CpuId(2)).unwrap();
        let failing = step(&hp, "ap:sched-active");
        hp.inject_failure(hotkern_cpuhp::FailAt {
            step: failing,
            direction: Direction::Up,
            cpu: None,
        })
        .unwrap();
        hp.online(CpuId(3)).unwrap_err();
        hp.flush_deferred();
        let traced = std::mem::take(&mut *hp.platform().traced.lock().unwrap());
        let calls = world.take_calls();
        assert_eq!(traced.len() % 2, 0);
        let mut returns = Vec::new();
        for pair in traced.chunks(2) {
            let (entered, returned) = (&pair[0], &pair[1]);
            assert_eq!(entered.returned, None, "{engine:?}: {pair:?}");
            assert_eq!(
                (entered.name, entered.direction, entered.cpus),
                (returned.name, returned.direction, returned.cpus),
                "{engine:?}"
            );
            returns.push(returned.clone());
        }
        let injected: Vec<_> = returns
            .iter()
            .filter(|traced| traced.returned == Some(Err(CallbackError::INJECTED)))
            .collect();
        assert_eq!(injected.len(), 1, "{engine:?}");
        assert_eq!(injected[0].name, "ap:sched-active");
        let ran: Vec<_> = returns
            .iter()
            .filter(|traced| traced.returned != Some(Err(CallbackError::INJECTED)))
            .map(|traced| (traced.name, traced.direction, traced.cpus, traced.rollback))
            .collect();
        let seen: Vec<_> = calls
            .iter()
            .map(|call| (call.name, call.direction, call.cpus, call.rollback))
            .collect();
        assert_eq!(ran, seen, "{engine:?}");
    }
}

/// A bolt machine with CPUs 1-3 offline whose next bring-up fails at its
/// last `Online` step, so that it is rolled back whole.
fn bring_up_failing_at_the_end() -> (Hp, std::sync::Arc<World>) {
    let (hp, world) = machine(Engine::Bolt, 4, false);
    hp.offline_many(CpuSet::range(1, 4)).unwrap();
    hp.flush_deferred();
    hp.inject_failure(hotkern_cpuhp::FailAt {
        step: step(&hp, "ap:sched-active"),
        direction: Direction::Up,
        cpu: None,
    })
    .unwrap();
    (hp, world)
}

/// A platform failure while rolling back is counted, not returned over
/// the first failure.
#[test]
fn a_failure_while_rolling_back_is_counted() {
    // The bring-up's last Online step fails; rolling back, the grace
    // period before the starting steps are taken down stalls.
    let (hp, world) = bring_up_failing_at_the_end();
    let stall = (PlatformOperation::ExpeditedGracePeriod, CpuId(2));
    *hp.platform().fails.lock().unwrap() = Some(stall);
    let error = hp.online_many(CpuSet::range(1, 4)).unwrap_err();
    assert!(matches!(error, Error::StepFailed { .. }), "{error}");
    assert!(hp.platform().fails.lock().unwrap().is_none());
    assert_eq!(hp.warnings().rollback_failures, 1);
    assert_eq!(hp.online_cpus(), CpuSet::single(CpuId(0)));
    // The rollback went on past the stall: every CPU is down again.
    assert_consistent(&hp, &world);
}

/// Rolling a bring-up back, a stop-machine that cannot gather and a CPU
/// that does not stop are each counted as a rollback failure, and the
/// rollback goes on.
#[test]
fn a_stop_machine_or_power_off_that_fails_while_rolling_back_is_counted() {
    for (operation, after) in [
        // The bring-up's own stop-machine passes; the rollback's fails.
        (PlatformOperation::StopMachine, 1),
        (PlatformOperation::PowerOff, 0),
    ] {
        let (hp, _world) = bring_up_failing_at_the_end();
        hp.platform()
            .fails_after
            .store(after, std::sync::atomic::Ordering::SeqCst);
        *hp.platform().fails.lock().unwrap() = Some((operation, CpuId(2)));
        let error = hp.online_many(CpuSet::range(1, 4)).unwrap_err();
        assert!(
            matches!(error, Error::StepFailed { .. }),
            "{operation}: {error}"
        );
        assert!(hp.platform().fails.lock().unwrap().is_none(), "{operation}");
        assert_eq!(hp.warnings().rollback_failures, 1, "{operation}");
        assert_eq!(hp.online_cpus(), CpuSet::single(CpuId(0)), "{operation}");
    }
}
