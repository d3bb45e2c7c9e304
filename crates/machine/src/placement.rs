//! Placing work on CPUs: tasks on run queues, work items on workqueues,
//! timers on timer bases, RCU callbacks on callback lists. Each goes to the
//! CPU asked for if that CPU takes it now, else to another live CPU, and
//! if none can, into limbo until a CPU becomes active: never lost.

use std::sync::atomic::Ordering;

use hotkern_cpuhp::{CpuId, CpuSet};
use hotkern_kernel::cpuset::cpu_id;
use hotkern_kernel::timer::Timer;
use hotkern_kernel::workqueue::Work;

use crate::kernel::Kernel;
use crate::rcu::Callback;
use crate::task::{Job, Limbo, Task};

impl Kernel {
    /// Puts `task` on `preferred`'s run queue, or on another active CPU's
    /// if that one does not take tasks now.
    pub(crate) fn push_task(&self, preferred: usize, task: Task) {
        let mut task = task;
        for cpu in self.candidates(preferred, self.active_mask()) {
            let mut runqueue = self.vcpus[cpu].runqueue.lock();
            match runqueue.push(task) {
                Ok(()) => {
                    drop(runqueue);
                    self.doorbells.ring(cpu);
                    return;
                }
                Err(back) => task = back,
            }
        }
        self.limbo.lock().push(Limbo::Task(task));
        self.replace_limbo_if_possible();
    }

    pub(crate) fn queue_work(&self, preferred: usize, id: u64, job: Job) {
        let mut work = Work { id, job };
        for cpu in self.candidates(preferred, self.online_mask()) {
            match self.workqueue.queue(cpu, work) {
                Ok(()) => {
                    self.doorbells.ring(cpu);
                    return;
                }
                Err(back) => work = back,
            }
        }
        self.limbo.lock().push(Limbo::Work(work));
        self.replace_limbo_if_possible();
    }

    pub(crate) fn arm_timer(&self, preferred: usize, deadline: u64, id: u64, job: Job) {
        let mut timer = Timer { deadline, id, job };
        for cpu in self.candidates(preferred, self.online_mask()) {
            match self.timers.arm(cpu, timer) {
                Ok(()) => {
                    self.doorbells.ring(cpu);
                    return;
                }
                Err(back) => timer = back,
            }
        }
        self.limbo.lock().push(Limbo::Timer(timer));
        self.replace_limbo_if_possible();
    }

    pub(crate) fn call_rcu(&self, preferred: usize, id: u64, job: Job) {
        let mut callback = Callback::Job(id, job);
        for cpu in self.candidates(preferred, self.online_mask()) {
            match self.rcu.call(cpu, callback) {
                Ok(()) => return,
                Err(back) => callback = back,
            }
        }
        if let Callback::Job(id, job) = callback {
            self.limbo.lock().push(Limbo::Rcu(id, job));
            self.replace_limbo_if_possible();
        }
    }

    /// Frees something after a grace period without waiting for it.
    pub(crate) fn defer_free(&self, free: Box<dyn FnOnce() + Send>) {
        let mut callback = Callback::Internal(free);
        for cpu in self.online_mask().iter() {
            match self.rcu.call(cpu.index(), callback) {
                Ok(()) => return,
                Err(back) => callback = back,
            }
        }
        // No CPU has RCU data (the machine is going down): wait instead.
        self.rcu.synchronize();
        if let Callback::Internal(free) = callback {
            free();
        }
    }

    /// `preferred` first, then the members of `mask` after it, wrapping.
    fn candidates(&self, preferred: usize, mask: CpuSet) -> impl Iterator<Item = usize> {
        let n = self.cpus;
        let preferred = preferred.min(n.saturating_sub(1));
        (0..n)
            .map(move |offset| (preferred + offset) % n)
            .filter(move |&cpu| cpu == preferred || mask.contains(cpu_id(cpu)))
    }

    /// Places items in limbo again; called when a CPU becomes active.
    pub(crate) fn replace_limbo_if_possible(&self) {
        if self.active_mask().is_empty() {
            return;
        }
        let waiting = core::mem::take(&mut *self.limbo.lock());
        if waiting.is_empty() {
            return;
        }
        let start = self.active_mask().first().map_or(0, CpuId::index);
        for item in waiting {
            match item {
                Limbo::Task(task) => self.push_task(start, task),
                Limbo::Work(work) => self.queue_work(start, work.id, work.job),
                Limbo::Timer(timer) => self.arm_timer(start, timer.deadline, timer.id, timer.job),
                Limbo::Rcu(id, job) => self.call_rcu(start, id, job),
            }
        }
    }

    /// A round-robin choice among active CPUs, for submissions from outside.
    pub(crate) fn next_submit_cpu(&self) -> usize {
        let active = self.active_mask();
        let count = active.len().max(1);
        let nth = self.next_cpu.fetch_add(1, Ordering::Relaxed) % count;
        active.iter().nth(nth).map_or(0, CpuId::index)
    }

    /// The least-loaded active CPU of `cpu`'s domain (read under RCU).
    pub(crate) fn balance_target(&self, cpu: usize) -> usize {
        let span = self.domains.span_of(cpu).intersection(&self.active_mask());
        span.iter()
            .map(CpuId::index)
            .min_by_key(|&other| {
                self.vmstat
                    .with(other, |s| s.nr_running.load(Ordering::Relaxed))
                    .unwrap_or(u64::MAX)
            })
            .unwrap_or(cpu)
    }
}
