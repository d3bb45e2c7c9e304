//! The shared kernel's hotplug step table ([`hotkern_kernel::steps`]) on
//! real CPUs: the same sixteen steps and callbacks the user-mode machine
//! runs, over this kernel's instances of the shared mechanisms (timer
//! bases, workqueue pools, page caches, counters, scheduling domains, RCU
//! callback lists, the audit) and its own kernel threads.
//!
//! Each CPU has three kernel threads ([`Role`]): `kworker/N` runs the
//! CPU's tasks and work items, `ksoftirqd/N` its expired timers, `rcuc/N`
//! its RCU callbacks whose grace period ended. The idle loop switches to
//! each one that is unparked and has something to do ([`run_threads`]).
//! A thread of an offline CPU is suspended at a switch, so stopping one
//! asks it nothing: destroying it frees its stack.
//!
//! Not on bare metal: sysfs (the step keeps the set of CPUs whose nodes
//! would exist, for the audit) and per-CPU trace buffers made and freed
//! with the CPU (the rings are made at boot for every CPU; the step marks
//! which are in use).

use alloc::vec::Vec;

use hotkern_cpuhp::{CpuId, CpuSet};
use hotkern_kernel::cpuset::cpu_id;
use hotkern_kernel::kthread::Role;
use hotkern_kernel::pagecache::PageCaches;
use hotkern_kernel::steps::{table, StepDef, StepKernel, STEP_COUNT};
use hotkern_kernel::subsystems::Subsystems;

use crate::arch::apic;
use crate::arch::instructions;
use crate::arch::kthread::Kthread;
use crate::arch::smp;
use crate::arch::tsc;
use crate::platform::pages;
use crate::platform::rcu;
use crate::platform::sched;
use crate::platform::subsystems::{self, callbacks, subsystems, Job};
use crate::platform::task::Task;

/// Work items a worker runs per turn, so the CPU comes back to its loop.
const WORK_PER_TURN: usize = 16;

/// This kernel as the step table sees it.
pub struct Steps;

/// The table, in startup order (teardowns run in exact reverse).
pub const STEPS: [StepDef<Steps>; STEP_COUNT] = table();

/// The CPUs whose trace buffer is in use, and whose sysfs nodes would exist.
static TRACE_BUFFERS: spin::Mutex<CpuSet> = spin::Mutex::new(CpuSet::EMPTY);
static SYSFS: spin::Mutex<CpuSet> = spin::Mutex::new(CpuSet::EMPTY);

fn worker_body(thread: &Kthread) {
    sched::run_slices(thread.cpu);
    let work = &subsystems().workqueue;
    for _ in 0..WORK_PER_TURN {
        let Some(item) = instructions::without_interrupts(|| work.next(thread.cpu.index())) else {
            break;
        };
        (item.job)();
    }
}

fn softirq_body(thread: &Kthread) {
    let due = instructions::without_interrupts(|| {
        subsystems()
            .timers
            .take_due(thread.cpu.index(), tsc::nanos())
    });
    for timer in due {
        (timer.job)();
    }
}

fn rcu_body(thread: &Kthread) {
    subsystems::run_rcu_callbacks(thread.cpu);
}

/// Whether `cpu`'s thread `role` has something to do.
fn has_work(cpu: CpuId, role: Role) -> bool {
    let s = subsystems();
    let index = cpu.index();
    match role {
        Role::Worker => sched::queue_state(cpu).0 > 0 || s.workqueue.has_work(index),
        Role::Softirq => s.timers.has_due(index, tsc::nanos()),
        Role::RcuCallbacks => callbacks().has_ready(index, rcu::grace_periods()),
    }
}

/// Switches to each of `cpu`'s unparked threads that has something to do.
/// Called by the CPU's idle loop, interrupts off.
pub fn run_threads(cpu: CpuId) {
    if let Some(s) = subsystems::get() {
        s.kthreads
            .run_ready(cpu.index(), |role| has_work(cpu, role));
    }
}

fn body(role: Role) -> crate::arch::kthread::Body {
    match role {
        Role::Worker => worker_body,
        Role::Softirq => softirq_body,
        Role::RcuCallbacks => rcu_body,
    }
}

/// The set `mask` with `cpus` added (`add`) or taken out; returns the CPUs
/// that changed.
fn flip(mask: &spin::Mutex<CpuSet>, cpus: CpuSet, add: bool) -> CpuSet {
    let mut mask = mask.lock();
    let changed = if add {
        cpus.difference(&mask)
    } else {
        cpus.intersection(&mask)
    };
    *mask = if add {
        mask.union(&cpus)
    } else {
        mask.difference(&cpus)
    };
    changed
}

impl StepKernel for Steps {
    type Job = Job;
    type Task = Task;
    type Thread = Kthread;

    fn subsystems(&self) -> &Subsystems<Job, Task, Kthread> {
        subsystems()
    }

    fn pages(&self) -> Option<&PageCaches> {
        pages::get()
    }

    fn without_interrupts<R>(&self, f: impl FnOnce() -> R) -> R {
        instructions::without_interrupts(f)
    }

    fn open_queue(&self, cpu: usize) {
        sched::open(cpu_id(cpu));
    }

    fn close_queue(&self, cpu: usize) -> Vec<Task> {
        sched::close(cpu_id(cpu))
    }

    fn offer_task(&self, cpu: usize, task: Task) -> Result<(), Task> {
        sched::push(cpu_id(cpu), task)
    }

    /// CPU 0 runs the controller, which never halts while it operates.
    fn wake_cpu(&self, cpu: usize) {
        if cpu != 0 {
            smp::wake(cpu_id(cpu));
        }
    }

    fn rcu_set_online(&self, cpu: usize, online: bool) {
        rcu::set_online(cpu_id(cpu), online);
    }

    fn synchronize_rcu(&self) {
        subsystems::synchronize_rcu();
    }

    /// Queues `free` on the calling CPU's list, as `call_rcu` does, or on
    /// another online CPU's ([`subsystems::call_rcu`]).
    fn defer_free(&self, free: Job) {
        subsystems::call_rcu(free);
    }

    fn rcu_create_data(&self, cpu: usize) -> bool {
        let lists = callbacks();
        instructions::without_interrupts(|| lists.create(cpu))
    }

    fn rcu_migrate(&self, cpu: usize, heir: usize) {
        let lists = callbacks();
        if instructions::without_interrupts(|| lists.migrate(cpu, heir)) > 0 {
            smp::wake(cpu_id(heir));
        }
    }

    fn rcu_free_data(&self, cpu: usize) -> bool {
        let lists = callbacks();
        instructions::without_interrupts(|| lists.free(cpu))
    }

    fn is_powered(&self, cpu: usize) -> bool {
        smp::is_running(cpu_id(cpu))
    }

    fn queue_state(&self, cpu: usize) -> (usize, bool) {
        sched::queue_state(cpu_id(cpu))
    }

    fn rcu_is_online(&self, cpu: usize) -> bool {
        rcu::is_online(cpu_id(cpu))
    }

    fn rcu_queued(&self, cpu: usize) -> Option<usize> {
        let lists = callbacks();
        instructions::without_interrupts(|| lists.exists(cpu).then(|| lists.pending(cpu)))
    }

    fn spawn_kthread(&self, cpu: usize, role: Role) -> Option<Kthread> {
        Some(Kthread::new(role.name(), cpu_id(cpu), body(role)))
    }

    fn trace_buffer_create(&self, cpu: usize) -> bool {
        !flip(&TRACE_BUFFERS, CpuSet::single(cpu_id(cpu)), true).is_empty()
    }

    fn trace_buffer_retire(&self, cpu: usize, keep: bool) -> bool {
        let one = CpuSet::single(cpu_id(cpu));
        if keep {
            return TRACE_BUFFERS.lock().contains(cpu_id(cpu));
        }
        !flip(&TRACE_BUFFERS, one, false).is_empty()
    }

    fn sysfs_create(&self, cpus: CpuSet) -> CpuSet {
        flip(&SYSFS, cpus, true)
    }

    fn sysfs_remove(&self, cpus: CpuSet) -> CpuSet {
        flip(&SYSFS, cpus, false)
    }

    fn cpu_tick(&self, _cpu: usize, running: bool) {
        if running {
            apic::start_tick();
        } else {
            apic::stop_tick();
        }
    }
}
