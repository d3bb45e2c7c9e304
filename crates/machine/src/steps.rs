//! The machine's part of the hotplug steps. The table itself, with each
//! step's class and the reason for it and the callbacks both engines run,
//! is the shared kernel's ([`hotkern_kernel::steps`]), the same one the
//! bare-metal kernel runs; here the machine's [`Kernel`] lends it its
//! shared mechanisms (one [`Subsystems`]) and its page caches, and does
//! what only the machine can: its kernel threads are
//! OS threads, its trace buffers the event logs, its sysfs nodes a map,
//! its grace periods [`crate::rcu`]'s thread.

use hotkern_cpuhp::CpuSet;
use hotkern_kernel::kthread::Role;
use hotkern_kernel::pagecache::PageCaches;
use hotkern_kernel::power::Life;
use hotkern_kernel::steps::{table, StepDef, StepKernel, STEP_COUNT};
use hotkern_kernel::subsystems::Subsystems;

use crate::kernel::Kernel;
use crate::kthread::Kthread;
use crate::rcu::Rcu;
use crate::task::{Job, Task};

/// The table, in startup order (teardowns run in exact reverse).
pub(crate) const STEPS: [StepDef<Kernel>; STEP_COUNT] = table();

impl StepKernel for Kernel {
    type Job = Job;
    type Task = Task;
    type Thread = Kthread;
    type Rcu = Rcu;

    fn subsystems(&self) -> &Subsystems<Job, Task, Kthread> {
        &self.subsystems
    }

    fn pages(&self) -> Option<&PageCaches> {
        Some(&self.pages)
    }

    fn open_queue(&self, cpu: usize) {
        self.vcpus[cpu].runqueue.lock().open();
    }

    fn close_queue(&self, cpu: usize) -> Vec<Task> {
        self.vcpus[cpu].runqueue.lock().close()
    }

    fn offer_task(&self, cpu: usize, task: Task) -> Result<(), Task> {
        self.vcpus[cpu].runqueue.lock().push(task)
    }

    fn cpus_activated(&self) {
        self.replace_limbo_if_possible();
    }

    fn wake_cpu(&self, cpu: usize) {
        self.doorbells.ring(cpu);
    }

    fn rcu(&self) -> &Rcu {
        &self.rcu
    }

    fn is_powered(&self, cpu: usize) -> bool {
        self.life(cpu) == Life::Alive
    }

    fn queue_state(&self, cpu: usize) -> (usize, bool) {
        let queue = self.vcpus[cpu].runqueue.lock();
        (queue.len(), queue.is_open())
    }

    fn spawn_kthread(&self, cpu: usize, role: Role) -> Option<Kthread> {
        self.spawn_os_thread(cpu, role).ok()
    }

    fn trace_buffer_create(&self, cpu: usize) -> bool {
        self.events.create(cpu)
    }

    fn trace_buffer_retire(&self, cpu: usize, keep: bool) -> bool {
        self.events.retire(cpu, keep)
    }

    fn sysfs_create(&self, cpus: CpuSet) -> CpuSet {
        self.sysfs.create(cpus)
    }

    fn sysfs_remove(&self, cpus: CpuSet) -> CpuSet {
        self.sysfs.remove(cpus)
    }
}
