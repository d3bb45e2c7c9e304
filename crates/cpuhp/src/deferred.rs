//! Deferred work (`bolt`): callbacks of deferrable steps that run after the
//! operation returned, on whatever thread calls [`Hotplug::run_deferred`].
//!
//! Race rules, applied when an operation starts on a CPU that still has
//! deferred callbacks pending:
//!
//! * a pending **teardown** (the CPU went offline and now comes back) is
//!   **cancelled**: the step stays up, its startup is skipped, and the kept
//!   structures are used as they are. Nothing ran on the CPU while it was
//!   offline, so they are exactly as the critical teardowns left them.
//! * a pending **startup** (the CPU came online and now goes away) is
//!   **completed** first, on the calling thread, and the step is then torn
//!   down like any other: the CPU ran in between and may have used the
//!   step's structures, so skipping both calls could leave state behind.
//!
//! A deferred callback already running for that CPU is waited for, and
//! none touching the CPU runs while the operation is in progress.

use alloc::sync::Arc;
use alloc::vec::Vec;

use lock_api::RawMutex;

use crate::cpu::CpuMask;
use crate::error::Error;
use crate::hotplug::{Hotplug, Inner};
use crate::invoke::{invoke, Call, Registered};
use crate::platform::Platform;
use crate::states::StepStatus;
use crate::step::{Direction, Reuse, Section, StepId};

/// One deferred callback: a step, a direction, and the CPUs it is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Job<const WORDS: usize> {
    /// Set when queued; a cancelled part keeps the id of its job.
    pub(crate) id: u64,
    pub(crate) step: StepId,
    pub(crate) direction: Direction,
    pub(crate) cpus: CpuMask<WORDS>,
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

/// What running one job did.
struct Executed<const WORDS: usize> {
    /// Each call's CPUs and whether it succeeded.
    outcomes: Vec<(CpuMask<WORDS>, bool)>,
    failures: Vec<Error>,
    nanos: u64,
}

/// Deferred work settled at the start of an operation.
pub(crate) struct Settled<const WORDS: usize> {
    /// Cancelled teardowns, to put back if the operation fails.
    pub(crate) cancelled: Vec<Job<WORDS>>,
    /// Pending startups completed, and the time they took.
    pub(crate) finished: usize,
    pub(crate) finish_nanos: u64,
}

impl<R: RawMutex + Sync, P: Platform<WORDS>, const WORDS: usize> Hotplug<R, P, WORDS> {
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
                    // Taken over entirely by an operation.
                    continue;
                }
                inner.running = Some(job);
                (job, inner.table.clone())
            };
            let executed = self.execute(&table, job);
            let mut inner = self.inner.lock();
            inner.running = None;
            record(&mut inner, job, executed);
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

    /// Calls `job`'s callback: once with the whole set for a `Prepare`
    /// step, once per CPU otherwise.
    fn execute(&self, table: &[Registered<WORDS>], job: Job<WORDS>) -> Executed<WORDS> {
        let entry = &table[job.step.index()];
        let call = Call {
            direction: job.direction,
            reuse: Reuse::Yes,
            deferred: true,
            rollback: false,
        };
        let mut executed = Executed {
            outcomes: Vec::new(),
            failures: Vec::new(),
            nanos: 0,
        };
        let mut run = |cpus: CpuMask<WORDS>| {
            let (result, took) = invoke(&self.platform, entry, job.step, cpus, call);
            executed.nanos += took;
            executed.outcomes.push((cpus, result.is_ok()));
            if let Err(error) = result {
                executed.failures.push(error);
            }
        };
        if entry.spec.section == Section::Prepare {
            run(job.cpus);
        } else {
            job.cpus.iter().for_each(|cpu| run(CpuMask::single(cpu)));
        }
        executed
    }

    /// Settles the deferred work of `cpus` before an operation on them:
    /// cancels pending teardowns, completes pending startups, and waits for
    /// a running job that touches them. See the module's race rules.
    pub(crate) fn settle_deferred(&self, cpus: CpuMask<WORDS>) -> Settled<WORDS> {
        let mut cancelled = Vec::new();
        let mut finish = Vec::new();
        let table: Arc<Vec<Registered<WORDS>>>;
        {
            let mut inner = self.inner.lock();
            let inner_ref = &mut *inner;
            for job in inner_ref.queue.iter_mut() {
                let hit = job.cpus.intersection(&cpus);
                if hit.is_empty() {
                    continue;
                }
                // An emptied job stays queued (the worker skips it) so that a
                // failed operation can put a cancelled part back in place.
                job.cpus = job.cpus.difference(&hit);
                let part = Job { cpus: hit, ..*job };
                match job.direction {
                    Direction::Down => {
                        for cpu in hit {
                            inner_ref.states.set(cpu, job.step, StepStatus::Up);
                        }
                        cancelled.push(part);
                    }
                    Direction::Up => finish.push(part),
                }
            }
            while inner
                .running
                .is_some_and(|job| !job.cpus.intersection(&cpus).is_empty())
            {
                drop(inner);
                // The worker holds this lock for the whole job.
                drop(self.worker.lock());
                inner = self.inner.lock();
            }
            table = inner.table.clone();
        }
        let start = self.platform.now_ns();
        if !finish.is_empty() {
            // Jobs run one at a time, whoever runs them.
            let _worker = self.worker.lock();
            for part in &finish {
                let executed = self.execute(&table, *part);
                record(&mut self.inner.lock(), *part, executed);
            }
        }
        Settled {
            cancelled,
            finished: finish.len(),
            finish_nanos: if finish.is_empty() {
                0
            } else {
                self.platform.now_ns().saturating_sub(start)
            },
        }
    }

    /// Puts cancelled jobs back (the operation that cancelled them failed).
    /// If every job they came from is still queued, each part goes back
    /// into its job, exactly as before; otherwise (the worker has started
    /// on them) all parts go to the back in order, which keeps each CPU's
    /// deferred callbacks in order.
    pub(crate) fn requeue(&self, jobs: Vec<Job<WORDS>>) {
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
    pub(crate) fn enqueue(inner: &mut Inner<WORDS>, jobs: &[Job<WORDS>]) {
        for job in jobs {
            let id = inner.next_job;
            inner.next_job += 1;
            inner.queue.push_back(Job { id, ..*job });
        }
    }

    /// Counts the (CPU, step) pairs in `jobs`.
    pub(crate) fn pairs(jobs: &[Job<WORDS>]) -> usize {
        jobs.iter().map(|job| job.cpus.len()).sum()
    }
}

/// Applies a job's outcome: a failed deferred callback leaves the step
/// where it was before it was deferred.
fn record<const WORDS: usize>(
    inner: &mut Inner<WORDS>,
    job: Job<WORDS>,
    executed: Executed<WORDS>,
) {
    for (cpus, ok) in executed.outcomes {
        let status = if ok {
            reached(job.direction)
        } else {
            reached(job.direction.reverse())
        };
        for cpu in cpus {
            inner.states.set(cpu, job.step, status);
        }
    }
    inner.warnings.deferred_failures += executed.failures.len() as u64;
    inner.deferred_failures.extend(executed.failures);
    let time = &mut inner.times[job.step.index()];
    match job.direction {
        Direction::Up => {
            time.startup_nanos = Some(executed.nanos);
            time.startup_deferred = true;
        }
        Direction::Down => {
            time.teardown_nanos = Some(executed.nanos);
            time.teardown_deferred = true;
        }
    }
}
