//! The machine's kernel as tasks and jobs see it ([`TaskKernel`], behind
//! [`Context`](crate::Context)): each request is issued in the ledger,
//! then placed near the asking vCPU.

use std::sync::atomic::Ordering;
use std::time::Duration;

use hotkern_cpuhp::CpuSet;
use hotkern_kernel::ledger::Item;
use hotkern_kernel::steps::StepKernel;
use hotkern_physmem::Pfn;

use crate::kernel::Kernel;
use crate::task::{Job, Task, TaskBody, TaskKernel};

impl TaskKernel for Kernel {
    fn alloc_page(&self, cpu: usize) -> Option<Pfn> {
        let frame = self.pages.alloc(cpu)?;
        self.vmstat().with(cpu, |stats| {
            stats.pages_allocated.fetch_add(1, Ordering::Relaxed)
        });
        Some(frame)
    }

    fn free_page(&self, cpu: usize, frame: Pfn) {
        self.pages.free_frame(cpu, frame);
        self.vmstat().with(cpu, |stats| {
            stats.pages_freed.fetch_add(1, Ordering::Relaxed)
        });
    }

    fn submit_work(&self, cpu: usize, job: Job) -> u64 {
        let id = self.ledger.issue(Item::Work);
        self.queue_work(cpu, id, job);
        id
    }

    fn submit_timer(&self, cpu: usize, delay: Duration, job: Job) -> u64 {
        let id = self.ledger.issue(Item::Timer);
        self.arm_timer(cpu, self.ns_after(delay), id, job);
        id
    }

    fn submit_rcu(&self, cpu: usize, job: Job) -> u64 {
        let id = self.ledger.issue(Item::RcuCallback);
        self.call_rcu(cpu, id, job);
        id
    }

    fn online_cpus(&self) -> CpuSet {
        self.online_mask()
    }

    fn read_lock_cpus(&self) -> bool {
        self.control.hotplug_lock().try_read(&*self.doorbells)
    }

    fn read_unlock_cpus(&self) {
        self.control.hotplug_lock().read_unlock(&*self.doorbells);
    }

    fn memory(&self) -> Option<&crate::memdev::system::MemorySystem> {
        self.memory.get().map(|system| &**system)
    }

    fn spawn_task(&self, cpu: usize, body: TaskBody) -> u64 {
        let id = self.ledger.issue(Item::Task);
        let target = self.balance_target(cpu);
        self.push_task(target, Task { id, body });
        id
    }
}
