//! The `Starting` section of an operation: the grace period and the
//! stop-machine (or, with `bolt-nostop`, the dying CPUs alone) going down, the bring-up going up, and powering CPUs off,
//! with what each platform failure means for rollback.

use alloc::vec::Vec;

use lock_api::{Mutex, RawMutex};

use super::{sorted, Stopped};
use crate::cpu::{CpuId, CpuMask};
use crate::hotplug::Hotplug;
use crate::invoke::Injector;
use crate::platform::{Platform, PlatformError, PlatformOperation};
use crate::step::{Direction, Section};
use crate::walk::{CpuOutcomes, Walk};

impl<R: RawMutex + Sync, P: Platform<WORDS>, const WORDS: usize> Hotplug<R, P, WORDS> {
    /// Power, grace period, and the `Starting` steps of every target in
    /// parallel: in a stop-machine going down, as the CPUs come up going up.
    ///
    /// A platform failure going down (the grace period, the stop-machine)
    /// comes before any dying step ran, so the section changed nothing; a
    /// CPU that does not report dead comes after them and is only listed.
    /// Going up, the CPUs that came up before one failed ran their steps,
    /// and rollback takes exactly those down again ([`Walk::started`]).
    pub(super) fn run_starting(
        &self,
        walk: &mut Walk<'_, WORDS>,
        direction: Direction,
        rollback: bool,
    ) -> Result<(), Stopped> {
        // Rolling a bring-up back takes down only the CPUs that came up.
        let targets = match (direction, rollback) {
            (Direction::Down, true) => walk.started,
            _ => walk.targets,
        };
        if targets.is_empty() {
            return Ok(());
        }
        if direction == Direction::Down {
            // Readers that saw the CPU as usable must be done before it
            // stops (Linux's `sched_cpu_deactivate` waits for a normal
            // grace period after clearing the active mask). Bolt needs the
            // same guarantee but not the ticks a normal one waits for.
            let waited = self.grace_period(walk, rollback);
            walk.lap("grace-period", self.platform.now_ns());
            if let Err(error) = waited {
                if !rollback {
                    return Err(Stopped::unchanged(error.into()));
                }
                walk.warnings_rollback += 1;
            }
        }
        let (reports, stages, result) = self.starting_section(walk, targets, direction, rollback);
        for (stage, end) in stages {
            walk.lap(stage, end);
        }
        if direction == Direction::Up {
            walk.started = walk
                .started
                .union(&reports.iter().map(|(cpu, _)| *cpu).collect());
        }
        // Starting steps cannot fail, so there is never an error to return.
        let _ = walk.apply(direction, rollback, true, reports);
        walk.lap("outcomes", self.platform.now_ns());
        if let Err(error) = result {
            if rollback {
                walk.warnings_rollback += 1;
            } else {
                // Going down nothing ran; going up, what did is undone
                // by rolling this section back.
                let changed = direction == Direction::Up;
                return Err(Stopped {
                    error: error.into(),
                    changed,
                });
            }
        }
        match direction {
            Direction::Up => walk.online = walk.online.union(&targets),
            Direction::Down => {
                walk.online = walk.online.difference(&targets);
                let stopped = self.power_off(walk, targets, rollback);
                walk.lap("power", self.platform.now_ns());
                match stopped {
                    Ok(()) => {}
                    Err(_) if rollback => walk.warnings_rollback += 1,
                    // Past the dying steps there is no way back: Linux's
                    // `__cpu_die` warns about a CPU that does not report
                    // dead and goes on.
                    Err(error) => walk.failures.push(error),
                }
            }
        }
        Ok(())
    }

    /// The grace period before the dying steps: normal for classic,
    /// expedited for bolt.
    fn grace_period(&self, walk: &Walk<'_, WORDS>, rollback: bool) -> Result<(), PlatformError> {
        let operation = if walk.engine.is_bolt() {
            PlatformOperation::ExpeditedGracePeriod
        } else {
            PlatformOperation::GracePeriod
        };
        if let Some(cpu) = walk.platform_fault(operation, walk.targets, rollback) {
            return Err(Injector::platform_error(operation, cpu));
        }
        if walk.engine.is_bolt() {
            self.platform.synchronize_grace_period_expedited()
        } else {
            self.platform.synchronize_grace_period()
        }
    }

    /// Powers `targets` off; an injected failure stops every CPU and names
    /// one as late to report dead.
    fn power_off(
        &self,
        walk: &Walk<'_, WORDS>,
        targets: CpuMask<WORDS>,
        rollback: bool,
    ) -> Result<(), PlatformError> {
        let late = walk.platform_fault(PlatformOperation::PowerOff, targets, rollback);
        self.platform.power_off_many(targets)?;
        match late {
            Some(cpu) => Err(Injector::platform_error(PlatformOperation::PowerOff, cpu)),
            None => Ok(()),
        }
    }

    /// The `Starting` steps on `targets`: inside a stop-machine going
    /// down, as the platform brings the CPUs up going up (power on
    /// included, see [`Platform::bring_up`]); with each stage's end on
    /// the platform's clock, and the platform's failure if it had one.
    fn starting_section(
        &self,
        walk: &Walk<'_, WORDS>,
        targets: CpuMask<WORDS>,
        direction: Direction,
        rollback: bool,
    ) -> (
        CpuOutcomes,
        Vec<(&'static str, u64)>,
        Result<(), PlatformError>,
    ) {
        let reports: Mutex<R, CpuOutcomes> = Mutex::new(Vec::new());
        let work = |cpu: CpuId| {
            let outcomes =
                walk.run_on_cpu(&self.platform, cpu, Section::Starting, direction, rollback);
            reports.lock().push((cpu, outcomes));
        };
        // Each mark ends a stage at the clock's reading; the walk's laps
        // turn them into times, the first from where the last stage ended.
        let mut stages = Vec::new();
        let mut mark = |stage: &'static str| stages.push((stage, self.platform.now_ns()));
        let result = match direction {
            Direction::Up => {
                match walk.platform_fault(PlatformOperation::PowerOn, targets, rollback) {
                    // The others come up; this one never does.
                    Some(cpu) => {
                        let others = targets.difference(&CpuMask::single(cpu));
                        if !others.is_empty() {
                            let _ = self.platform.bring_up(others, &work, &mut mark);
                        }
                        Err(Injector::platform_error(PlatformOperation::PowerOn, cpu))
                    }
                    None => self.platform.bring_up(targets, &work, &mut mark),
                }
            }
            Direction::Down if walk.engine.stops_machine() => {
                let result =
                    match walk.platform_fault(PlatformOperation::StopMachine, targets, rollback) {
                        Some(cpu) => Err(Injector::platform_error(
                            PlatformOperation::StopMachine,
                            cpu,
                        )),
                        None => self.platform.stop_machine(targets, &work),
                    };
                mark("stop-machine");
                result
            }
            // No rendezvous: the platform hides the CPUs from its atomic
            // readers, drains those that saw them, and runs the steps on
            // the dying CPUs alone (its marks name those stages).
            Direction::Down => {
                match walk.platform_fault(PlatformOperation::RunDying, targets, rollback) {
                    Some(cpu) => {
                        let result =
                            Err(Injector::platform_error(PlatformOperation::RunDying, cpu));
                        mark("dying");
                        result
                    }
                    None => self.platform.run_dying(targets, &work, &mut mark),
                }
            }
        };
        (sorted(reports.into_inner()), stages, result)
    }
}
