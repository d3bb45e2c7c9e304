//! This kernel's part of the shared scheduler ([`hotkern_kernel::tasks`],
//! the run queues, placement, the slice loop and the books written once):
//! queue locks taken with interrupts off (handlers take them: the dying
//! step closes one), the ledger, which CPUs a task prefers, and waking the
//! CPU that took it.
//!
//! Tasks run in each CPU's worker thread (`kworker/N`, [`crate::platform::steps`]),
//! which its idle loop switches to while the CPU's queue holds tasks. A
//! slice runs with interrupts off, as a non-preemptible kernel section: a
//! stop-machine or a cross-CPU call waits for it to end. After a slice the
//! task goes back to its CPU's queue if that queue is open, else to an
//! active CPU's, as Linux's `sched_cpu_dying` migrates a dying CPU's tasks.
//! What a slice does is its task's body ([`crate::platform::task::Body`]).

use alloc::vec::Vec;
use core::sync::atomic::{AtomicU32, Ordering};

use hotkern_cpuhp::{CpuId, CpuSet};
use hotkern_kernel::rcu::Activity;
use hotkern_kernel::tasks::{Books, Interrupts, Scheduler, TaskBooks, TaskTally};

use crate::arch::cpu::MAX_CPUS;
use crate::arch::instructions;
use crate::arch::smp::BOOT_CPU;
use crate::platform::subsystems;
use crate::platform::task::{Body, Task};

/// Slices a CPU runs per turn of its idle loop before it looks at
/// interrupts again.
const SLICES_PER_TURN: usize = 4;

/// Queue and ledger locks, taken with interrupts off.
struct Cli;

impl Interrupts for Cli {
    fn without_interrupts<R>(section: impl FnOnce() -> R) -> R {
        instructions::without_interrupts(section)
    }
}

/// The shared scheduler and the books, made once the heap exists ([`boot`]).
static SCHEDULER: spin::Once<(Scheduler<Body, Cli>, Books<Cli>)> = spin::Once::new();

/// Where the next placement starts looking (round robin).
static NEXT: AtomicU32 = AtomicU32::new(0);

/// Makes the scheduler (needs the heap) with `running` online, active and
/// with open queues: the CPUs running at boot, before any hotplug step.
pub fn boot(running: CpuSet) {
    SCHEDULER.call_once(|| (Scheduler::new(MAX_CPUS), Books::default()));
    let masks = subsystems::subsystems();
    for cpu in running.iter() {
        masks.online.set(cpu, true);
        masks.active.set(cpu, true);
        open(cpu);
    }
}

/// Opens `cpu`'s queue (the `sched:active` startup).
#[hotkern_trace::function]
pub fn open(cpu: CpuId) {
    if let Some((scheduler, _)) = SCHEDULER.get() {
        scheduler.open(cpu);
    }
}

/// Closes `cpu`'s queue and returns its tasks, counted and traced as
/// migrating (the `sched:active` and `sched:starting` teardowns place
/// them through the shared policy).
#[hotkern_trace::function]
pub fn close(cpu: CpuId) -> Vec<Task> {
    let left = SCHEDULER
        .get()
        .map(|(s, _)| s.close(cpu))
        .unwrap_or_default();
    for task in &left {
        crate::platform::trace::sched_migrate_task::trace(task.id, cpu.0);
    }
    left
}

/// Puts `task` on `cpu`'s run queue if it is open, else gives it back.
#[hotkern_trace::function]
pub fn push(cpu: CpuId, task: Task) -> Result<(), Task> {
    match SCHEDULER.get() {
        Some((scheduler, _)) => scheduler.offer(cpu, task),
        None => Err(task),
    }
}

/// Places `task` by the shared policy: first an active application
/// processor other than `not` (round robin: CPU 0 runs the controller),
/// then the active CPUs after it, CPU 0 among them, wrapping round; the
/// limbo if none takes it. Wakes the CPU that took it.
#[hotkern_trace::function]
fn place(scheduler: &Scheduler<Body, Cli>, task: Task, not: Option<CpuId>) {
    let active = subsystems::active_mask();
    let others = not.map_or(CpuSet::EMPTY, CpuSet::single);
    let spread = active
        .difference(&CpuSet::single(BOOT_CPU))
        .difference(&others);
    let nth = NEXT.fetch_add(1, Ordering::Relaxed) as usize % spread.len().max(1);
    let preferred = spread.iter().nth(nth).unwrap_or(BOOT_CPU);
    // CPU 0's queue opened at boot and no step closes it: a candidate
    // always, the limbo only the shared policy's last resort.
    let candidates = spread.union(&CpuSet::single(BOOT_CPU));
    let limbo = &subsystems::subsystems().limbo;
    if let Some(cpu) = scheduler.place(preferred.index(), candidates, task, limbo) {
        crate::arch::smp::wake(cpu);
    }
}

/// Starts a task whose body `body` makes from its id, on an active CPU
/// (after [`boot`]).
#[hotkern_trace::function]
pub fn spawn(body: impl FnOnce(u64) -> Body) {
    let Some((scheduler, books)) = SCHEDULER.get() else {
        return;
    };
    let id = books.issue();
    place(scheduler, Task { id, body: body(id) }, None);
}

/// Runs up to a few slices from `cpu`'s queue, interrupts off for each;
/// returns whether any ran. Called by each CPU's worker (and by the
/// controlling CPU between operations).
pub fn run_slices(cpu: CpuId) -> bool {
    let Some((scheduler, books)) = SCHEDULER.get() else {
        return false;
    };
    let before = crate::arch::cpu::enter_activity(cpu, Activity::TaskSlice);
    let slice = |cpu, task: &mut Task| {
        let status = (task.body)(cpu);
        subsystems::count_slice(cpu);
        status
    };
    let elsewhere = |task| place(scheduler, task, Some(cpu));
    let ran = scheduler.run_slices(books, cpu, SLICES_PER_TURN, slice, elsewhere);
    crate::arch::cpu::enter_activity(cpu, before);
    ran > 0
}

/// Moves tasks waiting on CPU 0 to active application processors, keeping
/// a few: the controller runs CPU 0's queue only between operations.
#[hotkern_trace::function]
pub fn balance() {
    let Some((scheduler, _)) = SCHEDULER.get() else {
        return;
    };
    for task in scheduler.take_beyond(BOOT_CPU, SLICES_PER_TURN) {
        place(scheduler, task, Some(BOOT_CPU));
    }
}

/// The scheduler's books now: tasks issued, finished once or twice,
/// outstanding, slices run, tasks migrated.
pub fn tally() -> TaskTally {
    SCHEDULER
        .get()
        .map(|(s, books)| s.tally(books))
        .unwrap_or_default()
}

/// Tasks queued on `cpu`, and whether its queue is open.
pub fn queue_state(cpu: CpuId) -> (usize, bool) {
    SCHEDULER
        .get()
        .map_or((0, false), |(s, _)| s.queue_state(cpu))
}
