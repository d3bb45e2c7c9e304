//! Tasks on every CPU while CPUs come and go: per-CPU run queues served by
//! each CPU's idle loop, the masks hotplug steps flip, and the books that
//! say whether any task was lost, run twice, or ran where it must not.
//!
//! Tasks run in each CPU's worker thread (`kworker/N`, [`crate::platform::steps`]),
//! which its idle loop switches to while the CPU's queue holds tasks; the
//! `threads:create` hotplug step creates and destroys the workers (classic)
//! or keeps them (bolt).
//!
//! A task is slices of real work (a hash over its own state), run until the
//! controller [stops](stop) the tasks: each then finishes at its next
//! slice, so tasks run through every hotplug operation and none is still
//! waiting for CPU time when the books are closed.
//! A slice runs with interrupts off, as a non-preemptible kernel section:
//! a stop-machine or a cross-CPU call waits for the slice to end, so a
//! CPU's dying step never finds a slice half done. After a slice the task
//! goes back to its CPU's queue if that queue is open, else to an active
//! CPU's, as Linux's `sched_cpu_dying` migrates a dying CPU's tasks.
//!
//! Every eighth task is also a reader of the hotplug lock (Linux's
//! `cpus_read_lock`) while [`set_readers`] says so: it takes it on an
//! application processor, holds it until its next slice (across a whole
//! round of its CPU's queue), checks then that the online mask is the one
//! it saw, and gives it back. Never on CPU 0: the controller runs CPU 0's
//! queue only between operations, so a hold there would wait for the very
//! writer that waits for it.
//!
//! Who writes what: a queue is changed under its lock, always taken with
//! interrupts off (handlers take queue locks: the dying step closes one);
//! the online and active masks are written only by hotplug steps; the books
//! are written under their own lock by whoever finishes a task.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use hotkern_cpuhp::{CpuId, CpuSet};
use hotkern_kernel::cpuset::cpu_id;
use hotkern_kernel::ledger::{Item, Ledger};
use hotkern_kernel::rcu::Activity;
use hotkern_kernel::sched::RunQueue;
use hotkern_kernel::sync::Mutex;

use crate::arch::cpu::MAX_CPUS;
use crate::arch::instructions;
use crate::arch::smp::BOOT_CPU;
use crate::platform::subsystems::{self, online_mask};
use crate::platform::task::Task;

/// Slices a CPU runs per turn of its idle loop before it looks at
/// interrupts again.
const SLICES_PER_TURN: usize = 4;
/// Rounds of the hash per slice: a few microseconds under TCG.
const SLICE_ROUNDS: u32 = 512;

/// Slices a reader task holds the hotplug lock for.
const READ_HOLD_SLICES: u32 = 1;
/// How long a slice stays inside the atomic hotplug read side while long
/// readers are on ([`set_long_readers`]), in nanoseconds: longer than it
/// takes to hide a dying CPU and run its dying steps, so that a take-down
/// that did not wait for it clears the CPU from the online mask under it.
const READ_SIDE_HOLD_NS: u64 = 300_000;
/// Whether slices stay inside the atomic read side for
/// [`READ_SIDE_HOLD_NS`] now.
static LONG_READERS: AtomicBool = AtomicBool::new(false);
/// Whether reader tasks take the hotplug lock now.
static READERS: AtomicBool = AtomicBool::new(false);
/// Read holds of the hotplug lock given back.
static READ_HOLDS: AtomicU64 = AtomicU64::new(0);
/// Slices that found the online mask changed under a read hold: each one
/// is the lock broken.
static CHANGED_UNDER_HOLD: AtomicU64 = AtomicU64::new(0);
/// Slices that saw a CPU online inside the atomic hotplug read side and
/// found it gone before they left: each one is a dying CPU's steps run
/// under a reader (a drain skipped, or the steps on a CPU that did not
/// wait).
static LEFT_UNDER_READER: AtomicU64 = AtomicU64::new(0);

/// The shared kernel's structures, made once the heap exists ([`boot`]).
struct Scheduler {
    queues: Box<[Mutex<RunQueue<Task>>]>,
    /// Every task, and how many times it finished.
    ledger: Mutex<Ledger>,
}

static SCHEDULER: spin::Once<Scheduler> = spin::Once::new();

/// The scheduler, once [`boot`] made it.
fn scheduler() -> Option<&'static Scheduler> {
    SCHEDULER.get()
}

/// Where the next placement starts looking (round robin).
static NEXT: AtomicU32 = AtomicU32::new(0);

/// Slices that ran on a CPU outside the online mask: each one is an
/// invariant broken.
static RAN_OFFLINE: AtomicU64 = AtomicU64::new(0);
static SLICES: AtomicU64 = AtomicU64::new(0);
static MIGRATED: AtomicU64 = AtomicU64::new(0);
/// Set once: every task finishes at its next slice.
static STOPPING: AtomicBool = AtomicBool::new(false);
/// Slices whose page did not hold what they wrote (or got no page).
static PAGE_ERRORS: AtomicU64 = AtomicU64::new(0);

/// Makes the scheduler (needs the heap) with `running` online, active and
/// with open queues: the CPUs running at boot, before any hotplug step.
pub fn boot(running: CpuSet) {
    SCHEDULER.call_once(|| Scheduler {
        queues: (0..MAX_CPUS)
            .map(|_| Mutex::new(RunQueue::default()))
            .collect(),
        ledger: Mutex::new(Ledger::default()),
    });
    let masks = subsystems::subsystems();
    for cpu in running.iter() {
        masks.online.set(cpu, true);
        masks.active.set(cpu, true);
        open(cpu);
    }
}

/// `cpu`'s queue, locked with interrupts off (handlers take queue locks:
/// the dying step closes one), given to `f`.
fn with_queue<R>(cpu: CpuId, f: impl FnOnce(&mut RunQueue<Task>) -> R) -> Option<R> {
    let s = scheduler()?;
    Some(instructions::without_interrupts(|| {
        f(&mut s.queues[cpu.index()].lock())
    }))
}

/// Opens `cpu`'s queue (the `sched:active` startup).
#[hotkern_trace::function]
pub fn open(cpu: CpuId) {
    with_queue(cpu, RunQueue::open);
}

/// Closes `cpu`'s queue and returns its tasks, each counted and traced as
/// migrating (the `sched:active` and `sched:starting` teardowns, which
/// place them through the shared policy, [`hotkern_kernel::placement`]).
#[hotkern_trace::function]
pub fn close(cpu: CpuId) -> Vec<Task> {
    let left = with_queue(cpu, RunQueue::close).unwrap_or_default();
    MIGRATED.fetch_add(left.len() as u64, Ordering::Relaxed);
    for task in &left {
        crate::platform::trace::sched_migrate_task::trace(task.id, cpu.0);
    }
    left
}

/// Queues `task` on an active CPU other than `not` (round robin, CPU 0
/// last: it runs the controller), or on CPU 0, which never goes offline.
#[hotkern_trace::function]
fn place(mut task: Task, not: Option<CpuId>) {
    let active = subsystems::active_mask();
    let start = NEXT.fetch_add(1, Ordering::Relaxed) as usize;
    for offset in 0..MAX_CPUS {
        let cpu = cpu_id((start + offset) % MAX_CPUS);
        if cpu == BOOT_CPU || Some(cpu) == not || !active.contains(cpu) {
            continue;
        }
        match push(cpu, task) {
            Ok(()) => {
                crate::arch::smp::wake(cpu);
                return;
            }
            Err(back) => task = back,
        }
    }
    // CPU 0's queue opened at boot and no step closes it.
    if let Err(task) = push(BOOT_CPU, task) {
        panic!("task {} has nowhere to run", task.id);
    }
}

/// Puts `task` on `cpu`'s run queue if it is open, else gives it back.
#[hotkern_trace::function]
pub fn push(cpu: CpuId, task: Task) -> Result<(), Task> {
    match scheduler() {
        Some(s) => instructions::without_interrupts(|| s.queues[cpu.index()].lock().push(task)),
        None => Err(task),
    }
}

/// Starts `count` tasks, spread over the active CPUs (after [`boot`]).
#[hotkern_trace::function]
pub fn spawn(count: u32) {
    let Some(s) = scheduler() else { return };
    for _ in 0..count {
        let id = instructions::without_interrupts(|| s.ledger.lock().issue(Item::Task));
        let task = Task {
            id,
            state: id | 1,
            hold: None,
        };
        place(task, None);
    }
}

/// One slice of `task` on `cpu`; true once the task is done.
fn run_slice(cpu: CpuId, task: &mut Task) -> bool {
    if !online_mask().contains(cpu) {
        RAN_OFFLINE.fetch_add(1, Ordering::Relaxed);
    }
    // Each slice reads the online mask inside the atomic hotplug read
    // side, as a placement does, and checks it at the end: a CPU it saw
    // online must still be (bolt-nostop drains it before the dying steps;
    // a stop-machine cannot start while it runs, interrupts off).
    let reader = subsystems::subsystems().hotplug_read.enter(Some(cpu));
    let seen = reader.online(online_mask());
    for _ in 0..SLICE_ROUNDS {
        // xorshift64: work the optimiser cannot remove (the state is kept).
        task.state ^= task.state << 13;
        task.state ^= task.state >> 7;
        task.state ^= task.state << 17;
    }
    // Each slice also takes a page through its CPU's page cache, writes
    // it, reads it back and frees it, as the machine's tasks do.
    if !crate::platform::pages::touch(cpu, task.state) {
        PAGE_ERRORS.fetch_add(1, Ordering::Relaxed);
    }
    let gone = || !seen.difference(&online_mask()).is_empty();
    let mut left = gone();
    if cpu != BOOT_CPU && LONG_READERS.load(Ordering::Relaxed) {
        // Every slice on an application processor stays in long enough
        // to span a take-down.
        let until = crate::arch::tsc::nanos().saturating_add(READ_SIDE_HOLD_NS);
        while !left && crate::arch::tsc::nanos() < until {
            core::hint::spin_loop();
            left = gone();
        }
    }
    if left {
        LEFT_UNDER_READER.fetch_add(1, Ordering::Relaxed);
    }
    drop(reader);
    SLICES.fetch_add(1, Ordering::Relaxed);
    subsystems::count_slice(cpu);
    let stopping = STOPPING.load(Ordering::Relaxed);
    if task.id % 8 == 0 {
        read_the_online_mask(cpu, task, stopping);
    }
    stopping
}

/// A reader task's part of a slice: take the hotplug lock (on an
/// application processor), check the mask under it, or give it back.
fn read_the_online_mask(cpu: CpuId, task: &mut Task, stopping: bool) {
    match task.hold.take() {
        None if cpu != BOOT_CPU
            && !stopping
            && READERS.load(Ordering::Relaxed)
            && crate::platform::hotplug_lock::try_read() =>
        {
            task.hold = Some((online_mask(), READ_HOLD_SLICES));
        }
        None => {}
        Some((seen, left)) => {
            if online_mask() != seen {
                CHANGED_UNDER_HOLD.fetch_add(1, Ordering::Relaxed);
            }
            if left == 0 || stopping {
                crate::platform::hotplug_lock::read_unlock();
                READ_HOLDS.fetch_add(1, Ordering::Relaxed);
            } else {
                task.hold = Some((seen, left - 1));
            }
        }
    }
}

/// Lets reader tasks take the hotplug lock (or stops them; holds end at
/// the holder's next slice).
pub fn set_readers(on: bool) {
    READERS.store(on, Ordering::Relaxed);
}

/// Makes every task's slice on an application processor stay inside the
/// atomic hotplug read side across most of a take-down (or stops it): the
/// operations are slower, and a dying CPU's steps that do not wait for
/// readers are seen.
pub fn set_long_readers(on: bool) {
    LONG_READERS.store(on, Ordering::Relaxed);
}

/// Asks every task to finish at its next slice.
pub fn stop() {
    STOPPING.store(true, Ordering::Relaxed);
}

/// Runs up to a few slices from `cpu`'s queue, interrupts off for each;
/// returns whether any ran. Called by each CPU's idle loop (and by the
/// controlling CPU between operations).
pub fn run_slices(cpu: CpuId) -> bool {
    let Some(s) = scheduler() else { return false };
    let mut ran = false;
    let before = crate::arch::cpu::enter_activity(cpu, Activity::TaskSlice);
    for _ in 0..SLICES_PER_TURN {
        let done = instructions::without_interrupts(|| {
            let mut task = s.queues[cpu.index()].lock().pop()?;
            let finished = run_slice(cpu, &mut task);
            Some((task, finished))
        });
        let Some((task, finished)) = done else { break };
        ran = true;
        if finished {
            // The ledger counts a second completion itself (`tally`).
            let _ =
                instructions::without_interrupts(|| s.ledger.lock().complete(Item::Task, task.id));
        } else if let Err(task) = push(cpu, task) {
            place(task, Some(cpu));
        }
    }
    crate::arch::cpu::enter_activity(cpu, before);
    ran
}

/// Moves tasks waiting on CPU 0 to active application processors, keeping
/// a few: the controller runs CPU 0's queue only between operations.
#[hotkern_trace::function]
pub fn balance() {
    let mut extra = Vec::new();
    with_queue(BOOT_CPU, |queue| {
        while queue.len() > SLICES_PER_TURN {
            extra.extend(queue.pop());
        }
    });
    for task in extra {
        place(task, Some(BOOT_CPU));
    }
}

/// What happened to every task.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SchedTally {
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
    /// Slices that ran on a CPU outside the online mask.
    pub ran_offline: u64,
    /// Tasks moved off a dying CPU.
    pub migrated: u64,
    /// Slices whose page did not hold what they wrote, or got no page.
    pub page_errors: u64,
    /// Read holds of the hotplug lock given back.
    pub read_holds: u64,
    /// Slices that found the online mask changed under a read hold.
    pub changed_under_hold: u64,
    /// Slices that saw a CPU online inside the atomic read side and found
    /// it offline before they left.
    pub left_under_reader: u64,
}

/// The books now.
pub fn tally() -> SchedTally {
    let books =
        scheduler().map(|s| instructions::without_interrupts(|| s.ledger.lock().tally(Item::Task)));
    let books = books.unwrap_or_default();
    SchedTally {
        issued: books.issued,
        completed: books.completed_once,
        twice: books.completed_twice,
        outstanding: books.outstanding,
        slices: SLICES.load(Ordering::Relaxed),
        ran_offline: RAN_OFFLINE.load(Ordering::Relaxed),
        migrated: MIGRATED.load(Ordering::Relaxed),
        page_errors: PAGE_ERRORS.load(Ordering::Relaxed),
        read_holds: READ_HOLDS.load(Ordering::Relaxed),
        changed_under_hold: CHANGED_UNDER_HOLD.load(Ordering::Relaxed),
        left_under_reader: LEFT_UNDER_READER.load(Ordering::Relaxed),
    }
}

/// Tasks queued on `cpu`, and whether its queue is open.
pub fn queue_state(cpu: CpuId) -> (usize, bool) {
    with_queue(cpu, |queue| (queue.len(), queue.is_open())).unwrap_or((0, false))
}
