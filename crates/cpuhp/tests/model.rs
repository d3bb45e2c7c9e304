//! Property test: random sequences of online/offline/bulk operations,
//! flushes, engine switches and failures (injected, or real callback
//! refusals) against a simple model of which CPUs are online and which
//! steps are logically up on each.

mod common;

use std::cell::Cell;

use common::*;
use hotkern_cpuhp::{
    Class, CpuId, CpuSet, Direction, Engine, Error, FailAt, Section, StepId, StepStatus,
};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

const CPUS: u32 = 5;

#[derive(Clone, Debug)]
enum Op {
    Online(Mask),
    Offline(Mask),
    OnlineMany(Mask),
    OfflineMany(Mask),
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
        4 => mask_choice().prop_map(Op::Online),
        4 => mask_choice().prop_map(Op::Offline),
        2 => mask_choice().prop_map(Op::OnlineMany),
        2 => mask_choice().prop_map(Op::OfflineMany),
        1 => Just(Op::Flush),
        1 => any::<bool>().prop_map(Op::SetEngine),
        2 => (step.clone(), any::<bool>(), cpu.clone()).prop_map(|(s, d, c)| Op::Inject(s, d, c)),
        1 => (step, any::<bool>(), cpu).prop_map(|(s, d, c)| Op::Refuse(s, d, c)),
    ]
}

/// The CPUs of an operation. Chosen blindly, 8 bits over 5 CPUs almost
/// never name a set a bulk operation accepts (only about 3 % did), and one
/// CPU out of 7 is the wrong one about two times in three, so most are
/// chosen among the CPUs the operation can take in the state it meets, and
/// a few stay blind to keep the refusals tested.
#[derive(Clone, Copy, Debug)]
enum Mask {
    /// Bulk: bit `k` picks the `k`-th CPU the operation can take. Single:
    /// the bits pick one of them.
    Fit(u8),
    /// Bulk: bit `k` is CPU `k`, possible or not. Single: CPU `bits % 7`.
    Blind(u8),
}

fn mask_choice() -> impl Strategy<Value = Mask> {
    prop_oneof![
        6 => any::<u8>().prop_map(Mask::Fit),
        1 => any::<u8>().prop_map(Mask::Blind),
    ]
}

fn blind(bits: u8) -> CpuSet {
    (0..8).filter(|b| bits & (1 << b) != 0).map(CpuId).collect()
}

/// The set `mask` names for an operation in `direction` when `online` are
/// online: a fitting mask takes a non-empty subset of the offline CPUs (up)
/// or of the online CPUs leaving at least one (down), whenever one exists.
fn targets(mask: Mask, direction: Direction, online: CpuSet) -> CpuSet {
    let bits = match mask {
        Mask::Blind(bits) => return blind(bits),
        Mask::Fit(bits) => bits,
    };
    let Some(candidates) = candidates(direction, online) else {
        return blind(bits);
    };
    let mut chosen: Vec<CpuId> = candidates
        .iter()
        .enumerate()
        .filter(|(k, _)| bits & (1 << k) != 0)
        .map(|(_, cpu)| *cpu)
        .collect();
    let pick = usize::from(bits >> 5) % candidates.len();
    if chosen.is_empty() {
        chosen.push(candidates[pick]);
    } else if direction == Direction::Down && chosen.len() == candidates.len() {
        chosen.remove(pick);
    }
    chosen.into_iter().collect()
}

/// The one CPU `mask` names for a single operation in `direction`.
fn target(mask: Mask, direction: Direction, online: CpuSet) -> CpuSet {
    let cpu = match (mask, candidates(direction, online)) {
        (Mask::Fit(bits), Some(candidates)) => candidates[usize::from(bits) % candidates.len()],
        // Two CPUs past the last possible one, to keep `NoSuchCpu` tested.
        (Mask::Fit(bits) | Mask::Blind(bits), _) => CpuId(u32::from(bits) % (CPUS + 2)),
    };
    CpuSet::single(cpu)
}

/// The CPUs an operation in `direction` can take, if it can take any.
fn candidates(direction: Direction, online: CpuSet) -> Option<Vec<CpuId>> {
    let candidates: Vec<CpuId> = match direction {
        Direction::Up => CpuSet::range(0, CPUS).difference(&online).iter().collect(),
        Direction::Down => online.iter().collect(),
    };
    // Going down, one CPU must stay online.
    let needed = if direction == Direction::Down { 2 } else { 1 };
    (candidates.len() >= needed).then_some(candidates)
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

/// How often the interesting branches were reached, over every case.
#[derive(Default)]
struct Reach {
    bulk: Cell<u32>,
    bulk_reached: Cell<u32>,
    single: Cell<u32>,
    single_reached: Cell<u32>,
    failed: Cell<u32>,
}

fn bump(counter: &Cell<u32>, by: bool) {
    counter.set(counter.get() + u32::from(by));
}

fn run(engine: Engine, ops: Vec<Op>, reach: &Reach) -> Result<(), TestCaseError> {
    let (hp, world) = machine(engine, CPUS, false);
    let mut online = CpuSet::range(0, CPUS);
    let mut armed: Option<Armed> = None;
    for op in ops {
        let (cpus, direction) = match op {
            Op::Online(mask) => (target(mask, Direction::Up, online), Direction::Up),
            Op::Offline(mask) => (target(mask, Direction::Down, online), Direction::Down),
            Op::OnlineMany(mask) => (targets(mask, Direction::Up, online), Direction::Up),
            Op::OfflineMany(mask) => (targets(mask, Direction::Down, online), Direction::Down),
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
                    || (hp.engine().is_bolt() && spec.class == Class::Deferrable)
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
        let (count, reached) = match op {
            Op::OnlineMany(_) | Op::OfflineMany(_) => (&reach.bulk, &reach.bulk_reached),
            _ => (&reach.single, &reach.single_reached),
        };
        bump(count, true);
        bump(reached, refused.is_none());
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
                bump(&reach.failed, true);
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

const CASES: u32 = 1500;

/// Runs `CASES` random sequences on `engine` and checks that they reached
/// the engine: at least half of the bulk and of the single operations must
/// get past the argument checks, and some of those must fail and roll back.
fn check(engine: Engine) {
    let reach = Reach::default();
    let config = Config {
        cases: CASES,
        // Where the `proptest!` macro would keep failing cases.
        source_file: Some(file!()),
        ..Config::default()
    };
    TestRunner::new(config)
        .run(&proptest::collection::vec(op(), 1..40), |ops| {
            run(engine, ops, &reach)
        })
        .unwrap();
    let share =
        |part: &Cell<u32>, whole: &Cell<u32>| f64::from(part.get()) / f64::from(whole.get());
    let bulk = share(&reach.bulk_reached, &reach.bulk);
    let single = share(&reach.single_reached, &reach.single);
    let reached = Cell::new(reach.bulk_reached.get() + reach.single_reached.get());
    let failed = share(&reach.failed, &reached);
    eprintln!(
        "{engine:?}: {:.0} % of {} bulk and {:.0} % of {} single operations reached the engine; {:.0} % of those failed and rolled back",
        100.0 * bulk,
        reach.bulk.get(),
        100.0 * single,
        reach.single.get(),
        100.0 * failed,
    );
    assert!(bulk >= 0.5, "bulk operations mostly refused");
    assert!(single >= 0.5, "single operations mostly refused");
    // Blind masks, and states where no set fits, keep about a third of the
    // bulk operations refused.
    assert!(bulk <= 0.9, "bulk refusals no longer tested");
    // Three ops in seventeen arm a failure, which stays armed until an
    // operation in its direction reaches its step: about 8 % of the
    // operations reaching the engine fail and roll back.
    assert!(
        failed >= 0.05,
        "only {:.1} % of operations failed",
        100.0 * failed
    );
}

#[test]
fn bolt_matches_the_model() {
    check(Engine::Bolt);
}

#[test]
fn classic_matches_the_model() {
    check(Engine::Classic);
}

#[test]
fn bolt_nostop_matches_the_model() {
    check(Engine::BoltNoStop);
}
