//! The differential scenario over the fake kernel: the same seed gives the
//! same log, the log shows what the scenario is for (both engines, bulk
//! operations, step and platform failures, rollback), and a kernel that
//! behaves differently in one callback gives another log.

use alloc::format;
use alloc::string::ToString;

use super::*;
use crate::steps::differential::{self, Injected, Log, Scenario};

fn log_of(seed: u64, operations: usize) -> Log {
    let (fake, hotplug) = boot(Engine::Classic);
    let log = differential::run(
        &hotplug,
        &*fake,
        CPUS,
        Scenario::new(seed, operations),
        &mut || {},
        &mut || hotplug.platform().1.take(),
    );
    // Every CPU the scenario left offline is back.
    assert_eq!(hotplug.online_cpus(), CpuSet::range(0, CPUS as u32));
    log
}

#[test]
fn the_same_seed_gives_the_same_log_and_another_seed_another() {
    let first = log_of(11, 40).to_string();
    assert_eq!(first, log_of(11, 40).to_string());
    assert_ne!(first, log_of(12, 40).to_string());
}

#[test]
fn the_log_covers_engines_bulk_operations_failures_and_rollback() {
    let log = log_of(3, 80);
    let operations = || log.operations.iter();
    assert_eq!(log.operations.len(), 80);
    assert!(operations().any(|o| o.operation.engine == Engine::Classic));
    assert!(operations().any(|o| o.operation.engine == Engine::Bolt));
    assert!(operations().any(|o| o.operation.cpus.len() > 1));
    assert!(operations().any(|o| matches!(o.operation.injected, Some(Injected::Step(..)))));
    assert!(operations().any(|o| matches!(o.operation.injected, Some(Injected::Platform(..)))));
    assert!(operations().any(|o| o.result.starts_with("the platform's")));
    assert!(operations().any(|o| o.result.contains("failed on")));
    assert!(operations().any(|o| o.result == "ok"));
    assert!(operations().any(|o| o.calls.iter().any(|call| call.rollback)));
    assert!(operations().any(|o| o.calls.iter().any(|call| call.deferred)));
    // CPU 0, the controller, never moves.
    assert!(operations().all(|o| !o.operation.cpus.contains(CpuId(0))));
    assert!(log.online.contains(CpuId(0)));
    assert!(operations().any(|o| o.result.starts_with("ok, listed: power-off failed for cpu")));
    let text = log.to_string();
    assert!(text.starts_with("differential: seed 3, 80 operations\nop 0: "));
    // Each operation's line says what it was and how it ended.
    let first = &log.operations[0];
    let engine = if first.operation.engine == Engine::Classic {
        "classic"
    } else {
        "bolt"
    };
    let line = text.lines().nth(1).unwrap();
    assert!(line.starts_with(&format!("op 0: {engine} ")), "{line}");
    assert!(line.ends_with(&format!(" => {}", first.result)), "{line}");
    let failed = log
        .operations
        .iter()
        .filter(|o| !o.result.starts_with("ok"))
        .count();
    assert!(failed > 0);
    assert!(
        text.contains(&format!("{failed} operations failed, ")),
        "{text}"
    );
    // Each CPU's line names only its own resources: an online CPU has
    // its kernel threads, and CPU 0 is online throughout.
    assert!(operations()
        .all(|o| o.state[0].starts_with("live cpu0: ") && o.state[0].contains("kthread")));
    assert!(text.contains("  teardown rollback ") || text.contains("  startup rollback "));
    assert!(text.lines().last().unwrap().starts_with("end: cpus "));
    // The kernel after each operation, and no invariant broken.
    assert!(text.contains("  live cpu1: "));
    assert_eq!(
        text.matches("  violations: none").count(),
        80,
        "{}",
        text.lines()
            .filter(|l| l.contains("violation"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

/// A kernel that cannot make a thread where the other can (planted: the
/// fake's thread creation fails from the fourth on): its log parts from
/// the other's at the operation where that first matters.
#[test]
fn a_kernel_that_behaves_otherwise_gives_another_log() {
    let honest = log_of(5, 40).to_string();
    let (fake, hotplug) = boot(Engine::Classic);
    fake.creations_left.store(3, SeqCst);
    let planted = differential::run(
        &hotplug,
        &*fake,
        CPUS,
        Scenario::new(5, 40),
        &mut || {},
        &mut || hotplug.platform().1.take(),
    )
    .to_string();
    assert_ne!(honest, planted);
    let first = honest
        .lines()
        .zip(planted.lines())
        .position(|(a, b)| a != b)
        .unwrap();
    let line = planted.lines().nth(first).unwrap();
    assert!(line.contains("threads:create"), "{line}");
}

/// Classic must free everything of a dead CPU until bolt has kept
/// something: a kernel that leaks a CPU's sysfs nodes is named in the
/// first classic offline's state, before any bolt operation.
#[test]
fn a_leak_under_classic_is_a_violation_before_bolt_kept_anything() {
    let seed = (0..100)
        .find(|&seed| {
            let op = log_of(seed, 1).operations[0].operation;
            op.engine == Engine::Classic
                && op.direction == hotkern_cpuhp::Direction::Down
                && op.injected.is_none()
        })
        .unwrap();
    let (fake, hotplug) = boot(Engine::Classic);
    fake.keeps_sysfs.store(true, SeqCst);
    let log = differential::run(
        &hotplug,
        &*fake,
        CPUS,
        Scenario::new(seed, 1),
        &mut || {},
        &mut || hotplug.platform().1.take(),
    );
    let outcome = &log.operations[0];
    assert_eq!(outcome.result, "ok");
    assert!(
        outcome
            .state
            .iter()
            .any(|line| line.starts_with("violation: ")),
        "{:?}",
        outcome.state
    );
}
