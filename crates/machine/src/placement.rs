//! Placing work on CPUs: tasks on run queues, work items on workqueues,
//! timers on timer bases, RCU callbacks on callback lists, all by the
//! shared kernel's one policy ([`hotkern_kernel::placement`]: the CPU
//! asked for, then the next ones that take it, and what none takes waits
//! in the limbo until a CPU becomes active), from the hotplug steps and
//! from tasks alike.

use std::sync::atomic::Ordering;

use hotkern_cpuhp::CpuId;
use hotkern_kernel::rcu::callbacks::Callback;
use hotkern_kernel::steps::{place_waiting, StepKernel};
use hotkern_kernel::timer::Timer;
use hotkern_kernel::workqueue::Work;

use crate::kernel::Kernel;
use crate::task::{Job, Task};

impl Kernel {
    /// Puts `task` on `preferred`'s run queue, or on the next active CPU's
    /// that takes it, and rings that CPU (the shared scheduler's
    /// placement); if none does, it waits in the limbo, placed again at
    /// once if a CPU became active meanwhile (the steps are not the only
    /// ones placing here: tasks spawn from every vCPU).
    pub(crate) fn push_task(&self, preferred: usize, task: Task) {
        match self
            .tasks
            .place(preferred, self.active_mask(), task, self.limbo())
        {
            Some(cpu) => self.doorbells.ring(cpu.index()),
            None => self.replace_limbo_if_possible(),
        }
    }

    pub(crate) fn queue_work(&self, preferred: usize, id: u64, job: Job) {
        StepKernel::queue_work(self, preferred, Work { id, job });
        if !self.limbo().is_empty() {
            self.replace_limbo_if_possible();
        }
    }

    pub(crate) fn arm_timer(&self, preferred: usize, deadline: u64, id: u64, job: Job) {
        StepKernel::arm_timer(self, preferred, Timer { deadline, id, job });
        if !self.limbo().is_empty() {
            self.replace_limbo_if_possible();
        }
    }

    pub(crate) fn call_rcu(&self, preferred: usize, id: u64, job: Job) {
        StepKernel::call_rcu(self, preferred, Callback::Job { id, job });
        if !self.limbo().is_empty() {
            self.replace_limbo_if_possible();
        }
    }

    /// Places what waits again; called when a CPU becomes active.
    pub(crate) fn replace_limbo_if_possible(&self) {
        place_waiting(self);
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
        let span = self
            .domains()
            .span_of(cpu)
            .intersection(&self.active_mask());
        span.iter()
            .map(CpuId::index)
            .min_by_key(|&other| {
                self.vmstat()
                    .with(other, |s| s.nr_running.load(Ordering::Relaxed))
                    .unwrap_or(u64::MAX)
            })
            .unwrap_or(cpu)
    }
}
