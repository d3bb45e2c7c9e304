//! One operation's walk over the step table: a private copy of the step
//! states, what the operation did (for rollback), what it deferred, and
//! its timed stages.

use alloc::vec::Vec;

use crate::cpu::{CpuId, CpuMask};
use crate::deferred::{pending, reached, Job};
use crate::error::Error;
use crate::hotplug::Engine;
use crate::invoke::{injected, invoke, Call, Injector, Registered};
use crate::platform::{Platform, PlatformError, PlatformOperation};
use crate::report::Stage;
use crate::states::StateTable;
use crate::step::{Class, Direction, Section, StepId};

/// What happened to one step on one CPU inside a parallel section.
pub(crate) enum Outcome {
    Ran(Result<(), Error>, u64),
    Deferred,
}

/// What each target reported, by CPU.
pub(crate) type CpuOutcomes = Vec<(CpuId, Vec<(StepId, Outcome)>)>;

/// One operation in progress, over a private copy of the step states.
pub(crate) struct Walk<'t, const WORDS: usize> {
    pub(crate) table: &'t [Registered<WORDS>],
    pub(crate) targets: CpuMask<WORDS>,
    pub(crate) engine: Engine,
    /// Undoing a bulk operation: callbacks are told `rollback`.
    pub(crate) undo: bool,
    pub(crate) injector: Injector,
    pub(crate) states: StateTable,
    /// Steps whose callback this operation ran, per CPU (what rollback undoes).
    pub(crate) touched: Vec<bool>,
    pub(crate) online: CpuMask<WORDS>,
    /// Targets that came up and ran their `Starting` steps (what rolling
    /// a bring-up back takes down).
    pub(crate) started: CpuMask<WORDS>,
    pub(crate) jobs: Vec<Job<WORDS>>,
    pub(crate) stages: Vec<Stage>,
    /// When the last of the engine's own stages ended (the platform's
    /// clock): the next one begins there, so that they tile the
    /// operation's time with no gap between them.
    pub(crate) lap: u64,
    /// Platform failures the operation went on through.
    pub(crate) failures: Vec<PlatformError>,
    pub(crate) warnings_atomic: u64,
    pub(crate) warnings_rollback: u64,
}

/// `section`'s steps in the order `direction` runs them. A table lists its
/// sections in order, so each is a contiguous range.
pub(crate) fn section_steps<const WORDS: usize>(
    table: &[Registered<WORDS>],
    section: Section,
    direction: Direction,
) -> impl Iterator<Item = StepId> {
    let lo = table.partition_point(|r| r.spec.section < section);
    let hi = table.partition_point(|r| r.spec.section <= section);
    let up = direction == Direction::Up;
    (lo..hi).map(move |i| StepId(if up { i } else { hi - 1 - (i - lo) } as u16))
}

impl<'t, const WORDS: usize> Walk<'t, WORDS> {
    /// `section`'s steps in the order `direction` runs them.
    pub(crate) fn steps(
        &self,
        section: Section,
        direction: Direction,
    ) -> impl Iterator<Item = StepId> + 't {
        section_steps(self.table, section, direction)
    }

    /// Whether `step` on `cpu` has work to do in `direction`.
    pub(crate) fn eligible(
        &self,
        cpu: CpuId,
        step: StepId,
        direction: Direction,
        rollback: bool,
    ) -> bool {
        self.states.at(cpu, step) == reached(direction.reverse())
            && (!rollback || self.touched[cpu.index() * self.table.len() + step.index()])
    }

    /// The CPU of `cpus` for which an injected failure of `operation`
    /// fires now; never while rolling back, as step failures.
    pub(crate) fn platform_fault(
        &self,
        operation: PlatformOperation,
        cpus: CpuMask<WORDS>,
        rollback: bool,
    ) -> Option<CpuId> {
        if rollback || self.undo {
            return None;
        }
        self.injector.platform_fires(operation, cpus)
    }

    pub(crate) fn defers(&self, step: StepId, rollback: bool) -> bool {
        self.engine.is_bolt()
            && !rollback
            && self.table[step.index()].spec.class == Class::Deferrable
    }

    pub(crate) fn call(&self, direction: Direction, rollback: bool) -> Call {
        Call {
            direction,
            reuse: self.engine.reuse(),
            deferred: false,
            rollback: rollback || self.undo,
        }
    }

    /// Ends the engine's stage `name` at `now`: it took the time since the
    /// last one ended, whatever ran in between.
    pub(crate) fn lap(&mut self, name: &'static str, now: u64) {
        let nanos = now.saturating_sub(self.lap);
        self.lap = now;
        self.stage(name, None, nanos);
    }

    /// Records `nanos` more for a stage on the controller's path.
    pub(crate) fn stage(&mut self, name: &'static str, step: Option<StepId>, nanos: u64) {
        self.record(name, step, nanos, false);
    }

    /// Records `nanos` more for a stage timed inside one of the engine's.
    pub(crate) fn nested_stage(&mut self, name: &'static str, step: Option<StepId>, nanos: u64) {
        self.record(name, step, nanos, true);
    }

    fn record(&mut self, name: &'static str, step: Option<StepId>, nanos: u64, nested: bool) {
        match self
            .stages
            .iter_mut()
            .find(|s| s.name == name && s.step == step)
        {
            Some(stage) => stage.nanos += nanos,
            None => self.stages.push(Stage {
                name,
                step,
                nanos,
                nested,
            }),
        }
    }

    pub(crate) fn defer(&mut self, step: StepId, direction: Direction, cpus: CpuMask<WORDS>) {
        for cpu in cpus {
            self.states.set(cpu, step, pending(direction));
        }
        match self
            .jobs
            .iter_mut()
            .find(|job| job.step == step && job.direction == direction)
        {
            Some(job) => job.cpus = job.cpus.union(&cpus),
            None => self.jobs.push(Job {
                id: 0,
                step,
                direction,
                cpus,
            }),
        }
    }

    /// Records that a callback ran (or, when rolling back, is assumed to
    /// have run: a failed undo cannot be undone in turn).
    pub(crate) fn ran(
        &mut self,
        step: StepId,
        direction: Direction,
        cpus: CpuMask<WORDS>,
        rollback: bool,
    ) {
        for cpu in cpus {
            self.states.set(cpu, step, reached(direction));
            if !rollback {
                self.touched[cpu.index() * self.table.len() + step.index()] = true;
            }
        }
    }

    /// Applies what the targets of a parallel section reported, in step
    /// order; returns the first failure in step order after applying everything
    /// that succeeded, so that rollback sees it.
    pub(crate) fn apply(
        &mut self,
        direction: Direction,
        rollback: bool,
        atomic: bool,
        reports: CpuOutcomes,
    ) -> Result<(), Error> {
        let mut first_error = None;
        for step in self.steps(
            if atomic {
                Section::Starting
            } else {
                Section::Online
            },
            direction,
        ) {
            let mut deferred = CpuMask::EMPTY;
            let mut nanos = 0;
            let mut ran_any = false;
            for (cpu, outcomes) in &reports {
                for (done, outcome) in outcomes {
                    if *done != step {
                        continue;
                    }
                    match outcome {
                        Outcome::Deferred => {
                            deferred.insert(*cpu);
                        }
                        Outcome::Ran(result, took) => {
                            nanos += took;
                            ran_any = true;
                            match result {
                                Ok(()) => {
                                    self.ran(step, direction, CpuMask::single(*cpu), rollback)
                                }
                                Err(_) if rollback => {
                                    self.warnings_rollback += 1;
                                    self.ran(step, direction, CpuMask::single(*cpu), rollback);
                                }
                                Err(_) if atomic => {
                                    // Starting/dying must not fail; go on as Linux does.
                                    self.warnings_atomic += 1;
                                    self.ran(step, direction, CpuMask::single(*cpu), rollback);
                                }
                                Err(error) => {
                                    if first_error.is_none() {
                                        first_error = Some(*error);
                                    }
                                }
                            }
                        }
                    }
                }
            }
            if !deferred.is_empty() {
                self.defer(step, direction, deferred);
            }
            if ran_any {
                // Inside the stop-machine, the bring-up or the run on the
                // targets, which the engine times as its own stages.
                self.nested_stage(self.table[step.index()].spec.name, Some(step), nanos);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Runs `section`'s steps for this CPU, stopping at the first failure.
    pub(crate) fn run_on_cpu(
        &self,
        platform: &(impl Platform<WORDS> + ?Sized),
        cpu: CpuId,
        section: Section,
        direction: Direction,
        rollback: bool,
    ) -> Vec<(StepId, Outcome)> {
        let mut outcomes = Vec::new();
        let cpus = CpuMask::single(cpu);
        for step in self.steps(section, direction) {
            if !self.eligible(cpu, step, direction, rollback) {
                continue;
            }
            let entry = &self.table[step.index()];
            let atomic = section == Section::Starting;
            if !rollback && !atomic && self.injector.fires(step, direction, cpus) {
                let call = self.call(direction, rollback);
                let error = injected(platform, entry, step, cpus, call);
                outcomes.push((step, Outcome::Ran(Err(error), 0)));
                break;
            }
            if self.defers(step, rollback) {
                outcomes.push((step, Outcome::Deferred));
                continue;
            }
            let (result, nanos) =
                invoke(platform, entry, step, cpus, self.call(direction, rollback));
            let failed = result.is_err();
            outcomes.push((step, Outcome::Ran(result, nanos)));
            if failed && !rollback && !atomic {
                break;
            }
        }
        outcomes
    }
}
