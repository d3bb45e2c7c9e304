//! The task system, written once for both platforms: every CPU's
//! [`RunQueue`] behind the core's lock, opened and closed by the hotplug
//! steps, tasks placed by the one shared policy ([`crate::placement`]:
//! the CPU asked for, then the next candidates, then the [`Limbo`]), a
//! loop that runs a CPU's slices, and the counts that say whether a task
//! was lost, ran twice, or moved off a dying CPU.
//!
//! What stays each platform's is what a task *is* (its body `B`: the
//! machine's closure over a vCPU context, bare metal's closure over its
//! CPU), how a slice runs (catching a panic, recording an event, checking
//! the CPU is online: the closure given to [`Scheduler::run_slices`]),
//! which CPUs it prefers, and whether a queue's lock must be taken with
//! interrupts off ([`Interrupts`]: on bare metal a handler closes a dying
//! CPU's queue). The ledger is the platform's too ([`TaskBooks`]): the
//! machine's also counts work items and timers, and wakes its shutdown
//! when everything drained.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::marker::PhantomData;

use hotkern_cpuhp::{CpuId, CpuSet};

use crate::cpuset::cpu_id;
use crate::ledger::{Item, Ledger, Tally};
use crate::placement::{place, Limbo, Waiting};
pub use crate::sched::RunQueue;
use crate::sync::{AtomicU64, Mutex, Ordering};

/// What a task slice asks for when it returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskStatus {
    /// Run me again (on this CPU if it can still take me, else elsewhere).
    Again,
    /// I am finished.
    Done,
}

/// A task: its number in the ledger and what its slices run.
///
/// ```
/// use hotkern_kernel::tasks::{Task, TaskStatus};
///
/// let mut task = Task { id: 3, body: |slices: &mut u32| { *slices += 1; TaskStatus::Done } };
/// let mut slices = 0;
/// assert_eq!((task.body)(&mut slices), TaskStatus::Done);
/// assert_eq!((task.id, slices), (3, 1));
/// ```
pub struct Task<B> {
    /// Its number in the ledger ([`TaskBooks::issue`]).
    pub id: u64,
    /// What each slice runs: the platform's closure and its state.
    pub body: B,
}

/// How a platform keeps interrupt handlers off a lock they also take:
/// bare metal turns interrupts off around it (a dying CPU's queue is
/// closed from a handler), a platform whose handlers take no queue lock
/// runs the section plainly ([`Plain`]).
pub trait Interrupts {
    /// Runs `section` with this CPU's interrupts off.
    fn without_interrupts<R>(section: impl FnOnce() -> R) -> R;
}

/// A platform whose interrupt handlers (if any) take no queue lock.
///
/// ```
/// use hotkern_kernel::tasks::{Interrupts, Plain};
/// assert_eq!(Plain::without_interrupts(|| 7), 7);
/// ```
pub struct Plain;

impl Interrupts for Plain {
    fn without_interrupts<R>(section: impl FnOnce() -> R) -> R {
        section()
    }
}

/// The platform's ledger of tasks: numbers new tasks, and is told when
/// one finished. [`Books`] is one for a platform that keeps its tasks'
/// ledger apart; the machine's ledger also counts its other deferred
/// items.
pub trait TaskBooks {
    /// Records a new task; its id.
    fn issue(&self) -> u64;
    /// Records that task `id` finished; false if it had finished before
    /// (or was never issued).
    fn complete(&self, id: u64) -> bool;
    /// The tasks' counts.
    fn tally(&self) -> Tally;
}

/// A ledger of tasks alone, behind the core's lock, taken as `I` says
/// (with interrupts off on bare metal, like the queues').
///
/// ```
/// use hotkern_kernel::tasks::{Books, Plain, TaskBooks};
///
/// let books: Books<Plain> = Books::default();
/// let id = books.issue();
/// assert!(books.complete(id), "first completion");
/// assert!(!books.complete(id), "ran twice");
/// assert_eq!(books.tally().completed_twice, 1);
/// ```
pub struct Books<I = Plain> {
    ledger: Mutex<Ledger>,
    interrupts: PhantomData<fn() -> I>,
}

impl<I> Default for Books<I> {
    fn default() -> Self {
        Books {
            ledger: Mutex::new(Ledger::default()),
            interrupts: PhantomData,
        }
    }
}

impl<I: Interrupts> TaskBooks for Books<I> {
    fn issue(&self) -> u64 {
        I::without_interrupts(|| self.ledger.lock().issue(Item::Task))
    }

    fn complete(&self, id: u64) -> bool {
        I::without_interrupts(|| self.ledger.lock().complete(Item::Task, id).first)
    }

    fn tally(&self) -> Tally {
        I::without_interrupts(|| self.ledger.lock().tally(Item::Task))
    }
}

/// What happened to every task: the ledger's counts and the scheduler's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TaskTally {
    /// Tasks started.
    pub issued: u64,
    /// Tasks finished exactly once.
    pub completed: u64,
    /// Tasks finished more than once.
    pub twice: u64,
    /// Tasks not finished.
    pub outstanding: u64,
    /// Slices run.
    pub slices: u64,
    /// Tasks a closing queue handed over, to be placed elsewhere.
    pub migrated: u64,
}

/// Every CPU's run queue, and the counts of slices run and tasks moved.
/// `B` is a task's body; `I` says how the queues' locks are taken.
///
/// ```
/// use hotkern_cpuhp::{CpuId, CpuSet};
/// use hotkern_kernel::placement::Limbo;
/// use hotkern_kernel::tasks::{Books, Plain, Scheduler, Task, TaskStatus};
///
/// let books: Books = Books::default();
/// let limbo: Limbo<(), Task<u32>> = Limbo::new();
/// let scheduler: Scheduler<u32, Plain> = Scheduler::new(2);
/// scheduler.open(CpuId(1));
/// // CPU 0 is closed: the task goes to CPU 1, after it.
/// let (_, cpu) = scheduler.spawn(&books, 0, CpuSet::range(0, 2), |_| 2, &limbo);
/// assert_eq!(cpu, Some(CpuId(1)));
/// // Two slices: the body counts down.
/// let run = |_: CpuId, task: &mut Task<u32>| {
///     task.body -= 1;
///     if task.body == 0 { TaskStatus::Done } else { TaskStatus::Again }
/// };
/// assert_eq!(scheduler.run_slices(&books, CpuId(1), 4, run, |_| unreachable!()), 2);
/// let tally = scheduler.tally(&books);
/// assert_eq!((tally.completed, tally.slices, tally.outstanding), (1, 2, 0));
/// ```
pub struct Scheduler<B, I = Plain> {
    queues: Box<[Mutex<RunQueue<Task<B>>>]>,
    slices: AtomicU64,
    migrated: AtomicU64,
    interrupts: PhantomData<fn() -> I>,
}

impl<B, I: Interrupts> Scheduler<B, I> {
    /// Closed, empty queues for CPUs `0..cpus`.
    pub fn new(cpus: usize) -> Self {
        Scheduler {
            queues: (0..cpus).map(|_| Mutex::new(RunQueue::default())).collect(),
            slices: AtomicU64::new(0),
            migrated: AtomicU64::new(0),
            interrupts: PhantomData,
        }
    }

    /// `cpu`'s queue, locked (interrupts off where [`Interrupts`] says so),
    /// given to `f`; `None` for a CPU beyond the scheduler's.
    fn with_queue<R>(&self, cpu: CpuId, f: impl FnOnce(&mut RunQueue<Task<B>>) -> R) -> Option<R> {
        let queue = self.queues.get(cpu.index())?;
        Some(I::without_interrupts(|| f(&mut queue.lock())))
    }

    /// Opens `cpu`'s queue to tasks (the `sched:active` startup).
    pub fn open(&self, cpu: CpuId) {
        self.with_queue(cpu, RunQueue::open);
    }

    /// Closes `cpu`'s queue and hands over its tasks, each counted as
    /// migrated (the `sched:active` and `sched:starting` teardowns, which
    /// place them elsewhere).
    pub fn close(&self, cpu: CpuId) -> Vec<Task<B>> {
        let left = self.with_queue(cpu, RunQueue::close).unwrap_or_default();
        self.migrated
            .fetch_add(left.len() as u64, Ordering::Relaxed);
        left
    }

    /// Queues `task` on `cpu` if its queue is open, else gives it back.
    pub fn offer(&self, cpu: CpuId, task: Task<B>) -> Result<(), Task<B>> {
        match self.queues.get(cpu.index()) {
            Some(queue) => I::without_interrupts(|| queue.lock().push(task)),
            None => Err(task),
        }
    }

    /// Places `task` by the shared policy ([`place`]): `preferred`, then
    /// each CPU of `candidates` after it, wrapping round; the CPU that
    /// took it (the caller wakes it), or `None` once it waits in `limbo`
    /// for a CPU to become active.
    pub fn place<J>(
        &self,
        preferred: usize,
        candidates: CpuSet,
        task: Task<B>,
        limbo: &Limbo<J, Task<B>>,
    ) -> Option<CpuId> {
        let taken = place(preferred, candidates, task, |cpu, task| {
            self.offer(cpu_id(cpu), task)
        });
        match taken {
            Ok(cpu) => Some(cpu_id(cpu)),
            Err(task) => {
                limbo.keep(Waiting::Task(task));
                None
            }
        }
    }

    /// Starts a task: numbers it in `books`, makes its body from its id
    /// and [places](Self::place) it. Returns its id and the CPU that took
    /// it.
    pub fn spawn<J>(
        &self,
        books: &impl TaskBooks,
        preferred: usize,
        candidates: CpuSet,
        body: impl FnOnce(u64) -> B,
        limbo: &Limbo<J, Task<B>>,
    ) -> (u64, Option<CpuId>) {
        let id = books.issue();
        let task = Task { id, body: body(id) };
        (id, self.place(preferred, candidates, task, limbo))
    }

    /// Runs up to `most` slices from `cpu`'s queue, each by `slice`, taken
    /// off the queue and run in one section with interrupts off where
    /// [`Interrupts`] says so (a stop-machine then never finds a slice
    /// half done). A finished task is completed in `books`; one that asks
    /// to run again goes back to `cpu`'s queue if it is still open, else
    /// to `elsewhere` (which places it). Returns the slices run.
    pub fn run_slices(
        &self,
        books: &impl TaskBooks,
        cpu: CpuId,
        most: usize,
        mut slice: impl FnMut(CpuId, &mut Task<B>) -> TaskStatus,
        mut elsewhere: impl FnMut(Task<B>),
    ) -> usize {
        let Some(queue) = self.queues.get(cpu.index()) else {
            return 0;
        };
        let mut ran = 0;
        while ran < most {
            let turn = I::without_interrupts(|| {
                let mut task = queue.lock().pop()?;
                let status = slice(cpu, &mut task);
                Some((task, status))
            });
            let Some((task, status)) = turn else { break };
            ran += 1;
            self.slices.fetch_add(1, Ordering::Relaxed);
            match status {
                // A second completion is the ledger's to count (`tally`).
                TaskStatus::Done => {
                    books.complete(task.id);
                }
                TaskStatus::Again => {
                    if let Err(task) = self.offer(cpu, task) {
                        elsewhere(task);
                    }
                }
            }
        }
        ran
    }

    /// Takes the tasks queued first on `cpu` until `keep` are left, for
    /// the caller to place elsewhere (balancing a CPU that runs its queue
    /// only now and then: the ones waiting longest move).
    pub fn take_beyond(&self, cpu: CpuId, keep: usize) -> Vec<Task<B>> {
        let mut extra = Vec::new();
        self.with_queue(cpu, |queue| {
            while queue.len() > keep {
                extra.extend(queue.pop());
            }
        });
        extra
    }

    /// Tasks queued on `cpu`, and whether its queue is open.
    pub fn queue_state(&self, cpu: CpuId) -> (usize, bool) {
        self.with_queue(cpu, |queue| (queue.len(), queue.is_open()))
            .unwrap_or((0, false))
    }

    /// The books now: `books`' counts of tasks, and the slices run and
    /// tasks migrated here.
    pub fn tally(&self, books: &impl TaskBooks) -> TaskTally {
        let counts = books.tally();
        TaskTally {
            issued: counts.issued,
            completed: counts.completed_once,
            twice: counts.completed_twice,
            outstanding: counts.outstanding,
            slices: self.slices.load(Ordering::Relaxed),
            migrated: self.migrated.load(Ordering::Relaxed),
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests;
