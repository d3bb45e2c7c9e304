//! Property test: random sequences of online/offline/bulk operations,
//! flushes, engine switches and failures (injected, or real callback
//! refusals) against a simple model of which CPUs are online and which
//! steps are logically up on each.

mod common;

use common::*;
use hotkern_cpuhp::{
    Class, CpuId, CpuSet, Direction, Engine, Error, FailAt, Section, StepId, StepStatus,
};
use proptest::prelude::*;

const CPUS: u32 = 5;

#[derive(Clone, Debug)]
enum Op {
    Online(u32),
    Offline(u32),
    OnlineMany(u8),
    OfflineMany(u8),
    Flush,
    SetEngine(bool),
    /// Step index, direction is up, CPU filter.
    Inject(usize, bool, Option<u32>),
    Refuse(usize, bool, Option<u32>),
}

fn op() -> impl Strategy<Value = Op> {
    let step = 0..TABLE.len();
    let cpu = proptest::option::of(0..CPUS);
    prop_oneof![
        4 => (0..CPUS + 2).prop_map(Op::Online),
        4 => (0..CPUS + 2).prop_map(Op::Offline),
        2 => any::<u8>().prop_map(Op::OnlineMany),
        2 => any::<u8>().prop_map(Op::OfflineMany),
        1 => Just(Op::Flush),
        1 => any::<bool>().prop_map(Op::SetEngine),
        2 => (step.clone(), any::<bool>(), cpu.clone()).prop_map(|(s, d, c)| Op::Inject(s, d, c)),
        1 => (step, any::<bool>(), cpu).prop_map(|(s, d, c)| Op::Refuse(s, d, c)),
    ]
}

fn mask(bits: u8) -> CpuSet {
    (0..8).filter(|b| bits & (1 << b) != 0).map(CpuId).collect()
}

/// What a failure is armed on, for predicting whether an operation hits it.
#[derive(Clone, Copy, Debug)]
struct Armed {
    step: StepId,
    direction: Direction,
    cpu: Option<CpuId>,
}

fn expected_refusal(
    hp: &Hp,
    model_online: CpuSet,
    cpus: CpuSet,
    direction: Direction,
) -> Option<Error> {
    if cpus.is_empty() {
        return Some(Error::EmptySet);
    }
    if let Some(cpu) = cpus.difference(&hp.possible_cpus()).first() {
        return Some(Error::NoSuchCpu(cpu));
    }
    match direction {
        Direction::Up => cpus
            .intersection(&model_online)
            .first()
            .map(Error::AlreadyOnline),
        Direction::Down => {
            if let Some(cpu) = cpus.difference(&model_online).first() {
                Some(Error::AlreadyOffline(cpu))
            } else if model_online.difference(&cpus).is_empty() {
                Some(Error::LastCpu)
            } else {
                None
            }
        }
    }
}

/// Whether the operation reaches `armed`: some target (matching its CPU
/// filter) has the step in the state the operation moves it from. A pending
/// teardown is cancelled by an online (not reached); a pending startup is
/// completed before an offline (reached).
fn reaches(before: &[Vec<StepStatus>], cpus: CpuSet, direction: Direction, armed: Armed) -> bool {
    let from: &[StepStatus] = match direction {
        Direction::Up => &[StepStatus::Down],
        Direction::Down => &[StepStatus::Up, StepStatus::PendingStartup],
    };
    armed.direction == direction
        && cpus.iter().any(|cpu| {
            armed.cpu.is_none_or(|only| only == cpu)
                && from.contains(&before[cpu.index()][armed.step.index()])
        })
}

/// The statuses after a failed operation: as before, except that pending
/// startups of the targets were completed first.
fn after_failure(before: &[Vec<StepStatus>], cpus: CpuSet) -> Vec<Vec<StepStatus>> {
    let mut expected = before.to_vec();
    for cpu in cpus {
        for status in expected[cpu.index()].iter_mut() {
            if *status == StepStatus::PendingStartup {
                *status = StepStatus::Up;
            }
        }
    }
    expected
}

fn run(engine: Engine, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let (hp, world) = machine(engine, CPUS, false);
    let mut online = CpuSet::range(0, CPUS);
    let mut armed: Option<Armed> = None;
    for op in ops {
        let (cpus, direction) = match op {
            Op::Online(cpu) => (CpuSet::single(CpuId(cpu)), Direction::Up),
            Op::Offline(cpu) => (CpuSet::single(CpuId(cpu)), Direction::Down),
            Op::OnlineMany(bits) => (mask(bits), Direction::Up),
            Op::OfflineMany(bits) => (mask(bits), Direction::Down),
            Op::Flush => {
                hp.flush_deferred();
                for cpu in hp.possible_cpus() {
                    for i in 0..TABLE.len() {
                        let want = if online.contains(cpu) {
                            StepStatus::Up
                        } else {
                            StepStatus::Down
                        };
                        prop_assert_eq!(hp.step_status(cpu, StepId(i as u16)), Some(want));
                    }
                }
                assert_consistent(&hp, &world);
                continue;
            }
            Op::SetEngine(bolt) => {
                hp.set_engine(if bolt { Engine::Bolt } else { Engine::Classic });
                // A real refusal on a deferrable step would fire on the worker under bolt.
                world.refusals.lock().unwrap().clear();
                hp.clear_failure();
                armed = None;
                continue;
            }
            Op::Inject(step, up, cpu) => {
                let point = FailAt {
                    step: StepId(step as u16),
                    direction: if up { Direction::Up } else { Direction::Down },
                    cpu: cpu.map(CpuId),
                };
                let result = hp.inject_failure(point);
                if TABLE[step].section == Section::Starting {
                    // Refused: whatever was armed stays armed.
                    prop_assert_eq!(result, Err(Error::CannotFail(point.step)));
                } else {
                    prop_assert_eq!(result, Ok(()));
                    world.refusals.lock().unwrap().clear();
                    armed = Some(Armed {
                        step: point.step,
                        direction: point.direction,
                        cpu: point.cpu,
                    });
                }
                continue;
            }
            Op::Refuse(step, up, cpu) => {
                hp.clear_failure();
                world.refusals.lock().unwrap().clear();
                armed = None;
                let spec = TABLE[step];
                // Starting steps must not fail, and a deferrable step under
                // bolt would fail on the worker, outside any operation.
                if spec.section == Section::Starting
                    || (hp.engine() == Engine::Bolt && spec.class == Class::Deferrable)
                {
                    continue;
                }
                let direction = if up { Direction::Up } else { Direction::Down };
                world.refuse(Refusal {
                    name: spec.name,
                    direction,
                    cpu: cpu.map(CpuId),
                    instance: None,
                });
                armed = Some(Armed {
                    step: StepId(step as u16),
                    direction,
                    cpu: cpu.map(CpuId),
                });
                continue;
            }
        };
        let before = statuses(&hp);
        let pending_before = hp.pending_deferred();
        let refused = expected_refusal(&hp, online, cpus, direction);
        let hits = refused.is_none() && armed.is_some_and(|a| reaches(&before, cpus, direction, a));
        let result = match direction {
            Direction::Up => hp.online_many(cpus),
            Direction::Down => hp.offline_many(cpus),
        };
        match (&result, refused) {
            (Err(error), Some(expected)) => prop_assert_eq!(*error, expected),
            (
                Err(Error::StepFailed {
                    step, direction: d, ..
                }),
                None,
            ) => {
                let a = armed.take();
                prop_assert!(hits, "unexpected failure {:?}", result);
                prop_assert_eq!(Some((*step, *d)), a.map(|a| (a.step, a.direction)));
                prop_assert_eq!(hp.armed_failure(), None);
                prop_assert!(world.refusals.lock().unwrap().is_empty());
                prop_assert_eq!(statuses(&hp), after_failure(&before, cpus));
                let settled = cpus
                    .iter()
                    .any(|cpu| before[cpu.index()].contains(&StepStatus::PendingStartup));
                if !settled {
                    prop_assert_eq!(hp.pending_deferred(), pending_before);
                }
            }
            (Ok(report), None) => {
                prop_assert!(!hits, "armed failure {:?} not hit", armed);
                prop_assert_eq!(report.cpus, cpus);
                online = match direction {
                    Direction::Up => online.union(&cpus),
                    Direction::Down => online.difference(&cpus),
                };
                for cpu in cpus {
                    for i in 0..TABLE.len() {
                        let status = hp.step_status(cpu, StepId(i as u16)).unwrap();
                        prop_assert_eq!(status.is_logically_up(), direction == Direction::Up);
                        if hp.engine() == Engine::Classic {
                            prop_assert!(matches!(status, StepStatus::Up | StepStatus::Down));
                        }
                    }
                }
            }
            (other, expected) => prop_assert!(false, "got {:?}, expected {:?}", other, expected),
        }
        prop_assert_eq!(hp.online_cpus(), online);
        assert_consistent(&hp, &world);
    }
    hp.flush_deferred();
    assert_consistent(&hp, &world);
    prop_assert_eq!(hp.warnings(), Default::default());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1500, ..ProptestConfig::default() })]

    #[test]
    fn bolt_matches_the_model(ops in proptest::collection::vec(op(), 1..40)) {
        run(Engine::Bolt, ops)?;
    }

    #[test]
    fn classic_matches_the_model(ops in proptest::collection::vec(op(), 1..40)) {
        run(Engine::Classic, ops)?;
    }
}
