//! Tasks on every CPU while CPUs come and go: per-CPU run queues served by
//! each CPU's idle loop, the masks hotplug steps flip, and the books that
//! say whether any task was lost, run twice, or ran where it must not.
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
//! Who writes what: a queue is changed under its lock, always taken with
//! interrupts off (handlers take queue locks: the dying step closes one);
//! the online and active masks are written only by hotplug steps; the books
//! are written under their own lock by whoever finishes a task.

use alloc::collections::VecDeque;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use hotkern_cpuhp::{CpuId, CpuSet};
use spin::Mutex;

use crate::arch;
use crate::cpu::MAX_CPUS;

/// Slices a CPU runs per turn of its idle loop before it looks at
/// interrupts again.
const SLICES_PER_TURN: usize = 4;
/// Rounds of the hash per slice: a few microseconds under TCG.
const SLICE_ROUNDS: u32 = 512;

/// A task: its ledger number and its state.
pub struct Task {
    id: u32,
    state: u64,
}

/// One CPU's run queue; it takes tasks only while open.
struct RunQueue {
    tasks: VecDeque<Task>,
    open: bool,
}

static QUEUES: [Mutex<RunQueue>; MAX_CPUS] = [const {
    Mutex::new(RunQueue {
        tasks: VecDeque::new(),
        open: false,
    })
}; MAX_CPUS];

/// Linux's `cpu_online_mask`: where anything may run.
static ONLINE: AtomicU64 = AtomicU64::new(0);
/// Linux's `cpu_active_mask`: where new and migrating tasks may go.
static ACTIVE: AtomicU64 = AtomicU64::new(0);
/// Where the next placement starts looking (round robin).
static NEXT: AtomicU32 = AtomicU32::new(0);

/// Slices that ran on a CPU outside the online mask or with its queue
/// closed: each one is an invariant broken.
static RAN_OFFLINE: AtomicU64 = AtomicU64::new(0);
static SLICES: AtomicU64 = AtomicU64::new(0);
static MIGRATED: AtomicU64 = AtomicU64::new(0);
/// Set once: every task finishes at its next slice.
static STOPPING: AtomicBool = AtomicBool::new(false);

/// Completions per task number.
static BOOKS: Mutex<Vec<u8>> = Mutex::new(Vec::new());

fn bit(cpu: u32) -> u64 {
    1 << cpu
}

fn mask(word: &AtomicU64) -> CpuSet {
    let bits = word.load(Ordering::SeqCst);
    (0..MAX_CPUS as u32)
        .filter(|&cpu| bits & bit(cpu) != 0)
        .map(CpuId)
        .collect()
}

/// The online mask.
pub fn online_mask() -> CpuSet {
    mask(&ONLINE)
}

/// The active mask.
pub fn active_mask() -> CpuSet {
    mask(&ACTIVE)
}

/// Puts `cpu` in or out of the online mask (the `sched:online-mask` step).
pub fn set_online(cpu: u32, online: bool) {
    if online {
        ONLINE.fetch_or(bit(cpu), Ordering::SeqCst);
    } else {
        ONLINE.fetch_and(!bit(cpu), Ordering::SeqCst);
    }
}

/// Puts `cpu` in or out of the active mask (the `sched:active` step).
pub fn set_active(cpu: u32, active: bool) {
    if active {
        ACTIVE.fetch_or(bit(cpu), Ordering::SeqCst);
    } else {
        ACTIVE.fetch_and(!bit(cpu), Ordering::SeqCst);
    }
}

/// The CPUs running at boot, before any hotplug step: online, active, with
/// open queues.
pub fn boot(cpus: CpuSet) {
    for cpu in cpus.iter() {
        set_online(cpu.0, true);
        set_active(cpu.0, true);
        open(cpu.0);
    }
}

/// Opens `cpu`'s queue (the `sched:starting` startup).
pub fn open(cpu: u32) {
    arch::without_interrupts(|| QUEUES[cpu as usize].lock().open = true);
}

/// Closes `cpu`'s queue and moves its tasks to active CPUs (the
/// `sched:starting` teardown, on the dying CPU inside stop-machine).
pub fn close_and_migrate(cpu: u32) {
    let left: Vec<Task> = arch::without_interrupts(|| {
        let mut queue = QUEUES[cpu as usize].lock();
        queue.open = false;
        queue.tasks.drain(..).collect()
    });
    MIGRATED.fetch_add(left.len() as u64, Ordering::Relaxed);
    for task in left {
        place(task, Some(cpu));
    }
}

/// Queues `task` on an active CPU other than `not` (round robin, CPU 0
/// last: it runs the controller), or on CPU 0, which never goes offline.
fn place(mut task: Task, not: Option<u32>) {
    let active = ACTIVE.load(Ordering::SeqCst);
    let start = NEXT.fetch_add(1, Ordering::Relaxed) as usize;
    for offset in 0..MAX_CPUS {
        let cpu = ((start + offset) % MAX_CPUS) as u32;
        if cpu == 0 || Some(cpu) == not || active & bit(cpu) == 0 {
            continue;
        }
        match push(cpu, task) {
            Ok(()) => {
                crate::smp::wake(cpu);
                return;
            }
            Err(back) => task = back,
        }
    }
    // CPU 0's queue opened at boot and no step closes it.
    if let Err(task) = push(0, task) {
        panic!("task {} has nowhere to run", task.id);
    }
}

fn push(cpu: u32, task: Task) -> Result<(), Task> {
    arch::without_interrupts(|| {
        let mut queue = QUEUES[cpu as usize].lock();
        if queue.open {
            queue.tasks.push_back(task);
            Ok(())
        } else {
            Err(task)
        }
    })
}

/// Starts `count` tasks, spread over the active CPUs; returns the first
/// task's number.
pub fn spawn(count: u32) -> u32 {
    let first = arch::without_interrupts(|| {
        let mut books = BOOKS.lock();
        let first = books.len() as u32;
        books.resize(first as usize + count as usize, 0);
        first
    });
    for id in first..first + count {
        place(
            Task {
                id,
                state: u64::from(id) | 1,
            },
            None,
        );
    }
    first
}

/// One slice of `task` on `cpu`; true once the task is done.
fn run_slice(cpu: u32, task: &mut Task) -> bool {
    if ONLINE.load(Ordering::SeqCst) & bit(cpu) == 0 {
        RAN_OFFLINE.fetch_add(1, Ordering::Relaxed);
    }
    for _ in 0..SLICE_ROUNDS {
        // xorshift64: work the optimiser cannot remove (the state is kept).
        task.state ^= task.state << 13;
        task.state ^= task.state >> 7;
        task.state ^= task.state << 17;
    }
    SLICES.fetch_add(1, Ordering::Relaxed);
    STOPPING.load(Ordering::Relaxed)
}

/// Asks every task to finish at its next slice.
pub fn stop() {
    STOPPING.store(true, Ordering::Relaxed);
}

/// Runs up to a few slices from `cpu`'s queue, interrupts off for each;
/// returns whether any ran. Called by each CPU's idle loop (and by the
/// controlling CPU between operations).
pub fn run_slices(cpu: u32) -> bool {
    let mut ran = false;
    for _ in 0..SLICES_PER_TURN {
        let done = arch::without_interrupts(|| {
            let mut task = QUEUES[cpu as usize].lock().tasks.pop_front()?;
            let finished = run_slice(cpu, &mut task);
            Some((task, finished))
        });
        let Some((task, finished)) = done else { break };
        ran = true;
        if finished {
            complete(task.id);
        } else if let Err(task) = push(cpu, task) {
            place(task, Some(cpu));
        }
    }
    ran
}

fn complete(id: u32) {
    arch::without_interrupts(|| {
        let mut books = BOOKS.lock();
        if let Some(count) = books.get_mut(id as usize) {
            *count = count.saturating_add(1);
        }
    });
}

/// Moves tasks waiting on CPU 0 to active application processors, keeping
/// a few: the controller runs CPU 0's queue only between operations.
pub fn balance() {
    let extra: Vec<Task> = arch::without_interrupts(|| {
        let mut queue = QUEUES[0].lock();
        let keep = SLICES_PER_TURN.min(queue.tasks.len());
        queue.tasks.drain(keep..).collect()
    });
    for task in extra {
        place(task, Some(0));
    }
}

/// What happened to every task.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
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
}

/// The books now.
pub fn tally() -> Tally {
    let mut tally = Tally {
        slices: SLICES.load(Ordering::Relaxed),
        ran_offline: RAN_OFFLINE.load(Ordering::Relaxed),
        migrated: MIGRATED.load(Ordering::Relaxed),
        ..Tally::default()
    };
    arch::without_interrupts(|| {
        for &count in BOOKS.lock().iter() {
            tally.issued += 1;
            match count {
                0 => tally.outstanding += 1,
                1 => tally.completed += 1,
                _ => tally.twice += 1,
            }
        }
    });
    tally
}

/// Tasks queued on `cpu`, and whether its queue is open.
pub fn queue_state(cpu: u32) -> (usize, bool) {
    arch::without_interrupts(|| {
        let queue = QUEUES[cpu as usize].lock();
        (queue.tasks.len(), queue.open)
    })
}
