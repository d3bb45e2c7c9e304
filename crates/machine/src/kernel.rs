//! The kernel every vCPU runs: per-CPU state, the scheduler loop, and the
//! services hotplug steps and tasks use (placing work, running a function
//! on a CPU, stop-machine, booting and killing vCPUs).

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use hotkern_cpuhp::CpuId;
use hotkern_kernel::audit::Violation;
use hotkern_kernel::cpuset::cpu_id;
use hotkern_kernel::frames::FramePool;
use hotkern_kernel::hotplug::Control;
use hotkern_kernel::idle::{self, CpuLoop};
use hotkern_kernel::kthread::Role;
use hotkern_kernel::ledger::{Item, Tally};
use hotkern_kernel::pagecache::PageCaches;
use hotkern_kernel::platform::Cpus;
use hotkern_kernel::power::{Life, Lifecycle};
use hotkern_kernel::smpboot::{self, KthreadKernel};
use hotkern_kernel::steps::StepKernel;
use hotkern_kernel::subsystems::Subsystems;
use hotkern_kernel::tasks::{Scheduler, TaskBooks};
use hotkern_kernel::tick::{Hz, Ticks};

use crate::eventlog::{Event, EventKind, EventLogs};
use crate::kthread::Kthread;
use crate::ledger::Ledger;
use crate::memdev::system::MemorySystem;
use crate::rcu::Rcu;
use crate::signal::{set_current_cpu, Doorbells};
use crate::sysfs::Sysfs;
use crate::task::{Context, Job, Task, TaskBody, TaskStatus};

pub(crate) struct Kernel {
    pub(crate) cpus: usize,
    /// Every vCPU's run queue: the shared scheduler ([`hotkern_kernel::tasks`]).
    pub(crate) tasks: Scheduler<TaskBody>,
    pub(crate) doorbells: Arc<Doorbells>,
    /// Each vCPU's life: powered off, starting, running, leaving.
    pub(crate) lives: Lifecycle,
    /// The shared mechanisms: the audit, timer bases, workqueue pools,
    /// RCU callback lists, counters, domains, kernel threads, the limbo,
    /// the masks.
    pub(crate) subsystems: Subsystems<Job, Task, Kthread>,
    pub(crate) rcu: Arc<Rcu>,
    pub(crate) pages: PageCaches,
    pub(crate) sysfs: Sysfs,
    pub(crate) events: EventLogs,
    /// Each vCPU's scheduler tick.
    pub(crate) ticks: Ticks,
    pub(crate) ledger: Ledger,
    /// The hotplug engine's platform state: the hotplug lock (Linux's
    /// `cpu_hotplug_lock`), the work posted to each vCPU, stop-machine's
    /// rendezvous and the recorder of step calls.
    pub(crate) control: Control,
    pub(crate) shutdown: AtomicBool,
    pub(crate) next_cpu: AtomicUsize,
    pub(crate) me: Weak<Kernel>,
    /// The memory device, its allocator and its driver, if the machine has one.
    pub(crate) memory: OnceLock<Arc<MemorySystem>>,
}

impl Kernel {
    pub(crate) fn new(cpus: usize, memory: FramePool, hz: Hz) -> std::io::Result<Arc<Kernel>> {
        let doorbells = Arc::new(Doorbells::new(cpus));
        let subsystems = Subsystems::new(cpus);
        let lists = Arc::clone(&subsystems.rcu_callbacks);
        let rcu = Rcu::start(lists, Arc::clone(&doorbells), hz)?;
        Ok(Arc::new_cyclic(|me| Kernel {
            cpus,
            tasks: Scheduler::new(cpus),
            doorbells,
            lives: Lifecycle::new(),
            subsystems,
            rcu,
            pages: PageCaches::new(cpus, memory),
            sysfs: Sysfs::new(cpus),
            events: EventLogs::new(cpus),
            ticks: Ticks::new(hz),
            ledger: Ledger::default(),
            control: Control::new(cpus),
            shutdown: AtomicBool::new(false),
            next_cpu: AtomicUsize::new(0),
            me: me.clone(),
            memory: OnceLock::new(),
        }))
    }

    /// Nanoseconds since the machine started: the doorbells' clock, the
    /// one the shared kernel's waits with a deadline read.
    pub(crate) fn now_ns(&self) -> u64 {
        self.doorbells.now_ns()
    }

    /// The clock reading (see [`Kernel::now_ns`]) `delay` from now: the
    /// shared kernel's timers count nanoseconds, not `Instant`s.
    pub(crate) fn ns_after(&self, delay: Duration) -> u64 {
        self.now_ns()
            .saturating_add(u64::try_from(delay.as_nanos()).unwrap_or(u64::MAX))
    }

    /// The `Instant` of clock reading `ns`, for sleeping until it.
    pub(crate) fn instant_at(&self, ns: u64) -> Instant {
        self.doorbells.instant_at(ns)
    }

    fn trace(&self, cpu: usize, kind: EventKind, id: u64) {
        self.events.record(Event {
            nanos: self.now_ns(),
            cpu: cpu_id(cpu),
            kind,
            id,
        });
    }

    // ----- masks -----

    pub(crate) fn is_online(&self, cpu: usize) -> bool {
        self.subsystems.online.contains(cpu_id(cpu))
    }

    pub(crate) fn life(&self, cpu: usize) -> Life {
        self.lives.life(cpu)
    }

    // ----- booting and killing vCPUs -----

    /// Marks the vCPUs `cpus` powered on as the machine boots (their
    /// threads find themselves alive at their first turn).
    pub(crate) fn boot(&self, cpu: usize) {
        self.lives.boot_cpu(cpu);
        self.doorbells.ring(cpu);
    }

    /// Spawns kernel thread `role` of `cpu` (parked): each turn it is
    /// given its vCPU, it runs the shared body ([`smpboot::run`]).
    pub(crate) fn spawn_os_thread(&self, cpu: usize, role: Role) -> std::io::Result<Kthread> {
        let me = self.me.clone();
        Kthread::spawn(cpu, role, move || {
            if let Some(kernel) = me.upgrade() {
                set_current_cpu(Some(cpu));
                if role == Role::RcuCallbacks {
                    // The machine's own callbacks complete no ledger entry
                    // (`run_job` checks the others): the turn is checked.
                    kernel.check_running_online(cpu, "rcu callbacks");
                }
                smpboot::run(&*kernel, cpu_id(cpu), role);
            }
        })
    }

    // ----- running things -----

    fn check_running_online(&self, cpu: usize, what: &'static str) {
        if !self.is_online(cpu) || self.life(cpu) != Life::Alive {
            self.audit().violation(Violation::RanOffline {
                what,
                cpu: cpu_id(cpu),
            });
        }
    }

    /// One slice of the task first in `cpu`'s queue, through the shared
    /// scheduler: checked, traced and counted here, a panic caught; a task
    /// that asks again and finds its queue closed is placed elsewhere.
    fn run_one_task(&self, cpu: usize) -> bool {
        let slice = |_: CpuId, task: &mut Task| {
            self.check_running_online(cpu, "task");
            self.trace(cpu, EventKind::TaskSlice, task.id);
            self.vmstat().with(cpu, |stats| {
                stats.slices.fetch_add(1, Ordering::Relaxed);
            });
            let mut context = Context { kernel: self, cpu };
            // A panicking task ends there and then; its vCPU carries on.
            catch_unwind(AssertUnwindSafe(|| (task.body)(&mut context))).unwrap_or_else(|_| {
                self.audit().violation(Violation::Panicked {
                    what: "task",
                    id: task.id,
                });
                TaskStatus::Done
            })
        };
        let elsewhere = |task| self.push_task(cpu, task);
        self.tasks
            .run_slices(self, cpu_id(cpu), 1, slice, elsewhere)
            > 0
    }

    /// The scheduler loop of vCPU `cpu`'s thread: powered on, it turns the
    /// shared loop ([`idle::turn`]); powered off, it sleeps until booted.
    pub(crate) fn vcpu_main(&self, cpu: usize) {
        set_current_cpu(Some(cpu));
        let shutdown = || self.shutdown.load(Ordering::SeqCst);
        loop {
            if self.lives.should_die(cpu) {
                // Quiescent for RCU before the controller sees it dead.
                idle::stop(self, cpu_id(cpu));
                self.lives.die(&*self.doorbells, cpu);
            }
            if !self.lives.is_alive(cpu) {
                idle::stop(self, cpu_id(cpu));
                self.doorbells
                    .wait_until(&|| self.lives.life(cpu) != Life::Dead || shutdown());
                if shutdown() {
                    return;
                }
                idle::start(self, cpu_id(cpu));
                self.lives.arrive(&*self.doorbells, cpu);
            }
            if shutdown() {
                return;
            }
            idle::start(self, cpu_id(cpu));
            idle::turn(self, cpu_id(cpu));
        }
    }

    /// Stops every vCPU thread's loop (they exit at their next turn).
    pub(crate) fn stop_vcpus(&self) {
        self.shutdown.store(true, Ordering::SeqCst);
        for cpu in 0..self.cpus {
            self.doorbells.ring(cpu);
        }
    }
}

/// The machine's tasks are numbered in its ledger, which also counts the
/// other deferred items; a task finished twice is a violation.
impl TaskBooks for Kernel {
    fn issue(&self) -> u64 {
        self.ledger.issue(Item::Task)
    }

    fn complete(&self, id: u64) -> bool {
        let first = self.ledger.complete(Item::Task, id);
        if !first {
            self.audit()
                .violation(Violation::RanTwice { what: "task", id });
        }
        first
    }

    fn tally(&self) -> Tally {
        self.ledger.tally(Item::Task)
    }
}

/// The vCPU loop's platform part: calls are a queue the loop drains, a
/// stop-machine is joined by polling, kernel threads are OS threads handed
/// the vCPU, a task slice runs on the vCPU's own thread, and a halt sleeps
/// on the vCPU's doorbell.
impl CpuLoop for Kernel {
    fn now_ns(&self) -> u64 {
        Kernel::now_ns(self)
    }

    fn ticks(&self) -> &Ticks {
        &self.ticks
    }

    fn run_calls(&self, cpu: CpuId) -> Option<bool> {
        let joined = self.control.join_stop(&*self.doorbells);
        // The stop-machine may have run this vCPU's dying steps.
        if self.life(cpu.index()) != Life::Alive {
            return None;
        }
        Some(self.control.run_pending(&*self.doorbells, cpu) | joined)
    }

    fn is_online(&self, cpu: CpuId) -> bool {
        Kernel::is_online(self, cpu.index())
    }

    fn run_kthreads(&self, cpu: CpuId, now_ns: u64) -> bool {
        smpboot::run_ready(self, cpu, now_ns)
    }

    fn run_task(&self, cpu: CpuId) -> bool {
        let ran = self.run_one_task(cpu.index());
        let queued = self.tasks.queue_state(cpu).0 as u64;
        self.vmstat().with(cpu.index(), |stats| {
            stats.nr_running.store(queued, Ordering::Relaxed);
        });
        ran
    }

    fn next_timer(&self, cpu: CpuId) -> Option<u64> {
        self.timers().next_deadline(cpu.index())
    }

    fn rcu_quiescent(&self, cpu: CpuId) {
        self.rcu.quiescent(cpu.index());
    }

    fn rcu_tick(&self, cpu: CpuId) {
        self.rcu.tick(cpu.index());
    }

    /// It holds callbacks waiting for grace periods.
    fn rcu_needs_cpu(&self, cpu: CpuId) -> bool {
        self.rcu_callbacks().pending(cpu.index()) > 0
    }

    fn rcu_enter_idle(&self, cpu: CpuId) {
        self.rcu.idle_entered(cpu.index());
    }

    fn rcu_exit_idle(&self, cpu: CpuId) {
        self.rcu.idle_exited(cpu.index());
    }

    fn halt(&self, cpu: CpuId, deadline_ns: Option<u64>, enter: &dyn Fn(), exit: &dyn Fn()) {
        let until = deadline_ns.map(|ns| self.instant_at(ns));
        self.doorbells
            .get(cpu.index())
            .idle_wait(until, enter, exit);
    }
}

/// The machine's part of the shared kernel threads' bodies: a job (a work
/// item, timer or RCU callback) runs on the thread that was handed the
/// vCPU, a panic in it caught, and is completed in the ledger; tasks run
/// from the vCPU's loop, not its worker.
impl KthreadKernel for Kernel {
    fn now_ns(&self) -> u64 {
        Kernel::now_ns(self)
    }

    fn hz(&self) -> Hz {
        self.ticks.hz()
    }

    fn run_job(&self, cpu: CpuId, item: Item, id: u64, job: Job) {
        let cpu = cpu.index();
        self.check_running_online(cpu, item.name());
        self.trace(cpu, EventKind::Job, id);
        let mut context = Context { kernel: self, cpu };
        // A panicking job must not take its vCPU down with it.
        if catch_unwind(AssertUnwindSafe(|| job(&mut context))).is_err() {
            self.audit().violation(Violation::Panicked {
                what: item.name(),
                id,
            });
        }
        if !self.ledger.complete(item, id) {
            self.audit().violation(Violation::RanTwice {
                what: item.name(),
                id,
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hotkern_physmem::{PageCount, Pfn};

    #[test]
    fn running_anything_on_an_offline_vcpu_is_caught() {
        let kernel = Kernel::new(
            2,
            FramePool::new(Pfn(0), PageCount(16)).unwrap(),
            Hz::DEFAULT,
        )
        .unwrap();
        let id = kernel.ledger.issue(Item::Work);
        // vCPU 1 was never brought up: running a job "on" it is a violation.
        kernel.run_job(CpuId(1), Item::Work, id, Box::new(|_| {}));
        assert_eq!(
            kernel.audit().violations(),
            [Violation::RanOffline {
                what: "work item",
                cpu: CpuId(1)
            }]
        );
        // Completing it again is caught too.
        kernel.run_job(CpuId(1), Item::Work, id, Box::new(|_| {}));
        assert!(kernel.audit().violations().contains(&Violation::RanTwice {
            what: "work item",
            id
        }));
        kernel.rcu.stop();
    }
}
