//! One seeded hotplug scenario that every platform runs the same way, and
//! the log that shows whether they did.
//!
//! The user-mode machine is where hotkern's kernel code is tested; the
//! bare-metal kernel is what boots. That the first stands for the second
//! is a claim, and this module is how it is checked: both run the same
//! scenario — single and bulk offline and online operations under both
//! engines, with step failures and platform failures injected — and each
//! writes the same [`Log`]: every step call the engine made, with its
//! direction, CPUs and outcome, and each operation's result. The two logs
//! must be equal, line for line.
//!
//! The scenario is drawn as it runs ([`run`]): each operation is chosen by
//! a seeded generator from the CPUs the engine says are online then, so a
//! platform whose operations end differently is led down another path and
//! its log parts from the other's at the first difference.
//!
//! Calls that run in parallel (a bulk operation's `Online` and `Starting`
//! steps) reach the log in an order no platform controls, so each
//! operation's calls are written sorted; what they were and how they
//! ended is what must be equal. Injected failures always name a CPU, so
//! that which call fails does not depend on which CPU gets there first.
//!
//! The machine's `Machine::run_differential` and the bare-metal kernel's
//! `differential=SEED` run call [`run`] with their engine, their kernel
//! and their [`StepRecorder`]; `hotkern boot --differential SEED` runs
//! both and compares.

use alloc::string::{String, ToString};
use alloc::vec::Vec;
use core::fmt;

use hotkern_cpuhp::{
    CallbackError, Context, CpuId, CpuSet, Direction, Engine, FailAt, Hotplug, Platform,
    PlatformFailAt, PlatformOperation, Section,
};
use lock_api::RawMutex;

use super::{invariants, StepKernel};
use crate::ledger::Tally;
use crate::sync::Mutex;

/// Operations in the scenario `hotkern boot --differential` runs on both
/// platforms.
pub const OPERATIONS: usize = 40;
/// Tasks running throughout it.
pub const TASKS: u32 = 16;

/// One step call as the engine reported it returning
/// ([`Platform::step_exited`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepRecord {
    /// The step's name.
    pub name: &'static str,
    /// Startup (`Up`) or teardown (`Down`).
    pub direction: Direction,
    /// The CPUs the call covered.
    pub cpus: CpuSet,
    /// Whether it undid part of a failed operation.
    pub rollback: bool,
    /// Whether the deferred worker made it.
    pub deferred: bool,
    /// What the callback returned ([`CallbackError::INJECTED`] for an
    /// injected failure, which runs no callback).
    pub result: Result<(), CallbackError>,
}

impl StepRecord {
    /// The call `context` describes, which returned `result`.
    pub fn new(context: &Context, result: Result<(), CallbackError>) -> StepRecord {
        StepRecord {
            name: context.name,
            direction: context.direction,
            cpus: context.cpus,
            rollback: context.rollback,
            deferred: context.deferred,
            result,
        }
    }
}

/// One line of the log: `teardown sched:active cpu2 ok`, with
/// `rollback`/`deferred` before the step when they apply.
impl fmt::Display for StepRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.direction)?;
        if self.rollback {
            f.write_str(" rollback")?;
        }
        if self.deferred {
            f.write_str(" deferred")?;
        }
        write!(f, " {} cpus {}", self.name, self.cpus)?;
        match self.result {
            Ok(()) => f.write_str(" ok"),
            Err(error) => write!(f, " failed: {error}"),
        }
    }
}

/// Where a platform keeps the step calls the engine reports, until the
/// scenario takes them after each operation.
#[derive(Default)]
pub struct StepRecorder {
    records: Mutex<Vec<StepRecord>>,
}

impl StepRecorder {
    /// An empty recorder; a `static` on bare metal.
    #[cfg(not(loom))]
    pub const fn new() -> StepRecorder {
        StepRecorder {
            records: Mutex::new(Vec::new()),
        }
    }

    /// An empty recorder.
    #[cfg(loom)]
    pub fn new() -> StepRecorder {
        StepRecorder {
            records: Mutex::new(Vec::new()),
        }
    }

    /// Records a call; the platform calls it from [`Platform::step_exited`].
    pub fn record(&self, context: &Context, result: Result<(), CallbackError>) {
        self.records.lock().push(StepRecord::new(context, result));
    }

    /// The calls recorded since the last take, in the order recorded.
    pub fn take(&self) -> Vec<StepRecord> {
        core::mem::take(&mut *self.records.lock())
    }
}

/// What is made to fail in an operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Injected {
    /// A step's callback, for one CPU (Linux's `hotplug/fail`).
    Step(&'static str, CpuId),
    /// An operation of the platform, for one CPU.
    Platform(PlatformOperation, CpuId),
}

/// One operation of the scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Operation {
    /// The engine it runs with.
    pub engine: Engine,
    /// Online (`Up`) or offline (`Down`).
    pub direction: Direction,
    /// Its CPUs: one for a single operation, more for a bulk one.
    pub cpus: CpuSet,
    /// What is made to fail, if anything.
    pub injected: Option<Injected>,
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let engine = self.engine.name();
        let what = match (self.direction, self.cpus.len()) {
            (Direction::Up, 1) => "online",
            (Direction::Down, 1) => "offline",
            (Direction::Up, _) => "online-many",
            (Direction::Down, _) => "offline-many",
        };
        write!(f, "{engine} {what} {}", self.cpus)?;
        match self.injected {
            None => Ok(()),
            Some(Injected::Step(name, cpu)) => write!(f, ", step {name} fails for {cpu}"),
            Some(Injected::Platform(operation, cpu)) => {
                write!(f, ", the platform's {operation} fails for {cpu}")
            }
        }
    }
}

/// A scenario's seed and length. Its operations are drawn as it runs, by
/// [`run`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scenario {
    /// The generator's seed.
    pub seed: u64,
    /// How many operations.
    pub operations: usize,
}

impl Scenario {
    /// `operations` operations drawn from `seed`.
    pub const fn new(seed: u64, operations: usize) -> Scenario {
        Scenario { seed, operations }
    }
}

/// One operation and what came of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    /// The operation.
    pub operation: Operation,
    /// `ok`, `ok, listed: ...` for a platform failure it went on
    /// through, or the error.
    pub result: String,
    /// Its step calls, deferred ones included, sorted.
    pub calls: Vec<StepRecord>,
    /// The kernel after it: each CPU's live resources (what the steps
    /// made and kept), and the shared invariant check's violations.
    pub state: Vec<String>,
}

/// Everything a scenario did, printed as the lines two platforms compare.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Log {
    /// The scenario.
    pub scenario: Scenario,
    /// Each operation, in order.
    pub operations: Vec<Outcome>,
    /// The CPUs online at the end.
    pub online: CpuSet,
    /// The tasks that ran throughout, once they drained; the platform
    /// fills it in after [`run`].
    pub tasks: Option<Tally>,
}

impl fmt::Display for Log {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "differential: seed {}, {} operations",
            self.scenario.seed, self.scenario.operations
        )?;
        for (index, outcome) in self.operations.iter().enumerate() {
            writeln!(f, "op {index}: {} => {}", outcome.operation, outcome.result)?;
            for call in &outcome.calls {
                writeln!(f, "  {call}")?;
            }
            for line in &outcome.state {
                writeln!(f, "  {line}")?;
            }
        }
        let calls: usize = self.operations.iter().map(|o| o.calls.len()).sum();
        let failed = self
            .operations
            .iter()
            .filter(|o| !o.result.starts_with("ok"))
            .count();
        writeln!(
            f,
            "end: cpus {} online, {failed} operations failed, {calls} step calls",
            self.online
        )?;
        if let Some(tasks) = self.tasks {
            writeln!(
                f,
                "tasks: {} issued, {} completed once, {} outstanding, {} completed twice",
                tasks.issued, tasks.completed_once, tasks.outstanding, tasks.completed_twice
            )?;
        }
        Ok(())
    }
}

/// SplitMix64 (Steele, Lea and Flood, 2014): small, and the same stream
/// on every platform for a seed.
struct Draw(u64);

impl Draw {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number below `bound` (which is not 0).
    fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound
    }

    /// One CPU of `cpus` (not empty).
    fn cpu_of(&mut self, cpus: CpuSet) -> CpuId {
        let nth = self.below(cpus.len() as u64) as usize;
        cpus.iter().nth(nth).unwrap_or(CpuId(0))
    }

    /// A subset of `cpus` with at least one CPU.
    fn subset_of(&mut self, cpus: CpuSet) -> CpuSet {
        let mut chosen: CpuSet = cpus.iter().filter(|_| self.below(2) == 0).collect();
        if chosen.is_empty() {
            chosen.insert(self.cpu_of(cpus));
        }
        chosen
    }
}

/// The platform operations an operation in `direction` meets under
/// `engine` (rolling back aside): what the differential scenario and the
/// bare-metal kernel's failure injection make fail.
///
/// ```
/// use hotkern_cpuhp::{Direction, Engine, PlatformOperation};
/// use hotkern_kernel::steps::differential::platform_operations;
///
/// let down = platform_operations(Direction::Down, Engine::BoltNoStop);
/// assert!(down.contains(&PlatformOperation::RunDying));
/// assert!(!down.contains(&PlatformOperation::StopMachine));
/// ```
pub fn platform_operations(direction: Direction, engine: Engine) -> &'static [PlatformOperation] {
    use PlatformOperation::*;
    match (direction, engine) {
        (Direction::Up, _) => &[HotplugLock, PowerOn, RunOn],
        (Direction::Down, Engine::Classic) => {
            &[HotplugLock, RunOn, GracePeriod, StopMachine, PowerOff]
        }
        (Direction::Down, Engine::Bolt) => &[
            HotplugLock,
            RunOn,
            ExpeditedGracePeriod,
            StopMachine,
            PowerOff,
        ],
        (Direction::Down, Engine::BoltNoStop) => {
            &[HotplugLock, RunOn, ExpeditedGracePeriod, RunDying, PowerOff]
        }
    }
}

/// The next operation, from the CPUs `hotplug` has online now: CPU 0
/// (the controller) stays; a CPU goes down or comes up, or several do;
/// one in four fails at a step, one in six in the platform.
fn draw<R: RawMutex + Sync, P: Platform>(draw: &mut Draw, hotplug: &Hotplug<R, P>) -> Operation {
    let engine = match draw.below(3) {
        0 => Engine::Classic,
        1 => Engine::Bolt,
        _ => Engine::BoltNoStop,
    };
    let movable = hotplug
        .possible_cpus()
        .difference(&CpuSet::single(CpuId(0)));
    let up = movable.intersection(&hotplug.online_cpus());
    let down = movable.difference(&up);
    let direction = match (up.is_empty(), down.is_empty()) {
        (true, _) => Direction::Up,
        (_, true) => Direction::Down,
        _ if draw.below(2) == 0 => Direction::Up,
        _ => Direction::Down,
    };
    let from = match direction {
        Direction::Up => down,
        Direction::Down => up,
    };
    let cpus = if draw.below(3) == 0 {
        draw.subset_of(from)
    } else {
        CpuSet::single(draw.cpu_of(from))
    };
    let target = draw.cpu_of(cpus);
    let injected = match draw.below(12) {
        0..=2 => {
            // A step that may fail: not `Starting`, which must not.
            let steps: Vec<(usize, &'static str)> = (0..hotplug.step_count())
                .filter_map(|index| {
                    let step = hotkern_cpuhp::StepId(index as u16);
                    let spec = hotplug.step_spec(step)?;
                    (spec.section != Section::Starting).then_some((index, spec.name))
                })
                .collect();
            (!steps.is_empty()).then(|| {
                let (_, name) = steps[draw.below(steps.len() as u64) as usize];
                Injected::Step(name, target)
            })
        }
        3 | 4 => {
            let operations = platform_operations(direction, engine);
            let operation = operations[draw.below(operations.len() as u64) as usize];
            Some(Injected::Platform(operation, target))
        }
        _ => None,
    };
    Operation {
        engine,
        direction,
        cpus,
        injected,
    }
}

/// The state lines of `kernel` after an operation: each CPU's live
/// resources, then the violations [`invariants::check`] finds (`none`).
pub fn state<K: StepKernel>(
    kernel: &K,
    online: CpuSet,
    cpus: usize,
    frees_everything: bool,
) -> Vec<String> {
    let live = kernel.audit().live();
    let mut lines = Vec::new();
    for cpu in 0..cpus {
        let held: Vec<String> = live
            .iter()
            .filter(|(_, owner)| owner.index() == cpu)
            .map(|(resource, _)| resource.to_string())
            .collect();
        lines.push(alloc::format!("live cpu{cpu}: {}", held.join(", ")));
    }
    let violations = invariants::check(kernel, online, cpus, frees_everything);
    if violations.is_empty() {
        lines.push("violations: none".to_string());
    }
    for violation in violations {
        lines.push(alloc::format!("violation: {violation}"));
    }
    lines
}

/// Runs `scenario` on `hotplug`, whose steps run on `kernel` of `cpus`
/// CPUs: draws each operation, arms its failure, runs it, completes its
/// deferred work, calls `settle` (the platform's own work between two
/// operations), takes the step calls `take` gives (the platform's
/// [`StepRecorder`]) and notes the kernel's [`state`]. Calls recorded
/// before the first operation are dropped; at the end, every CPU the
/// scenario left offline is brought back (not logged).
pub fn run<R: RawMutex + Sync, P: Platform, K: StepKernel>(
    hotplug: &Hotplug<R, P>,
    kernel: &K,
    cpus: usize,
    scenario: Scenario,
    settle: &mut dyn FnMut(),
    take: &mut dyn FnMut() -> Vec<StepRecord>,
) -> Log {
    let mut generator = Draw(scenario.seed);
    let mut operations = Vec::with_capacity(scenario.operations);
    // Classic frees everything of a dead CPU only until bolt has kept
    // something, as the invariant check must know.
    let mut kept = hotplug.engine().is_bolt();
    hotplug.flush_deferred();
    settle();
    take();
    for _ in 0..scenario.operations {
        let operation = draw(&mut generator, hotplug);
        hotplug.set_engine(operation.engine);
        kept |= operation.engine.is_bolt();
        let armed = match operation.injected {
            None => Ok(()),
            Some(Injected::Step(name, cpu)) => match hotplug.step_id(name) {
                Some(step) => hotplug.inject_failure(FailAt {
                    step,
                    direction: operation.direction,
                    cpu: Some(cpu),
                }),
                None => Ok(()),
            },
            Some(Injected::Platform(operation, cpu)) => {
                hotplug.inject_platform_failure(PlatformFailAt {
                    operation,
                    cpu: Some(cpu),
                })
            }
        };
        let result = match armed {
            Err(error) => alloc::format!("not armed: {error}"),
            Ok(()) => {
                let done = match (operation.direction, operation.cpus.len()) {
                    (Direction::Up, 1) => {
                        hotplug.online(operation.cpus.first().unwrap_or(CpuId(0)))
                    }
                    (Direction::Down, 1) => {
                        hotplug.offline(operation.cpus.first().unwrap_or(CpuId(0)))
                    }
                    (Direction::Up, _) => hotplug.online_many(operation.cpus),
                    (Direction::Down, _) => hotplug.offline_many(operation.cpus),
                };
                match done {
                    Ok(report) if report.failures.is_empty() => "ok".to_string(),
                    Ok(report) => {
                        let mut text = "ok, listed:".to_string();
                        for failure in &report.failures {
                            text.push(' ');
                            text.push_str(&failure.to_string());
                        }
                        text
                    }
                    Err(error) => error.to_string(),
                }
            }
        };
        // A failure the operation never reached (a deferred teardown
        // cancelled instead) must not fire in the next one.
        hotplug.clear_failure();
        hotplug.clear_platform_failure();
        hotplug.flush_deferred();
        settle();
        let mut calls = take();
        calls.sort_by_cached_key(|call| call.to_string());
        let frees_everything = operation.engine == Engine::Classic && !kept;
        operations.push(Outcome {
            operation,
            result,
            calls,
            state: state(kernel, hotplug.online_cpus(), cpus, frees_everything),
        });
    }
    let online = hotplug.online_cpus();
    // Every CPU back, as the run found them: the platform's later runs
    // (and its checks) expect them all.
    let away = hotplug.possible_cpus().difference(&online);
    if !away.is_empty() {
        let _ = hotplug.online_many(away);
        hotplug.flush_deferred();
        settle();
        take();
    }
    Log {
        scenario,
        operations,
        online,
        tasks: None,
    }
}

#[cfg(test)]
mod tests {
    use super::Draw;

    /// The first outputs for seed 0 of SplitMix64's reference
    /// implementation (Vigna's `splitmix64.c`): the generator every
    /// platform draws the scenario from is that one.
    #[test]
    fn the_generator_is_splitmix64() {
        let mut draw = Draw(0);
        assert_eq!(draw.next(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(draw.next(), 0x6e78_9e6a_a1b9_65f4);
        assert_eq!(draw.next(), 0x06c4_5d18_8009_454f);
    }
}
