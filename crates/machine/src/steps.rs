//! The machine's part of the hotplug steps. The table itself, with each
//! step's class and the reason for it and the callbacks both engines run,
//! is the shared kernel's ([`hotkern_kernel::steps`]), the same one the
//! bare-metal kernel runs; here the machine's [`Kernel`] lends it its
//! shared mechanisms (one [`Subsystems`]) and its page caches, and does
//! what only the machine can: its kernel threads are
//! OS threads, its trace buffers the event logs, its sysfs nodes a map,
//! its grace periods [`crate::rcu`]'s thread.

use hotkern_cpuhp::{CpuId, CpuSet};
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

    fn open_queue(&self, cpu: CpuId) {
        self.tasks.open(cpu);
    }

    fn close_queue(&self, cpu: CpuId) -> Vec<Task> {
        self.tasks.close(cpu)
    }

    fn offer_task(&self, cpu: CpuId, task: Task) -> Result<(), Task> {
        self.tasks.offer(cpu, task)
    }

    fn cpus_activated(&self) {
        self.replace_limbo_if_possible();
    }

    fn wake_cpu(&self, cpu: CpuId) {
        self.doorbells.ring(cpu.index());
    }

    fn rcu(&self) -> &Rcu {
        &self.rcu
    }

    fn is_powered(&self, cpu: CpuId) -> bool {
        self.life(cpu.index()) == Life::Alive
    }

    fn queue_state(&self, cpu: CpuId) -> (usize, bool) {
        self.tasks.queue_state(cpu)
    }

    fn spawn_kthread(&self, cpu: CpuId, role: Role) -> Option<Kthread> {
        self.spawn_os_thread(cpu.index(), role).ok()
    }

    fn trace_buffer_create(&self, cpu: CpuId) -> bool {
        self.events.create(cpu.index())
    }

    fn trace_buffer_retire(&self, cpu: CpuId, keep: bool) -> bool {
        self.events.retire(cpu.index(), keep)
    }

    fn sysfs_create(&self, cpus: CpuSet) -> CpuSet {
        self.sysfs.create(cpus)
    }

    fn sysfs_remove(&self, cpus: CpuSet) -> CpuSet {
        self.sysfs.remove(cpus)
    }
}
