//! The shared kernel's hotplug step table ([`hotkern_kernel::steps`]) on
//! real CPUs: the same sixteen steps and callbacks the user-mode machine
//! runs, over this kernel's instances of the shared mechanisms (timer
//! bases, workqueue pools, page caches, counters, scheduling domains, RCU
//! callback lists, the audit) and its own kernel threads.
//!
//! Each CPU has three kernel threads ([`Role`]): `kworker/N` runs the
//! CPU's tasks and work items, `ksoftirqd/N` its expired timers, `rcuc/N`
//! its RCU callbacks whose grace period ended; what each does is the
//! shared core's ([`hotkern_kernel::smpboot`]), over this kernel's part
//! of it ([`KthreadKernel`]). The idle loop switches to each one that is
//! unparked and has something to do ([`run_threads`]).
//! A thread of an offline CPU is suspended at a switch, so stopping one
//! asks it nothing: destroying it frees its stack.
//!
//! Not on bare metal: sysfs (the step keeps the set of CPUs whose nodes
//! would exist, for the audit) and per-CPU trace buffers made and freed
//! with the CPU (the rings are made at boot for every CPU; the step marks
//! which are in use).

use alloc::vec::Vec;

use hotkern_cpuhp::{CpuId, CpuSet};
use hotkern_kernel::kthread::Role;
use hotkern_kernel::ledger::Item;
use hotkern_kernel::pagecache::PageCaches;
use hotkern_kernel::rcu::caller_driven::CallerDriven;
use hotkern_kernel::smpboot::{self, KthreadKernel};
use hotkern_kernel::steps::{table, StepDef, StepKernel, STEP_COUNT};
use hotkern_kernel::subsystems::Subsystems;
use hotkern_kernel::tick::Hz;

use crate::arch::apic;
use crate::arch::instructions;
use crate::arch::kthread::{Body, Kthread};
use crate::arch::smp;
use crate::arch::tsc;
use crate::platform::cpus::KernelCpus;
use crate::platform::pages;
use crate::platform::rcu;
use crate::platform::sched;
use crate::platform::subsystems::{self, subsystems, Job, Steps};
use crate::platform::task::Task;

/// The table, in startup order (teardowns run in exact reverse).
pub const STEPS: [StepDef<Steps>; STEP_COUNT] = table();

/// The CPUs whose trace buffer is in use, and whose sysfs nodes would exist.
static TRACE_BUFFERS: spin::Mutex<CpuSet> = spin::Mutex::new(CpuSet::EMPTY);
static SYSFS: spin::Mutex<CpuSet> = spin::Mutex::new(CpuSet::EMPTY);

/// Switches to each of `cpu`'s unparked threads that has something to do
/// at `now_ns` ([`smpboot::run_ready`]). Called by the CPU's idle loop,
/// interrupts off; nothing before the shared mechanisms exist (the loop
/// starts before the heap).
pub fn run_threads(cpu: CpuId, now_ns: u64) {
    if subsystems::get().is_some() {
        smpboot::run_ready(&Steps, cpu, now_ns);
    }
}

/// What thread `role` runs at each switch to it: a turn of the shared body.
fn body(role: Role) -> Body {
    match role {
        Role::Worker => |thread| smpboot::run(&Steps, thread.cpu, Role::Worker),
        Role::Softirq => |thread| smpboot::run(&Steps, thread.cpu, Role::Softirq),
        Role::RcuCallbacks => |thread| smpboot::run(&Steps, thread.cpu, Role::RcuCallbacks),
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
    type Rcu = CallerDriven<KernelCpus>;

    fn subsystems(&self) -> &Subsystems<Job, Task, Kthread> {
        subsystems()
    }

    fn pages(&self) -> Option<&PageCaches> {
        pages::get()
    }

    fn without_interrupts<R>(&self, f: impl FnOnce() -> R) -> R {
        instructions::without_interrupts(f)
    }

    fn open_queue(&self, cpu: CpuId) {
        sched::open(cpu);
    }

    fn close_queue(&self, cpu: CpuId) -> Vec<Task> {
        sched::close(cpu)
    }

    fn offer_task(&self, cpu: CpuId, task: Task) -> Result<(), Task> {
        sched::push(cpu, task)
    }

    /// CPU 0 runs the controller, which never halts while it operates.
    fn wake_cpu(&self, cpu: CpuId) {
        if cpu != smp::BOOT_CPU {
            smp::wake(cpu);
        }
    }

    fn rcu(&self) -> &CallerDriven<KernelCpus> {
        &rcu::RCU
    }

    fn is_powered(&self, cpu: CpuId) -> bool {
        smp::is_running(cpu)
    }

    fn queue_state(&self, cpu: CpuId) -> (usize, bool) {
        sched::queue_state(cpu)
    }

    fn spawn_kthread(&self, cpu: CpuId, role: Role) -> Option<Kthread> {
        Some(Kthread::new(role.name(), cpu, body(role)))
    }

    fn trace_buffer_create(&self, cpu: CpuId) -> bool {
        !flip(&TRACE_BUFFERS, CpuSet::single(cpu), true).is_empty()
    }

    fn trace_buffer_retire(&self, cpu: CpuId, keep: bool) -> bool {
        let one = CpuSet::single(cpu);
        if keep {
            return TRACE_BUFFERS.lock().contains(cpu);
        }
        !flip(&TRACE_BUFFERS, one, false).is_empty()
    }

    fn sysfs_create(&self, cpus: CpuSet) -> CpuSet {
        flip(&SYSFS, cpus, true)
    }

    fn sysfs_remove(&self, cpus: CpuSet) -> CpuSet {
        flip(&SYSFS, cpus, false)
    }

    fn cpu_tick(&self, _cpu: CpuId, running: bool) {
        if running {
            apic::start_tick();
        } else {
            apic::stop_tick();
        }
    }
}

/// This kernel's part of the shared kernel threads' bodies: a job is a
/// closure, called; tasks run inside `kworker`, a few slices per turn; the
/// clock is the TSC and the tick the local APIC timer's rate.
impl KthreadKernel for Steps {
    const TASKS_IN_WORKER: bool = true;

    fn now_ns(&self) -> u64 {
        tsc::nanos()
    }

    fn hz(&self) -> Hz {
        apic::sched_ticks().hz()
    }

    fn run_job(&self, _cpu: CpuId, _item: Item, _id: u64, job: Job) {
        job();
    }

    fn run_task_slices(&self, cpu: CpuId) {
        sched::run_slices(cpu);
    }
}
