//! Online and offline operations: the walk through the sections, deferral,
//! aggregation, and rollback. `classic` and `bolt` share this walk; they
//! differ only in what is deferred, the reuse hint, and whether a set of
//! CPUs goes through it at once or one by one.

use alloc::vec;
use alloc::vec::Vec;

use lock_api::{Mutex, RawMutex};

use crate::cpu::{CpuId, CpuMask};
use crate::error::Error;
use crate::hotplug::{Engine, Hotplug, Inner};
use crate::invoke::{injected, invoke, Injector};
use crate::platform::{Platform, PlatformError, PlatformOperation};
use crate::report::{Report, Stage};
use crate::step::{Direction, Section};
use crate::walk::{CpuOutcomes, Walk};

mod starting;

impl<R: RawMutex + Sync, P: Platform<WORDS>, const WORDS: usize> Hotplug<R, P, WORDS> {
    /// Brings `cpu` online with the current engine.
    ///
    /// On failure the CPU is offline again, every step as before, and the
    /// error names the failing step.
    pub fn online(&self, cpu: CpuId) -> Result<Report<WORDS>, Error> {
        self.reconfigure(cpu_set(cpu)?, Direction::Up)
    }

    /// Takes `cpu` offline with the current engine. Refused for the last
    /// online CPU. On failure the CPU is online again, every step as before.
    pub fn offline(&self, cpu: CpuId) -> Result<Report<WORDS>, Error> {
        self.reconfigure(cpu_set(cpu)?, Direction::Down)
    }

    /// Brings every CPU of `cpus` online: one by one with `classic`, in one
    /// bulk operation with `bolt`. All or nothing: on failure every CPU of
    /// the set is offline again.
    pub fn online_many(&self, cpus: CpuMask<WORDS>) -> Result<Report<WORDS>, Error> {
        self.reconfigure(cpus, Direction::Up)
    }

    /// Takes every CPU of `cpus` offline (see [`online_many`](Self::online_many)).
    pub fn offline_many(&self, cpus: CpuMask<WORDS>) -> Result<Report<WORDS>, Error> {
        self.reconfigure(cpus, Direction::Down)
    }

    fn reconfigure(
        &self,
        cpus: CpuMask<WORDS>,
        direction: Direction,
    ) -> Result<Report<WORDS>, Error> {
        let _ops = self.ops.lock();
        let start = self.platform.now_ns();
        let engine = {
            let inner = self.inner.lock();
            if cpus.is_empty() {
                return Err(Error::EmptySet);
            }
            if let Some(cpu) = cpus.difference(&inner.possible).first() {
                return Err(Error::NoSuchCpu(cpu));
            }
            match direction {
                Direction::Up => {
                    if let Some(cpu) = cpus.intersection(&inner.online).first() {
                        return Err(Error::AlreadyOnline(cpu));
                    }
                }
                Direction::Down => {
                    if let Some(cpu) = cpus.difference(&inner.online).first() {
                        return Err(Error::AlreadyOffline(cpu));
                    }
                    if inner.online.difference(&cpus).is_empty() {
                        return Err(Error::LastCpu);
                    }
                }
            }
            inner.engine
        };
        let checked = self.platform.now_ns().saturating_sub(start);
        let mut report = match engine {
            Engine::Bolt | Engine::BoltNoStop => self.transition(cpus, direction, engine, false)?,
            Engine::Classic => {
                let mut total = Report {
                    engine,
                    direction,
                    cpus,
                    nanos: 0,
                    stages: Vec::new(),
                    deferred: 0,
                    cancelled: 0,
                    failures: Vec::new(),
                };
                let mut done: Vec<CpuId> = Vec::new();
                for cpu in cpus {
                    match self.transition(CpuMask::single(cpu), direction, engine, false) {
                        Ok(one) => {
                            merge(&mut total, one);
                            done.push(cpu);
                        }
                        Err(error) => {
                            for earlier in done.into_iter().rev() {
                                let undo = self.transition(
                                    CpuMask::single(earlier),
                                    direction.reverse(),
                                    engine,
                                    true,
                                );
                                if undo.is_err() {
                                    self.inner.lock().warnings.rollback_failures += 1;
                                }
                            }
                            return Err(error);
                        }
                    }
                }
                total
            }
        };
        report.nanos = self.platform.now_ns().saturating_sub(start);
        // Serialising with other operations and checking the request.
        report.stages.insert(
            0,
            Stage {
                name: "checks",
                step: None,
                nanos: checked,
                nested: false,
            },
        );
        let mut inner = self.inner.lock();
        for stage in &report.stages {
            if let Some(step) = stage.step {
                let time = &mut inner.times[step.index()];
                match direction {
                    Direction::Up => {
                        time.startup_nanos = Some(stage.nanos);
                        time.startup_deferred = false;
                    }
                    Direction::Down => {
                        time.teardown_nanos = Some(stage.nanos);
                        time.teardown_deferred = false;
                    }
                }
            }
        }
        drop(inner);
        Ok(report)
    }

    /// Moves `targets` (all in the right state) through every section.
    /// With `undo` (undoing part of a failed bulk operation), nothing is
    /// injected and callbacks are told they are rolling back.
    fn transition(
        &self,
        targets: CpuMask<WORDS>,
        direction: Direction,
        engine: Engine,
        undo: bool,
    ) -> Result<Report<WORDS>, Error> {
        let begun = self.platform.now_ns();
        let settled = self.settle_deferred(targets);
        let (table, states, online, armed, armed_platform) = {
            let inner = self.inner.lock();
            let (armed, armed_platform) = if undo {
                (None, None)
            } else {
                (inner.armed, inner.armed_platform)
            };
            (
                inner.table.clone(),
                inner.states.clone(),
                inner.online,
                armed,
                armed_platform,
            )
        };
        let touched = vec![false; table.len() * states.rows()];
        let mut walk = Walk {
            table: &table,
            targets,
            engine,
            undo,
            injector: Injector::new(armed, armed_platform),
            states: states.clone(),
            touched,
            online,
            started: CpuMask::EMPTY,
            jobs: Vec::new(),
            stages: Vec::new(),
            lap: begun,
            failures: Vec::new(),
            warnings_atomic: 0,
            warnings_rollback: 0,
        };
        if settled.finished > 0 {
            walk.stage("finish-deferred", None, settled.finish_nanos);
            walk.lap = walk.lap.saturating_add(settled.finish_nanos);
        }
        // The engine's own bookkeeping is on the path too: the copy of
        // the states this operation works on, and (below) their commit.
        walk.lap("snapshot", self.platform.now_ns());
        // Readers of the online mask that hold the hotplug lock finish
        // first; given back whatever the transition's outcome.
        let locked = HotplugLocked::take(&self.platform, &walk, engine.is_bolt());
        walk.lap("hotplug-lock", self.platform.now_ns());
        let sections = match direction {
            Direction::Up => [Section::Prepare, Section::Starting, Section::Online],
            Direction::Down => [Section::Online, Section::Starting, Section::Prepare],
        };
        // The sections rollback must undo, and why the walk stopped.
        let mut changed = 0;
        let mut failure = locked.as_ref().err().map(|error| Error::from(*error));
        if failure.is_none() {
            for section in sections {
                match self.run_section(&mut walk, section, direction, false) {
                    Ok(()) => changed += 1,
                    Err(stopped) => {
                        changed += usize::from(stopped.changed);
                        failure = Some(stopped.error);
                        break;
                    }
                }
            }
        }
        if let Some(error) = failure {
            for section in sections[..changed].iter().rev() {
                // Rolling back never fails: refusals are counted in `walk`.
                let _ = self.run_section(&mut walk, *section, direction.reverse(), true);
            }
            {
                let mut inner = self.inner.lock();
                for cpu in targets {
                    inner.states.copy_row(cpu, &states);
                }
                self.account(&mut inner, &walk);
            }
            self.requeue(settled.cancelled);
            return Err(error);
        }
        let deferred = walk.jobs.len();
        {
            let mut inner = self.inner.lock();
            for cpu in targets {
                inner.states.copy_row(cpu, &walk.states);
            }
            inner.online = walk.online;
            self.account(&mut inner, &walk);
            inner.queue.retain(|job| !job.cpus.is_empty());
            Self::enqueue(&mut inner, &walk.jobs);
        }
        walk.lap("commit", self.platform.now_ns());
        if deferred > 0 {
            self.platform.kick_deferred();
            walk.lap("kick-deferred", self.platform.now_ns());
        }
        drop(locked);
        walk.lap("hotplug-unlock", self.platform.now_ns());
        Ok(Report {
            engine,
            direction,
            cpus: targets,
            nanos: 0,
            stages: walk.stages,
            deferred,
            cancelled: Self::pairs(&settled.cancelled),
            failures: walk.failures,
        })
    }

    /// Adds what `walk` counted to the engine's warnings and disarms the
    /// injected failures that fired.
    fn account(&self, inner: &mut Inner<WORDS>, walk: &Walk<'_, WORDS>) {
        inner.warnings.atomic_failures += walk.warnings_atomic;
        inner.warnings.rollback_failures += walk.warnings_rollback;
        if walk.injector.has_fired() {
            inner.armed = None;
        }
        if walk.injector.platform_has_fired() {
            inner.armed_platform = None;
        }
    }

    fn run_section(
        &self,
        walk: &mut Walk<'_, WORDS>,
        section: Section,
        direction: Direction,
        rollback: bool,
    ) -> Result<(), Stopped> {
        match section {
            Section::Prepare => {
                // Its steps, and deferring the ones bolt defers, on the
                // controlling CPU: one stage, the steps nested in it.
                let result = self.run_prepare(walk, direction, rollback);
                walk.lap("prepare", self.platform.now_ns());
                result.map_err(Stopped::changed)
            }
            Section::Starting => self.run_starting(walk, direction, rollback),
            Section::Online => {
                // The hand-offs (post, wake, the target's switch to its
                // hotplug thread, the wake back) are on the path too.
                let (reports, platform) =
                    self.run_parallel(walk, Section::Online, direction, rollback);
                if !reports.is_empty() || platform.is_err() {
                    walk.lap("run-on", self.platform.now_ns());
                }
                let applied = walk.apply(direction, rollback, false, reports);
                walk.lap("outcomes", self.platform.now_ns());
                applied
                    .and(platform.map_err(Error::from))
                    .map_err(Stopped::changed)
            }
        }
    }

    /// `Prepare` steps run on the controlling CPU, once per step with every
    /// target that needs it (a singleton unless `bolt` does a bulk operation).
    fn run_prepare(
        &self,
        walk: &mut Walk<'_, WORDS>,
        direction: Direction,
        rollback: bool,
    ) -> Result<(), Error> {
        for step in walk.steps(Section::Prepare, direction) {
            let cpus: CpuMask<WORDS> = walk
                .targets
                .iter()
                .filter(|cpu| walk.eligible(*cpu, step, direction, rollback))
                .collect();
            if cpus.is_empty() {
                continue;
            }
            let entry = &walk.table[step.index()];
            if !rollback && walk.injector.fires(step, direction, cpus) {
                let call = walk.call(direction, rollback);
                return Err(injected(&self.platform, entry, step, cpus, call));
            }
            if walk.defers(step, rollback) {
                walk.defer(step, direction, cpus);
                continue;
            }
            let (result, nanos) = invoke(
                &self.platform,
                entry,
                step,
                cpus,
                walk.call(direction, rollback),
            );
            walk.nested_stage(entry.spec.name, Some(step), nanos);
            match result {
                Ok(()) => walk.ran(step, direction, cpus, rollback),
                Err(_) if rollback => {
                    walk.warnings_rollback += 1;
                    walk.ran(step, direction, cpus, rollback);
                }
                Err(error) => return Err(error),
            }
        }
        Ok(())
    }

    /// `Online` steps on every target's hotplug thread (in parallel when
    /// the platform can), with the platform's failure to reach one.
    fn run_parallel(
        &self,
        walk: &Walk<'_, WORDS>,
        section: Section,
        direction: Direction,
        rollback: bool,
    ) -> (CpuOutcomes, Result<(), PlatformError>) {
        let reports: Mutex<R, CpuOutcomes> = Mutex::new(Vec::new());
        let needed: CpuMask<WORDS> = walk
            .targets
            .iter()
            .filter(|cpu| {
                walk.steps(section, direction)
                    .any(|step| walk.eligible(*cpu, step, direction, rollback))
            })
            .collect();
        if needed.is_empty() {
            return (Vec::new(), Ok(()));
        }
        let work = |cpu: CpuId| {
            let outcomes = walk.run_on_cpu(&self.platform, cpu, section, direction, rollback);
            reports.lock().push((cpu, outcomes));
        };
        let unreached = walk.platform_fault(PlatformOperation::RunOn, needed, rollback);
        let reached = unreached.map_or(needed, |cpu| needed.difference(&CpuMask::single(cpu)));
        let mut result = match reached.len() {
            0 => Ok(()),
            1 => self
                .platform
                .run_on(reached.first().unwrap_or(CpuId(0)), &work),
            _ => self.platform.run_on_each(reached, &work),
        };
        if let Some(cpu) = unreached {
            result = result.and(Err(Injector::platform_error(PlatformOperation::RunOn, cpu)));
        }
        (sorted(reports.into_inner()), result)
    }
}

/// Why a section stopped, and whether it changed anything that rollback
/// must undo (a platform failure before any step ran did not).
struct Stopped {
    error: Error,
    changed: bool,
}

impl Stopped {
    fn changed(error: Error) -> Stopped {
        Stopped {
            error,
            changed: true,
        }
    }

    fn unchanged(error: Error) -> Stopped {
        Stopped {
            error,
            changed: false,
        }
    }
}

/// The hotplug lock's write side for one transition, given back when it
/// drops (on every return path of `transition`).
struct HotplugLocked<'a, P: Platform<WORDS>, const WORDS: usize>(&'a P);

impl<'a, P: Platform<WORDS>, const WORDS: usize> HotplugLocked<'a, P, WORDS> {
    fn take(
        platform: &'a P,
        walk: &Walk<'_, WORDS>,
        expedited: bool,
    ) -> Result<Self, PlatformError> {
        let operation = PlatformOperation::HotplugLock;
        if let Some(cpu) = walk.platform_fault(operation, walk.targets, false) {
            return Err(Injector::platform_error(operation, cpu));
        }
        platform.hotplug_lock(expedited)?;
        Ok(HotplugLocked(platform))
    }
}

impl<P: Platform<WORDS>, const WORDS: usize> Drop for HotplugLocked<'_, P, WORDS> {
    fn drop(&mut self) {
        self.0.hotplug_unlock();
    }
}

fn sorted(mut reports: CpuOutcomes) -> CpuOutcomes {
    reports.sort_by_key(|(cpu, _)| *cpu);
    reports
}

fn cpu_set<const WORDS: usize>(cpu: CpuId) -> Result<CpuMask<WORDS>, Error> {
    let set = CpuMask::single(cpu);
    if set.is_empty() {
        Err(Error::NoSuchCpu(cpu))
    } else {
        Ok(set)
    }
}

fn merge<const WORDS: usize>(total: &mut Report<WORDS>, one: Report<WORDS>) {
    for stage in one.stages {
        match total
            .stages
            .iter_mut()
            .find(|s| s.name == stage.name && s.step == stage.step)
        {
            Some(existing) => existing.nanos += stage.nanos,
            None => total.stages.push(stage),
        }
    }
    total.deferred += one.deferred;
    total.cancelled += one.cancelled;
    total.failures.extend(one.failures);
}
