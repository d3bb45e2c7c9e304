//! Failure injection on real CPUs, as Linux's
//! `/sys/devices/system/cpu/cpuN/hotplug/fail` makes a step's callback
//! fail: the engine is told to fail one step of one operation
//! ([`Hotplug::inject_failure`](hotkern_cpuhp::Hotplug::inject_failure)),
//! and the operation must fail with that step's error and roll back —
//! the engine's states and online set as before, and this kernel's masks,
//! queues, kernel threads and per-CPU structures agreeing with it again
//! (the same check as after every timed operation) — and the next
//! operation on the same CPUs must succeed.
//!
//! Two steps of `Prepare` (one deferrable, one critical) and two of
//! `Online` fail, in both directions, for one CPU and for a bulk set
//! (failing for its middle CPU, so classic undoes the CPU it already
//! moved); `Starting` steps cannot fail. So does every operation of the
//! platform that an operation meets
//! ([`Hotplug::inject_platform_failure`](hotkern_cpuhp::Hotplug::inject_platform_failure)):
//! the engine acts on these CPUs as a real failure makes it act — a CPU
//! that does not start while the others of a bulk set run their starting
//! steps, a hotplug thread not reached, a stop-machine not gathered, a
//! grace period or the hotplug lock stalled — and must roll back the same
//! way — under bolt-nostop, a dying CPU that cannot run its steps alone —;
//! a CPU late to report dead is listed and the operation completes. Tasks
//! run throughout.

use alloc::vec::Vec;
use core::fmt;

use hotkern_cpuhp::{
    CpuId, CpuSet, Direction, Error, FailAt, PlatformError, PlatformFailAt, PlatformOperation,
    Report, StepStatus,
};
use hotkern_kernel::steps::differential::platform_operations;

use super::engine::{consistent, settle_between, KernelHotplug};
use crate::runs::tasks;

/// The steps made to fail: `threads:create` and `rcu:data` (`Prepare`,
/// on the controller), `workqueue:online` and `sched:active` (`Online`,
/// on the target's hotplug thread).
pub const STEPS: [&str; 4] = [
    "threads:create",
    "rcu:data",
    "workqueue:online",
    "sched:active",
];

/// What the injected failures did, over every case of every engine.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FailureTally {
    /// Operations made to fail.
    pub cases: u32,
    /// Those that failed at the step they were told to, in its direction.
    pub failed_as_told: u32,
    /// Those after which everything was as before the operation.
    pub rolled_back: u32,
    /// Those whose next operation on the same CPUs succeeded.
    pub next_succeeded: u32,
    /// The platform operations made to fail, each named once.
    pub platform: Vec<&'static str>,
    /// The first cases that went wrong: engine, step, direction, CPUs.
    pub broken: Vec<(&'static str, &'static str, Direction, CpuSet)>,
}

impl FailureTally {
    /// Every case failed as told, rolled back, and was followed by a
    /// successful operation.
    pub fn holds(&self) -> bool {
        self.cases > 0
            && self.failed_as_told == self.cases
            && self.rolled_back == self.cases
            && self.next_succeeded == self.cases
    }
}

/// What must be the same before and after a failed operation: the online
/// CPUs and every step's state on every CPU.
#[derive(PartialEq, Eq)]
struct Snapshot {
    online: CpuSet,
    states: Vec<Option<StepStatus>>,
}

fn snapshot(engine: &KernelHotplug) -> Snapshot {
    let mut states = Vec::new();
    for cpu in engine.possible_cpus().iter() {
        for step in 0..engine.step_count() {
            states.push(engine.step_status(cpu, hotkern_cpuhp::StepId(step as u16)));
        }
    }
    Snapshot {
        online: engine.online_cpus(),
        states,
    }
}

/// What is made to fail.
#[derive(Clone, Copy)]
enum Failing {
    Step(hotkern_cpuhp::StepId),
    Platform(PlatformOperation),
}

/// Takes `cpus` offline (`Down`) or online (`Up`): one CPU through the
/// single operation, more through the bulk one.
fn operate(engine: &KernelHotplug, cpus: CpuSet, direction: Direction) -> Result<Report, Error> {
    let result = match (direction, cpus.len()) {
        (Direction::Down, 1) => engine.offline(cpus.first().unwrap_or(CpuId(1))),
        (Direction::Up, 1) => engine.online(cpus.first().unwrap_or(CpuId(1))),
        (Direction::Down, _) => engine.offline_many(cpus),
        (Direction::Up, _) => engine.online_many(cpus),
    };
    engine.flush_deferred();
    if !settle_between() {
        crate::platform::hardware::FAILURES.record(format_args!("the hotplug lock did not settle"));
    }
    result
}

/// Runs every case with the engine's current engine (`name` for the
/// report) and adds them to `tally`. The application processors `aps`
/// are online before and after.
pub fn run(engine: &KernelHotplug, name: &'static str, aps: CpuSet, tally: &mut FailureTally) {
    let middle = aps.iter().nth(aps.len() / 2).unwrap_or(CpuId(1));
    let mut single = aps.iter().cycle();
    for step_name in STEPS {
        let Some(step) = engine.step_id(step_name) else {
            tally.cases += 1;
            tally.broken.push((name, step_name, Direction::Down, aps));
            continue;
        };
        for direction in [Direction::Down, Direction::Up] {
            let one = CpuSet::single(single.next().unwrap_or(CpuId(1)));
            for (cpus, fails_for) in [(one, one.first().unwrap_or(CpuId(1))), (aps, middle)] {
                let ok = case(
                    engine,
                    Failing::Step(step),
                    direction,
                    cpus,
                    fails_for,
                    tally,
                );
                if !ok && tally.broken.len() < 8 {
                    tally.broken.push((name, step_name, direction, cpus));
                }
            }
        }
    }
    for direction in [Direction::Down, Direction::Up] {
        for &operation in platform_operations(direction, engine.engine()) {
            if !tally.platform.contains(&operation.name()) {
                tally.platform.push(operation.name());
            }
            let one = CpuSet::single(single.next().unwrap_or(CpuId(1)));
            for (cpus, fails_for) in [(one, one.first().unwrap_or(CpuId(1))), (aps, middle)] {
                let failing = Failing::Platform(operation);
                let ok = case(engine, failing, direction, cpus, fails_for, tally);
                if !ok && tally.broken.len() < 8 {
                    tally.broken.push((name, operation.name(), direction, cpus));
                }
            }
        }
    }
}

/// One case: `cpus` brought to where the operation starts, the failure
/// armed for `fails_for`, the operation run and checked, then run again.
/// Returns whether all went as it should.
fn case(
    engine: &KernelHotplug,
    failing: Failing,
    direction: Direction,
    cpus: CpuSet,
    fails_for: CpuId,
    tally: &mut FailureTally,
) -> bool {
    tally.cases += 1;
    // Going up starts from the CPUs offline.
    if direction == Direction::Up && operate(engine, cpus, Direction::Down).is_err() {
        return false;
    }
    let before = snapshot(engine);
    let books = tasks::tally();
    let warnings = engine.warnings();
    let armed = match failing {
        Failing::Step(step) => engine.inject_failure(FailAt {
            step,
            direction,
            cpu: Some(fails_for),
        }),
        Failing::Platform(operation) => engine.inject_platform_failure(PlatformFailAt {
            operation,
            cpu: Some(fails_for),
        }),
    };
    if armed.is_err() {
        return false;
    }
    let result = operate(engine, cpus, direction);
    let injected = |operation| PlatformError::new(operation, fails_for, PlatformError::INJECTED);
    let failed_as_told = match (failing, &result) {
        (
            Failing::Step(step),
            Err(Error::StepFailed {
                step: failed,
                direction: going,
                ..
            }),
        ) => *failed == step && *going == direction,
        // Past the dying steps: the operation completes and lists it.
        (Failing::Platform(PlatformOperation::PowerOff), Ok(report)) => {
            report.failures == [injected(PlatformOperation::PowerOff)]
        }
        (Failing::Platform(operation), Err(Error::PlatformFailed(error))) => {
            *error == injected(operation)
        }
        _ => false,
    } && engine.armed_failure().is_none()
        && engine.armed_platform_failure().is_none();
    if matches!(failing, Failing::Platform(PlatformOperation::PowerOff)) {
        return late_to_die(engine, cpus, failed_as_told, warnings, tally);
    }
    // Nothing changed: the engine's states, this kernel's structures (the
    // check after every operation), the tasks' books, and no rollback
    // callback refused.
    let after = tasks::tally();
    let rolled_back = snapshot(engine) == before
        && consistent(engine, format_args!("{direction:?} failed")) == 0
        && engine.warnings() == warnings
        && after.issued == books.issued
        && after.twice == 0
        && after.ran_offline == books.ran_offline;
    // A failure that did not fire must not spill into the next operation.
    engine.clear_failure();
    engine.clear_platform_failure();
    let next_succeeded = operate(engine, cpus, direction).is_ok()
        && consistent(engine, format_args!("{direction:?} after a failure")) == 0;
    tally.failed_as_told += u32::from(failed_as_told);
    tally.rolled_back += u32::from(rolled_back);
    tally.next_succeeded += u32::from(next_succeeded);
    // Every application processor back online for the next case.
    let down = cpus.difference(&engine.online_cpus());
    let restored = down.is_empty() || operate(engine, down, Direction::Up).is_ok();
    failed_as_told && rolled_back && next_succeeded && restored
}

/// The rest of a case whose CPUs were late to report dead: they are
/// offline as after any take-down (the same check), no rollback was
/// needed, and they come back.
fn late_to_die(
    engine: &KernelHotplug,
    cpus: CpuSet,
    failed_as_told: bool,
    warnings: hotkern_cpuhp::Warnings,
    tally: &mut FailureTally,
) -> bool {
    let offline = engine.online_cpus().intersection(&cpus).is_empty()
        && consistent(engine, format_args!("after a late power-off")) == 0
        && engine.warnings() == warnings;
    let next_succeeded = operate(engine, cpus, Direction::Up).is_ok()
        && consistent(engine, format_args!("back after a late power-off")) == 0;
    tally.failed_as_told += u32::from(failed_as_told);
    tally.rolled_back += u32::from(offline);
    tally.next_succeeded += u32::from(next_succeeded);
    failed_as_told && offline && next_succeeded
}

/// The tally as JSON, for the summary: `{"steps":[...],"cases":N,
/// "failed_as_told":N,"rolled_back":N,"next_succeeded":N,"broken":[...]}`.
impl fmt::Display for FailureTally {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("{\"steps\":[")?;
        for (index, step) in STEPS.iter().enumerate() {
            let comma = if index > 0 { "," } else { "" };
            write!(f, "{comma}\"{step}\"")?;
        }
        f.write_str("],\"platform\":[")?;
        for (index, operation) in self.platform.iter().enumerate() {
            let comma = if index > 0 { "," } else { "" };
            write!(f, "{comma}\"{operation}\"")?;
        }
        write!(
            f,
            "],\"cases\":{},\"failed_as_told\":{},\"rolled_back\":{},\"next_succeeded\":{},\"broken\":[",
            self.cases, self.failed_as_told, self.rolled_back, self.next_succeeded
        )?;
        for (index, (engine, step, direction, cpus)) in self.broken.iter().enumerate() {
            let comma = if index > 0 { "," } else { "" };
            write!(
                f,
                "{comma}{{\"engine\":\"{engine}\",\"step\":\"{step}\",\"direction\":\"{direction:?}\",\"cpus\":["
            )?;
            for (index, cpu) in cpus.iter().enumerate() {
                let comma = if index > 0 { "," } else { "" };
                write!(f, "{comma}{}", cpu.0)?;
            }
            f.write_str("]}")?;
        }
        f.write_str("]}")
    }
}
