//! The machine's run of the shared differential scenario is a function of
//! its seed: two machines give the same log, tasks running on both, which
//! is what lets the bare-metal kernel's log be compared with it line for
//! line (`hotkern differential`).

use hotkern_kernel::steps::differential::Scenario;
use hotkern_machine::{Machine, MachineError};

fn log(seed: u64) -> String {
    let machine = Machine::builder()
        .cpus(4)
        .record_step_calls()
        .build()
        .unwrap();
    let log = machine
        .run_differential(Scenario::new(seed, 60), 16)
        .unwrap();
    let tasks = log.tasks.unwrap();
    assert_eq!((tasks.issued, tasks.completed_once), (16, 16));
    assert_eq!((tasks.outstanding, tasks.completed_twice), (0, 0));
    assert!(machine.check_invariants().is_empty());
    let text = log.to_string();
    // The shared invariant check after every operation.
    assert_eq!(text.matches("\n  violations: none\n").count(), 60, "{text}");
    text
}

#[test]
fn two_machines_give_the_same_log() {
    let first = log(21);
    assert_eq!(first, log(21));
    assert!(first.contains(" rollback "), "{first}");
    // All three engines take part, bolt-nostop's take-downs included.
    assert!(first.contains("bolt-nostop offline"), "{first}");
    assert!(first.contains("listed: power-off failed") || first.contains("the platform's"));
}

#[test]
fn a_machine_that_keeps_no_step_log_is_refused() {
    let machine = Machine::builder().cpus(2).build().unwrap();
    assert!(matches!(
        machine.run_differential(Scenario::new(1, 1), 0),
        Err(MachineError::Config(_))
    ));
}
