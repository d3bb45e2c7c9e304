//! The shared differential scenario on real CPUs
//! ([`hotkern_kernel::steps::differential`]), asked for with
//! `differential=SEED` instead of the timed cases: the same operations
//! the user-mode machine runs for that seed, with the same failures and
//! tasks running, and a log `hotkern boot --differential` compares with
//! the machine's, line for line.

use alloc::vec::Vec;

use hotkern_kernel::hotplug::Control;
use hotkern_kernel::ledger::Tally;
use hotkern_kernel::steps::differential::{self, Log, Scenario, OPERATIONS, TASKS};

use super::{drain, settle_between, start};
use crate::arch::console::println;
use crate::arch::interrupts;
use crate::platform::Kernel;
use crate::runs::checks::Checks;
use crate::runs::json::JsonStr;
use crate::runs::tasks;

/// Runs the scenario drawn from `seed` while [`TASKS`] tasks run, then
/// lets the tasks finish; the log has their books. `None` where hotplug
/// cannot run (one CPU, no page pool).
pub fn run(seed: u64, tsc_hz: u64, checks: &mut Checks) -> Option<Log> {
    let (engine, count) = start(checks)?;
    Kernel::control().inspect(|control| control.record_steps(true));
    tasks::spawn(TASKS);
    let mut settle = || {
        if !settle_between() {
            println!("hotkern: differential: the hotplug lock did not settle");
        }
    };
    let mut take = || {
        let control = Kernel::control();
        interrupts::without_interrupts(|| control.map(Control::take_steps).unwrap_or_default())
    };
    let mut log = differential::run(
        &engine,
        &Kernel::HANDLE,
        count as usize,
        Scenario::new(seed, OPERATIONS),
        &mut settle,
        &mut take,
    );
    Kernel::control().inspect(|control| control.record_steps(false));
    let pending = drain(tsc_hz);
    let tally = tasks::tally();
    log.tasks = Some(Tally {
        issued: tally.issued,
        completed_once: tally.completed,
        outstanding: tally.outstanding,
        completed_twice: tally.twice,
    });
    checks.check(
        "the differential scenario ran every operation, and its tasks and RCU callbacks finished",
        log.operations.len() == OPERATIONS && tally.outstanding == 0 && pending == 0,
    );
    Some(log)
}

/// The log as JSON, for the summary: `{"seed":S,"log":["line",...]}`.
pub struct DifferentialJson<'a>(pub Option<&'a Log>);

impl core::fmt::Display for DifferentialJson<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let Some(log) = self.0 else {
            return f.write_str("null");
        };
        write!(f, "{{\"seed\":{},\"log\":[", log.scenario.seed)?;
        let text = alloc::format!("{log}");
        let lines: Vec<&str> = text.lines().collect();
        for (index, line) in lines.iter().enumerate() {
            if index > 0 {
                f.write_str(",")?;
            }
            write!(f, "{}", JsonStr(line))?;
        }
        f.write_str("]}")
    }
}
