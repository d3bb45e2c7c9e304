//! Tasks and the context everything that runs on a vCPU gets.

use std::time::Duration;

use hotkern_cpuhp::CpuId;
use hotkern_kernel::cpuset::cpu_id;
use hotkern_physmem::Pfn;

use hotkern_cpuhp::CpuSet;

pub use hotkern_kernel::tasks::TaskStatus;

/// The body of a task: called once per slice until it returns [`TaskStatus::Done`].
pub type TaskBody = Box<dyn FnMut(&mut Context<'_>) -> TaskStatus + Send>;

/// A deferred piece of work that runs on a vCPU: a work item, a timer, an
/// RCU callback.
pub(crate) type Job = Box<dyn FnOnce(&mut Context<'_>) + Send>;

/// A task: its ledger id and its body, in the shared scheduler's queues
/// ([`hotkern_kernel::tasks`]).
pub(crate) type Task = hotkern_kernel::tasks::Task<TaskBody>;

/// What code running on a vCPU (a task slice, a work item, a timer, an RCU
/// callback) can ask of the machine.
pub struct Context<'a> {
    pub(crate) kernel: &'a dyn TaskKernel,
    pub(crate) cpu: usize,
}

impl Context<'_> {
    /// The vCPU this runs on.
    pub fn cpu(&self) -> CpuId {
        cpu_id(self.cpu)
    }

    /// Takes a page frame through this CPU's page cache (`None` when memory
    /// is exhausted).
    pub fn alloc_page(&mut self) -> Option<Pfn> {
        self.kernel.alloc_page(self.cpu)
    }

    /// Returns a page frame through this CPU's page cache.
    pub fn free_page(&mut self, frame: Pfn) {
        self.kernel.free_page(self.cpu, frame);
    }

    /// Queues `job` on this CPU's workqueue (or a live CPU's, if this one's
    /// pool is unbound); returns the item's ledger id.
    pub fn queue_work(&mut self, job: impl FnOnce(&mut Context<'_>) + Send + 'static) -> u64 {
        self.kernel.submit_work(self.cpu, Box::new(job))
    }

    /// Arms a timer on this CPU that runs `job` after `delay`.
    pub fn arm_timer(
        &mut self,
        delay: Duration,
        job: impl FnOnce(&mut Context<'_>) + Send + 'static,
    ) -> u64 {
        self.kernel.submit_timer(self.cpu, delay, Box::new(job))
    }

    /// Runs `job` after a grace period.
    pub fn call_rcu(&mut self, job: impl FnOnce(&mut Context<'_>) + Send + 'static) -> u64 {
        self.kernel.submit_rcu(self.cpu, Box::new(job))
    }

    /// The CPUs online now (Linux's `cpu_online_mask`): stable while the
    /// caller holds the hotplug lock for reading, a snapshot otherwise.
    pub fn online_cpus(&self) -> CpuSet {
        self.kernel.online_cpus()
    }

    /// Takes the hotplug lock for reading if no hotplug operation holds it
    /// (Linux's `cpus_read_trylock`): until [`Context::cpus_read_unlock`],
    /// no CPU comes online or goes offline. A task may hold it across
    /// slices; one that gets `false` returns [`TaskStatus::Again`] and tries
    /// again later (a task cannot sleep here).
    pub fn cpus_read_trylock(&mut self) -> bool {
        self.kernel.read_lock_cpus()
    }

    /// Gives back what [`Context::cpus_read_trylock`] took, on any CPU.
    pub fn cpus_read_unlock(&mut self) {
        self.kernel.read_unlock_cpus();
    }

    /// Starts a new task on the least-loaded active CPU of this CPU's
    /// scheduling domain; returns its id.
    pub fn spawn(
        &mut self,
        body: impl FnMut(&mut Context<'_>) -> TaskStatus + Send + 'static,
    ) -> u64 {
        self.kernel.spawn_task(self.cpu, Box::new(body))
    }
}

/// What a task or a job may ask of the kernel it runs on, for `cpu`: the
/// machine's kernel implements it, so that tasks need not name the
/// kernel's type (which holds them).
pub(crate) trait TaskKernel: Sync {
    /// A frame from `cpu`'s page cache.
    fn alloc_page(&self, cpu: usize) -> Option<Pfn>;
    /// A frame back to `cpu`'s page cache.
    fn free_page(&self, cpu: usize, frame: Pfn);
    /// A work item queued near `cpu`; its id.
    fn submit_work(&self, cpu: usize, job: Job) -> u64;
    /// A timer armed near `cpu`; its id.
    fn submit_timer(&self, cpu: usize, delay: Duration, job: Job) -> u64;
    /// An RCU callback queued near `cpu`; its id.
    fn submit_rcu(&self, cpu: usize, job: Job) -> u64;
    /// The online mask.
    fn online_cpus(&self) -> CpuSet;
    /// The hotplug lock's read side, without waiting.
    fn read_lock_cpus(&self) -> bool;
    /// The hotplug lock's read side given back.
    fn read_unlock_cpus(&self);
    /// A new task started near `cpu`; its id.
    fn spawn_task(&self, cpu: usize, body: TaskBody) -> u64;
    /// The memory device's side of the kernel, if there is one.
    fn memory(&self) -> Option<&crate::memdev::system::MemorySystem>;
}
