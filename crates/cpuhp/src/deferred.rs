//! Deferred work (`bolt`): callbacks of deferrable steps that run after the
//! operation returned, on whatever thread calls [`Hotplug::run_deferred`].
//!
//! Race rule: when an operation starts on a CPU, its pending deferred
//! callbacks are **cancelled** — the step keeps the state it had before it
//! was deferred (a cancelled teardown leaves the step up, so the startup is
//! skipped and the kept structures are used as they are; a cancelled startup
//! leaves it down, so the teardown is skipped). A deferred callback already
//! running for that CPU is waited for before the operation touches anything.

use alloc::vec::Vec;

use lock_api::RawMutex;

use crate::cpu::CpuSet;
use crate::hotplug::{Hotplug, Inner, StepStatus};
use crate::invoke::{invoke, Call};
use crate::platform::Platform;
use crate::step::{Direction, Section, StepId};

/// One deferred callback: a step, a direction, and the CPUs it is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Job {
    /// Set when queued; a cancelled part keeps the id of its job.
    pub(crate) id: u64,
    pub(crate) step: StepId,
    pub(crate) direction: Direction,
    pub(crate) cpus: CpuSet,
}

pub(crate) fn pending(direction: Direction) -> StepStatus {
    match direction {
        Direction::Up => StepStatus::PendingStartup,
        Direction::Down => StepStatus::PendingTeardown,
    }
}

/// The state a step is in once a callback in `direction` has run.
pub(crate) fn reached(direction: Direction) -> StepStatus {
    match direction {
        Direction::Up => StepStatus::Up,
        Direction::Down => StepStatus::Down,
    }
}

impl<R: RawMutex + Sync, P: Platform> Hotplug<R, P> {
    /// Runs deferred callbacks until none is pending; returns how many jobs
    /// ran. The platform's worker calls this after
    /// [`Platform::kick_deferred`]. Safe to call from several threads: jobs
    /// run one at a time, in the order they were deferred. Deferred
    /// callbacks run on the calling thread with [`Context::deferred`](crate::Context::deferred) set.
    pub fn run_deferred(&self) -> usize {
        let mut ran = 0;
        loop {
            let _worker = self.worker.lock();
            let (job, table) = {
                let mut inner = self.inner.lock();
                let Some(job) = inner.queue.pop_front() else {
                    break;
                };
                if job.cpus.is_empty() {
                    // Cancelled entirely by an operation still in progress.
                    continue;
                }
                inner.running = Some(job);
                (job, inner.table.clone())
            };
            let entry = &table[job.step.index()];
            let call = Call {
                direction: job.direction,
                reuse: crate::step::Reuse::Yes,
                deferred: true,
                rollback: false,
            };
            let mut outcomes: Vec<(CpuSet, bool)> = Vec::new();
            let mut failures = Vec::new();
            let mut nanos = 0;
            let mut run = |cpus: CpuSet| {
                let (result, took) = invoke(&self.platform, entry, job.step, cpus, call);
                nanos += took;
                outcomes.push((cpus, result.is_ok()));
                if let Err(error) = result {
                    failures.push(error);
                }
            };
            if entry.spec.section == Section::Prepare {
                run(job.cpus);
            } else {
                job.cpus.iter().for_each(|cpu| run(CpuSet::single(cpu)));
            }
            let mut inner = self.inner.lock();
            inner.running = None;
            for (cpus, ok) in outcomes {
                // A failed deferred callback leaves the step where it was.
                let status = if ok {
                    reached(job.direction)
                } else {
                    reached(job.direction.reverse())
                };
                for cpu in cpus {
                    inner.states.set(cpu, job.step, status);
                }
            }
            inner.warnings.deferred_failures += failures.len() as u64;
            inner.deferred_failures.extend(failures);
            let time = &mut inner.times[job.step.index()];
            match job.direction {
                Direction::Up => {
                    time.startup_nanos = Some(nanos);
                    time.startup_deferred = true;
                }
                Direction::Down => {
                    time.teardown_nanos = Some(nanos);
                    time.teardown_deferred = true;
                }
            }
            ran += 1;
        }
        ran
    }

    /// Waits until every deferred callback has run (running the pending ones
    /// on the calling thread); returns how many jobs this call ran.
    pub fn flush_deferred(&self) -> usize {
        self.run_deferred()
    }

    /// Deferred jobs queued or running.
    pub fn pending_deferred(&self) -> usize {
        let inner = self.inner.lock();
        let queued = inner
            .queue
            .iter()
            .filter(|job| !job.cpus.is_empty())
            .count();
        queued + usize::from(inner.running.is_some())
    }

    /// Cancels the pending deferred work of `cpus` and waits for a running
    /// job that touches them. Returns the cancelled parts, to put back if
    /// the operation fails.
    pub(crate) fn cancel_deferred(&self, cpus: CpuSet) -> Vec<Job> {
        let mut cancelled = Vec::new();
        let mut inner = self.inner.lock();
        let inner_ref = &mut *inner;
        for job in inner_ref.queue.iter_mut() {
            let hit = job.cpus.intersection(&cpus);
            if hit.is_empty() {
                continue;
            }
            job.cpus = job.cpus.difference(&hit);
            for cpu in hit {
                inner_ref
                    .states
                    .set(cpu, job.step, reached(job.direction.reverse()));
            }
            cancelled.push(Job { cpus: hit, ..*job });
        }
        // An emptied job stays queued (and is skipped by the worker) so that
        // a failed operation can put the cancelled part back in place.
        while inner
            .running
            .is_some_and(|job| !job.cpus.intersection(&cpus).is_empty())
        {
            drop(inner);
            // The worker holds this lock for the whole job.
            drop(self.worker.lock());
            inner = self.inner.lock();
        }
        cancelled
    }

    /// Puts cancelled jobs back (the operation that cancelled them failed).
    /// If every job they came from is still queued, each part goes back
    /// into its job, exactly as before; otherwise (the worker has started
    /// on them) all parts go to the back in order, which keeps each CPU's
    /// deferred callbacks in order.
    pub(crate) fn requeue(&self, jobs: Vec<Job>) {
        if jobs.is_empty() {
            return;
        }
        {
            let mut inner = self.inner.lock();
            let all_queued = jobs
                .iter()
                .all(|part| inner.queue.iter().any(|job| job.id == part.id));
            for part in jobs {
                for cpu in part.cpus {
                    inner.states.set(cpu, part.step, pending(part.direction));
                }
                match inner.queue.iter_mut().find(|job| job.id == part.id) {
                    Some(job) if all_queued => job.cpus = job.cpus.union(&part.cpus),
                    _ => inner.queue.push_back(part),
                }
            }
        }
        self.platform.kick_deferred();
    }

    /// Queues an operation's deferred jobs, numbering them.
    pub(crate) fn enqueue(inner: &mut Inner, jobs: &[Job]) {
        for job in jobs {
            let id = inner.next_job;
            inner.next_job += 1;
            inner.queue.push_back(Job { id, ..*job });
        }
    }

    /// Counts the (CPU, step) pairs in `jobs`.
    pub(crate) fn pairs(jobs: &[Job]) -> usize {
        jobs.iter().map(|job| job.cpus.len()).sum()
    }
}
