//! Tasks on a bare-metal kernel: the shared scheduler ([`crate::tasks`])
//! with its queue locks taken interrupts off (handlers take queue locks:
//! the dying step closes one), placement that spreads tasks over the
//! active CPUs but the boot CPU (it runs the controller, which serves its
//! own queue only between operations), and each migration traced.
//!
//! A task runs in its CPU's `kworker` ([`super::steps`]), a few slices
//! per switch; after a slice it goes back to its CPU's queue if that
//! queue is open, else to another active CPU's, as Linux's
//! `sched_cpu_dying` migrates a dying CPU's tasks; what no CPU takes
//! waits in the limbo.

use alloc::vec::Vec;

use hotkern_cpuhp::{CpuId, CpuSet};

use super::{Arch, Body, Irqs, Kernel, Task};
use crate::kernel_trace::events::sched_migrate_task;
use crate::rcu::Activity;
use crate::sync::Ordering;
use crate::tasks::{Books, Scheduler, TaskBooks, TaskTally};

/// Slices a CPU runs per switch to its `kworker` before it looks at
/// interrupts again.
const SLICES_PER_TURN: usize = 4;

/// The scheduler and its books.
pub(super) type Parts<A> = (Scheduler<Body, Irqs<A>>, Books<Irqs<A>>);

impl<A: Arch> Kernel<A> {
    fn scheduler() -> Option<&'static Parts<A>> {
        A::state().scheduler.get()
    }

    /// Makes the scheduler (needs the heap) with `running` online, active
    /// and with open queues: the CPUs running at boot, before any hotplug
    /// step.
    pub fn boot_scheduler(running: CpuSet) {
        A::state()
            .scheduler
            .call_once(|| (Scheduler::new(A::MAX_CPUS), Books::default()));
        let masks = Self::mechanisms();
        for cpu in running.iter() {
            masks.online.set(cpu, true);
            masks.active.set(cpu, true);
            Self::open(cpu);
        }
    }

    /// Opens `cpu`'s queue (the `sched:active` startup).
    pub fn open(cpu: CpuId) {
        if let Some((scheduler, _)) = Self::scheduler() {
            scheduler.open(cpu);
        }
    }

    /// Closes `cpu`'s queue and returns its tasks, each traced as
    /// migrating (the `sched:active` and `sched:starting` teardowns place
    /// them through the shared policy).
    pub fn close(cpu: CpuId) -> Vec<Task> {
        let left = Self::scheduler()
            .map(|(scheduler, _)| scheduler.close(cpu))
            .unwrap_or_default();
        for task in &left {
            sched_migrate_task::trace(task.id, cpu.0);
        }
        left
    }

    /// Puts `task` on `cpu`'s queue if it is open, else gives it back.
    pub fn offer(cpu: CpuId, task: Task) -> Result<(), Task> {
        match Self::scheduler() {
            Some((scheduler, _)) => scheduler.offer(cpu, task),
            None => Err(task),
        }
    }

    /// Places `task` on an active CPU other than `not` and the boot CPU,
    /// round robin, the boot CPU among the candidates only as the last
    /// resort, and wakes it; what none takes waits in the limbo.
    fn place(scheduler: &Scheduler<Body, Irqs<A>>, task: Task, not: Option<CpuId>) {
        let others = not.map_or(CpuSet::EMPTY, CpuSet::single);
        let spread = Self::active_mask()
            .difference(&CpuSet::single(A::BOOT_CPU))
            .difference(&others);
        let next = A::state().next.fetch_add(1, Ordering::Relaxed);
        let preferred = spread
            .iter()
            .nth(next % spread.len().max(1))
            .unwrap_or(A::BOOT_CPU);
        let candidates = spread.union(&CpuSet::single(A::BOOT_CPU));
        let limbo = &Self::mechanisms().limbo;
        if let Some(cpu) = scheduler.place(preferred.index(), candidates, task, limbo) {
            Self::wake(cpu);
        }
    }

    /// Starts a task whose body `body(id)` makes, spread over the active
    /// CPUs (after [`Kernel::boot_scheduler`]).
    pub fn spawn(body: impl FnOnce(u64) -> Body) {
        let Some((scheduler, books)) = Self::scheduler() else {
            return;
        };
        let id = books.issue();
        Self::place(scheduler, Task { id, body: body(id) }, None);
    }

    /// Runs up to a few slices from `cpu`'s queue, interrupts off for
    /// each; returns whether any ran. `kworker`'s work, and the
    /// controller's on the boot CPU between operations.
    pub fn run_slices(cpu: CpuId) -> bool {
        let Some((scheduler, books)) = Self::scheduler() else {
            return false;
        };
        let before = A::enter_activity(cpu, Activity::TaskSlice);
        let slice = |cpu: CpuId, task: &mut Task| {
            let status = (task.body)(cpu);
            Self::mechanisms().vmstat.with(cpu.index(), |stats| {
                stats.slices.fetch_add(1, Ordering::Relaxed)
            });
            status
        };
        let elsewhere = |task| Self::place(scheduler, task, Some(cpu));
        let ran = scheduler.run_slices(books, cpu, SLICES_PER_TURN, slice, elsewhere);
        A::enter_activity(cpu, before);
        ran > 0
    }

    /// Moves tasks waiting on the boot CPU to active other CPUs, keeping
    /// a few: the controller runs its queue only between operations.
    pub fn balance() {
        let Some((scheduler, _)) = Self::scheduler() else {
            return;
        };
        for task in scheduler.take_beyond(A::BOOT_CPU, SLICES_PER_TURN) {
            Self::place(scheduler, task, Some(A::BOOT_CPU));
        }
    }

    /// What happened to every task.
    pub fn tally() -> TaskTally {
        Self::scheduler()
            .map(|(scheduler, books)| scheduler.tally(books))
            .unwrap_or_default()
    }

    /// Tasks queued on `cpu`, and whether its queue is open.
    pub fn queue_state(cpu: CpuId) -> (usize, bool) {
        Self::scheduler().map_or((0, false), |(scheduler, _)| scheduler.queue_state(cpu))
    }
}
