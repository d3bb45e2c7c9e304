//! Tasks and the context everything that runs on a vCPU gets.

use std::time::Duration;

use hotkern_cpuhp::CpuId;
use hotkern_kernel::cpuset::cpu_id;
use hotkern_kernel::ledger::Item;
use hotkern_physmem::Pfn;

use crate::kernel::Kernel;

/// What a task slice asks for when it returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskStatus {
    /// Run me again (on this CPU if it can still take me, else elsewhere).
    Again,
    /// I am finished.
    Done,
}

/// The body of a task: called once per slice until it returns [`TaskStatus::Done`].
pub type TaskBody = Box<dyn FnMut(&mut Context<'_>) -> TaskStatus + Send>;

/// A deferred piece of work that runs on a vCPU: a work item, a timer, an
/// RCU callback.
pub(crate) type Job = Box<dyn FnOnce(&mut Context<'_>) + Send>;

/// A task: a body and its ledger id.
pub(crate) struct Task {
    pub(crate) id: u64,
    pub(crate) body: TaskBody,
}

/// What code running on a vCPU (a task slice, a work item, a timer, an RCU
/// callback) can ask of the machine.
pub struct Context<'a> {
    pub(crate) kernel: &'a Kernel,
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
        let frame = self.kernel.pages.alloc(self.cpu)?;
        self.kernel.vmstat.with(self.cpu, |stats| {
            stats
                .pages_allocated
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        });
        Some(frame)
    }

    /// Returns a page frame through this CPU's page cache.
    pub fn free_page(&mut self, frame: Pfn) {
        self.kernel.pages.free_frame(self.cpu, frame);
        self.kernel.vmstat.with(self.cpu, |stats| {
            stats
                .pages_freed
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        });
    }

    /// Queues `job` on this CPU's workqueue (or a live CPU's, if this one's
    /// pool is unbound); returns the item's ledger id.
    pub fn queue_work(&mut self, job: impl FnOnce(&mut Context<'_>) + Send + 'static) -> u64 {
        let id = self.kernel.ledger.issue(Item::Work);
        self.kernel.queue_work(self.cpu, id, Box::new(job));
        id
    }

    /// Arms a timer on this CPU that runs `job` after `delay`.
    pub fn arm_timer(
        &mut self,
        delay: Duration,
        job: impl FnOnce(&mut Context<'_>) + Send + 'static,
    ) -> u64 {
        let id = self.kernel.ledger.issue(Item::Timer);
        self.kernel
            .arm_timer(self.cpu, self.kernel.ns_after(delay), id, Box::new(job));
        id
    }

    /// Runs `job` after a grace period.
    pub fn call_rcu(&mut self, job: impl FnOnce(&mut Context<'_>) + Send + 'static) -> u64 {
        let id = self.kernel.ledger.issue(Item::RcuCallback);
        self.kernel.call_rcu(self.cpu, id, Box::new(job));
        id
    }

    /// The CPUs online now (Linux's `cpu_online_mask`): stable while the
    /// caller holds the hotplug lock for reading, a snapshot otherwise.
    pub fn online_cpus(&self) -> hotkern_cpuhp::CpuSet {
        self.kernel.online_mask()
    }

    /// Takes the hotplug lock for reading if no hotplug operation holds it
    /// (Linux's `cpus_read_trylock`): until [`Context::cpus_read_unlock`],
    /// no CPU comes online or goes offline. A task may hold it across
    /// slices; one that gets `false` returns [`TaskStatus::Again`] and tries
    /// again later (a task cannot sleep here).
    pub fn cpus_read_trylock(&mut self) -> bool {
        self.kernel.hotplug_lock.try_read(&*self.kernel.doorbells)
    }

    /// Gives back what [`Context::cpus_read_trylock`] took, on any CPU.
    pub fn cpus_read_unlock(&mut self) {
        self.kernel
            .hotplug_lock
            .read_unlock(&*self.kernel.doorbells);
    }

    /// Starts a new task on the least-loaded active CPU of this CPU's
    /// scheduling domain; returns its id.
    pub fn spawn(
        &mut self,
        body: impl FnMut(&mut Context<'_>) -> TaskStatus + Send + 'static,
    ) -> u64 {
        let id = self.kernel.ledger.issue(Item::Task);
        let target = self.kernel.balance_target(self.cpu);
        self.kernel.push_task(
            target,
            Task {
                id,
                body: Box::new(body),
            },
        );
        id
    }
}
