//! The step table's kernel ([`StepKernel`]) and the per-CPU threads'
//! ([`KthreadKernel`]) on a bare-metal kernel: the same sixteen steps and
//! callbacks the user-mode machine runs, over the one [`State`].
//!
//! Each CPU has three kernel threads ([`Role`]): `kworker/N` runs the
//! CPU's tasks and work items, `ksoftirqd/N` its expired timers, `rcuc/N`
//! its RCU callbacks whose grace period ended; what each does is
//! [`crate::smpboot`]'s. The idle loop switches to each one that is
//! unparked and has something to do. A thread of an offline CPU is
//! suspended at a switch, so stopping one asks it nothing: destroying it
//! frees its stack.
//!
//! Not on bare metal: sysfs (the step keeps the set of CPUs whose nodes
//! would exist, for the audit) and per-CPU trace buffers made and freed
//! with the CPU (the rings are made at boot for every CPU; the step marks
//! which are in use).
//!
//! [`State`]: super::State

use alloc::vec::Vec;

use hotkern_cpuhp::{CpuId, CpuSet};

use super::{Arch, Job, Kernel, Mechanisms, Task};
use crate::kthread::Role;
use crate::ledger::Item;
use crate::pagecache::PageCaches;
use crate::rcu::caller_driven::CallerDriven;
use crate::smpboot::{self, KthreadKernel};
use crate::steps::StepKernel;
use crate::sync::Mutex;
use crate::tick::Hz;

impl<A: Arch> Kernel<A> {
    /// Switches to each of `cpu`'s unparked threads that has something to
    /// do at `now_ns` ([`smpboot::run_ready`]). Called by the CPU's loop,
    /// interrupts off; nothing before the shared mechanisms exist (the
    /// loop starts before the heap).
    pub fn run_threads(cpu: CpuId, now_ns: u64) {
        if Self::mechanisms_if_made().is_some() {
            smpboot::run_ready(&Self::HANDLE, cpu, now_ns);
        }
    }

    fn worker(cpu: CpuId) {
        smpboot::run(&Self::HANDLE, cpu, Role::Worker);
    }

    fn softirq(cpu: CpuId) {
        smpboot::run(&Self::HANDLE, cpu, Role::Softirq);
    }

    fn rcu_callbacks(cpu: CpuId) {
        smpboot::run(&Self::HANDLE, cpu, Role::RcuCallbacks);
    }
}

/// The set `mask` with `cpus` added (`add`) or taken out; returns the CPUs
/// that changed.
fn flip(mask: &Mutex<CpuSet>, cpus: CpuSet, add: bool) -> CpuSet {
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

impl<A: Arch> StepKernel for Kernel<A> {
    type Job = Job;
    type Task = Task;
    type Thread = A::Thread;
    type Rcu = CallerDriven<Kernel<A>>;

    fn subsystems(&self) -> &Mechanisms<A> {
        Self::mechanisms()
    }

    fn pages(&self) -> Option<&PageCaches> {
        Self::pages()
    }

    fn without_interrupts<R>(&self, f: impl FnOnce() -> R) -> R {
        A::without_interrupts(f)
    }

    fn open_queue(&self, cpu: CpuId) {
        Self::open(cpu);
    }

    fn close_queue(&self, cpu: CpuId) -> Vec<Task> {
        Self::close(cpu)
    }

    fn offer_task(&self, cpu: CpuId, task: Task) -> Result<(), Task> {
        Self::offer(cpu, task)
    }

    /// The boot CPU runs the controller, which never halts while it
    /// operates.
    fn wake_cpu(&self, cpu: CpuId) {
        if cpu != A::BOOT_CPU {
            Self::wake(cpu);
        }
    }

    fn rcu(&self) -> &CallerDriven<Kernel<A>> {
        Self::rcu()
    }

    fn is_powered(&self, cpu: CpuId) -> bool {
        A::lives().is_alive(cpu.index())
    }

    fn queue_state(&self, cpu: CpuId) -> (usize, bool) {
        Self::queue_state(cpu)
    }

    fn spawn_kthread(&self, cpu: CpuId, role: Role) -> Option<A::Thread> {
        let body = match role {
            Role::Worker => Self::worker,
            Role::Softirq => Self::softirq,
            Role::RcuCallbacks => Self::rcu_callbacks,
        };
        Some(A::spawn_thread(role.name(), cpu, body))
    }

    fn trace_buffer_create(&self, cpu: CpuId) -> bool {
        !flip(&A::state().trace_buffers, CpuSet::single(cpu), true).is_empty()
    }

    fn trace_buffer_retire(&self, cpu: CpuId, keep: bool) -> bool {
        let buffers = &A::state().trace_buffers;
        if keep {
            return buffers.lock().contains(cpu);
        }
        !flip(buffers, CpuSet::single(cpu), false).is_empty()
    }

    fn sysfs_create(&self, cpus: CpuSet) -> CpuSet {
        flip(&A::state().sysfs, cpus, true)
    }

    fn sysfs_remove(&self, cpus: CpuSet) -> CpuSet {
        flip(&A::state().sysfs, cpus, false)
    }

    fn cpu_tick(&self, _cpu: CpuId, running: bool) {
        A::set_tick(running);
    }
}

/// A job is a closure, called; tasks run inside `kworker`, a few slices
/// per turn; the clock and the tick rate are the architecture's.
impl<A: Arch> KthreadKernel for Kernel<A> {
    const TASKS_IN_WORKER: bool = true;

    fn now_ns(&self) -> u64 {
        A::now_ns()
    }

    fn hz(&self) -> Hz {
        A::ticks().hz()
    }

    fn run_job(&self, _cpu: CpuId, _item: Item, _id: u64, job: Job) {
        job();
    }

    fn run_task_slices(&self, cpu: CpuId) {
        Self::run_slices(cpu);
    }
}
