//! The machine's run of the shared differential scenario
//! ([`hotkern_kernel::steps::differential`]), which the bare-metal kernel
//! runs too: the two logs must be equal.

use std::time::Duration;

use hotkern_kernel::ledger::Item;
use hotkern_kernel::steps::differential::{self, Log, Scenario};

use crate::machine::Machine;
use crate::task::TaskStatus;
use crate::MachineError;

/// Slices each task runs before it is done: enough that tasks are running
/// through the first operations and migrate off CPUs going down.
const SLICES: u32 = 200;

impl Machine {
    /// Runs `scenario` while `tasks` tasks run, each for a few hundred
    /// slices, and returns its log with the tasks' books once they
    /// drained. Needs a machine built with
    /// [`MachineBuilder::record_step_calls`](crate::MachineBuilder::record_step_calls),
    /// whose every CPU is online.
    ///
    /// ```
    /// use hotkern_machine::Machine;
    /// use hotkern_kernel::steps::differential::Scenario;
    /// let machine = Machine::builder().cpus(4).record_step_calls().build().unwrap();
    /// let log = machine.run_differential(Scenario::new(1, 6), 8).unwrap();
    /// assert_eq!(log.operations.len(), 6);
    /// assert_eq!(log.tasks.unwrap().completed_once, 8);
    /// ```
    ///
    /// # Errors
    ///
    /// [`MachineError::Config`] for a machine that does not record step
    /// calls.
    pub fn run_differential(&self, scenario: Scenario, tasks: u32) -> Result<Log, MachineError> {
        if !self.records_steps {
            return Err(MachineError::Config(
                "the differential scenario needs record_step_calls",
            ));
        }
        let recorder = &self.kernel.control;
        for _ in 0..tasks {
            let mut left = SLICES;
            self.submit(move |_| {
                left -= 1;
                if left == 0 {
                    TaskStatus::Done
                } else {
                    TaskStatus::Again
                }
            });
        }
        let mut settle = || {
            self.wait_hotplug_lock_quiet(Duration::from_secs(5));
        };
        let mut take = || recorder.take_steps();
        let mut log = differential::run(
            &self.engine,
            &*self.kernel,
            self.kernel.cpus,
            scenario,
            &mut settle,
            &mut take,
        );
        self.wait_idle(Duration::from_secs(30));
        log.tasks = Some(self.tally(Item::Task));
        Ok(log)
    }
}
