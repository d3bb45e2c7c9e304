//! What a kernel gives the step table: [`StepKernel`], the shared
//! mechanisms it holds and the platform's part of bringing a CPU up and
//! down, and [`place_waiting`], which every platform runs when a CPU comes.

use alloc::boxed::Box;
use alloc::vec::Vec;

use hotkern_cpuhp::{CpuId, CpuSet};

use crate::audit::Audit;
use crate::cpuset::cpu_id;
use crate::hotplug_read::HotplugReadGuard;
use crate::kthread::{Kthreads, Role, Thread};
use crate::pagecache::PageCaches;
use crate::placement::{place, Limbo, Waiting};
use crate::rcu::callbacks::{Callback as RcuCallback, GracePeriodDriver, Lists};
use crate::sched::Domains;
use crate::subsystems::Subsystems;
use crate::timer::{Timer, Timers};
use crate::vmstat::Vmstat;
use crate::workqueue::{Work, Workqueue};

/// A kernel the step table runs on: the shared mechanisms it holds, and
/// the platform's part of bringing a CPU up and down.
///
/// Callbacks get `&K` and the engine's [`Context`](hotkern_cpuhp::Context); `cpu` arguments are
/// CPU indexes. Methods returning `bool` say whether something changed
/// (created, destroyed), so that the callbacks keep the [`Audit`]'s books
/// in one place for both platforms.
pub trait StepKernel {
    /// What a work item or timer runs.
    type Job;
    /// What a run queue holds.
    type Task;
    /// The platform's half of a kernel thread (an OS thread, a stack).
    type Thread: Thread;
    /// What drives grace periods (the machine's `rcu_gp` thread, bare
    /// metal's controller), as the RCU callbacks see it.
    type Rcu: GracePeriodDriver;

    // ----- the shared mechanisms -----

    /// The kernel's one instance of the shared mechanisms; the accessors
    /// below read it.
    fn subsystems(&self) -> &Subsystems<Self::Job, Self::Task, Self::Thread>;
    /// The books of per-CPU resources the steps create and destroy.
    fn audit(&self) -> &Audit {
        &self.subsystems().audit
    }
    /// The per-CPU timer bases.
    fn timers(&self) -> &Timers<Self::Job> {
        &self.subsystems().timers
    }
    /// The per-CPU workqueue pools.
    fn workqueue(&self) -> &Workqueue<Self::Job> {
        &self.subsystems().workqueue
    }
    /// The per-CPU counters.
    fn vmstat(&self) -> &Vmstat {
        &self.subsystems().vmstat
    }
    /// The scheduling domains.
    fn domains(&self) -> &Domains {
        &self.subsystems().domains
    }
    /// Every CPU's kernel threads.
    fn kthreads(&self) -> &Kthreads<Self::Thread> {
        &self.subsystems().kthreads
    }
    /// Where what no CPU could take waits.
    fn limbo(&self) -> &Limbo<Self::Job, Self::Task> {
        &self.subsystems().limbo
    }
    /// The per-CPU page caches; `None` while the kernel has no page pool.
    fn pages(&self) -> Option<&PageCaches>;
    /// Runs `f` where the page caches' lock may be taken: with interrupts
    /// off on bare metal (task slices take it from the idle loop with
    /// interrupts off), plainly where no handler takes it.
    fn without_interrupts<R>(&self, f: impl FnOnce() -> R) -> R {
        f()
    }

    // ----- masks and run queues -----

    /// Linux's `cpu_online_mask`.
    fn online_mask(&self) -> CpuSet {
        self.subsystems().online.load()
    }
    /// Linux's `cpu_active_mask`.
    fn active_mask(&self) -> CpuSet {
        self.subsystems().active.load()
    }
    /// Enters the hotplug lock's atomic read side from the calling CPU:
    /// code that picks a CPU from the online mask and then touches its
    /// state holds the guard across both, and reads the mask through
    /// [`HotplugReadGuard::online`].
    fn hotplug_read(&self) -> HotplugReadGuard<'_> {
        let here = self.rcu().this_cpu().map(cpu_id);
        self.subsystems().hotplug_read.enter(here)
    }
    /// Puts `cpu` in or out of the online mask.
    fn set_online(&self, cpu: CpuId, online: bool) {
        self.subsystems().online.set(cpu, online);
    }
    /// Puts `cpu` in or out of the active mask.
    fn set_active(&self, cpu: CpuId, active: bool) {
        self.subsystems().active.set(cpu, active);
    }
    /// Opens `cpu`'s run queue to tasks.
    fn open_queue(&self, cpu: CpuId);
    /// Closes `cpu`'s run queue and returns what it held.
    fn close_queue(&self, cpu: CpuId) -> Vec<Self::Task>;

    // ----- placing what a leaving CPU held -----
    // One policy for every platform ([`crate::placement`]): `cpu` first,
    // then the CPUs after it that may take the item, and what has nowhere
    // to go waits in the limbo until a CPU becomes active.

    /// Puts `task` on `cpu`'s run queue if it is open, else gives it back.
    fn offer_task(&self, cpu: CpuId, task: Self::Task) -> Result<(), Self::Task>;
    /// Queues `task`, migrated off a leaving CPU, on `cpu` or the next
    /// active CPU that takes it. Unlike the others it does not wake the
    /// CPU: the callbacks wake each CPU they pushed to once, after the
    /// whole batch ([`wake_cpu`]), as one reschedule IPI serves a CPU
    /// that receives many tasks.
    ///
    /// [`wake_cpu`]: StepKernel::wake_cpu
    fn push_task(&self, cpu: usize, task: Self::Task) {
        let taken = place(cpu, self.active_mask(), task, |cpu, task| {
            self.offer_task(cpu_id(cpu), task)
        });
        if let Err(task) = taken {
            self.limbo().keep(Waiting::Task(task));
        }
    }
    /// Queues `work`, left on a leaving CPU, on `cpu` or the next online
    /// CPU whose pool takes it, and wakes that CPU.
    fn queue_work(&self, cpu: usize, work: Work<Self::Job>) {
        let pools = self.workqueue();
        let reader = self.hotplug_read();
        let online = reader.online(self.online_mask());
        let taken = place(cpu, online, work, |cpu, work| {
            self.without_interrupts(|| pools.queue(cpu, work))
        });
        drop(reader);
        match taken {
            Ok(cpu) => self.wake_cpu(cpu_id(cpu)),
            Err(work) => self.limbo().keep(Waiting::Work(work)),
        }
    }
    /// Arms `timer`, left on a leaving CPU, on `cpu` or the next online
    /// CPU whose base takes it, and wakes that CPU.
    fn arm_timer(&self, cpu: usize, timer: Timer<Self::Job>) {
        let bases = self.timers();
        let reader = self.hotplug_read();
        let online = reader.online(self.online_mask());
        let taken = place(cpu, online, timer, |cpu, timer| {
            self.without_interrupts(|| bases.arm(cpu, timer))
        });
        drop(reader);
        match taken {
            Ok(cpu) => self.wake_cpu(cpu_id(cpu)),
            Err(timer) => self.limbo().keep(Waiting::Timer(timer)),
        }
    }
    /// A CPU became active: everything in the limbo is placed again
    /// ([`place_waiting`]).
    fn cpus_activated(&self) {
        place_waiting(self);
    }
    /// Wakes `cpu` so that it looks at its threads again.
    fn wake_cpu(&self, cpu: CpuId);

    // ----- grace periods and RCU callbacks ([`crate::rcu::callbacks`]) -----

    /// What drives the kernel's grace periods.
    fn rcu(&self) -> &Self::Rcu;
    /// Every CPU's RCU callback list.
    fn rcu_callbacks(&self) -> &Lists<Self::Job> {
        &self.subsystems().rcu_callbacks
    }
    /// Whether grace periods wait for `cpu` (the `rcu:starting` step).
    fn rcu_set_online(&self, cpu: usize, online: bool) {
        self.rcu().set_online(cpu, online);
    }
    /// Waits for a normal grace period.
    fn synchronize_rcu(&self) {
        self.rcu().synchronize();
    }
    /// Runs `callback` after a grace period (Linux's `call_rcu`): on
    /// `cpu`'s list or the next online CPU's that takes it, waking that CPU
    /// unless it is the caller's; in the limbo if none does. Only online
    /// CPUs' lists take it, `cpu`'s too: bolt keeps an offline CPU's list.
    fn call_rcu(&self, cpu: usize, callback: RcuCallback<Self::Job>) {
        let lists = self.rcu_callbacks();
        let gp = self.rcu().request();
        // Inside the read side from the mask's read to the list's insert:
        // a CPU going down without a stop-machine waits for this reader
        // before its dying steps, and `rcu:data` then moves what it queued.
        let reader = self.hotplug_read();
        let online = reader.online(self.online_mask());
        let taken = place(cpu, online, callback, |cpu, callback| {
            if !online.contains(cpu_id(cpu)) {
                return Err(callback);
            }
            self.without_interrupts(|| lists.call(cpu, gp, callback))
        });
        drop(reader);
        match taken {
            Ok(cpu) if self.rcu().this_cpu() != Some(cpu) => self.wake_cpu(cpu_id(cpu)),
            Ok(_) => {}
            Err(callback) => self.limbo().keep(Waiting::Callback(callback)),
        }
    }
    /// Runs `free` after a grace period: [`call_rcu`](Self::call_rcu) on the
    /// calling CPU's list (CPU 0's for a thread that is no CPU).
    fn defer_free(&self, free: Box<dyn FnOnce() + Send>) {
        let here = self.rcu().this_cpu().unwrap_or(0);
        self.call_rcu(here, RcuCallback::Free(free));
    }
    /// Creates `cpu`'s RCU callback list; false if it has one.
    fn rcu_create_data(&self, cpu: usize) -> bool {
        let lists = self.rcu_callbacks();
        self.without_interrupts(|| lists.create(cpu))
    }
    /// Moves `cpu`'s RCU callbacks to `heir`, their grace periods
    /// unchanged, and wakes `heir` if any moved (Linux's
    /// `rcutree_migrate_callbacks`).
    fn rcu_migrate(&self, cpu: usize, heir: usize) {
        let lists = self.rcu_callbacks();
        if self.without_interrupts(|| lists.migrate(cpu, heir)) > 0 {
            self.wake_cpu(cpu_id(heir));
        }
    }
    /// Frees `cpu`'s (empty) RCU callback list; false if it had none.
    fn rcu_free_data(&self, cpu: usize) -> bool {
        let lists = self.rcu_callbacks();
        self.without_interrupts(|| lists.free(cpu))
    }

    // ----- what the invariant check reads ([`invariants::check`]) -----

    /// Whether `cpu` is powered: the platform's
    /// [`Lifecycle`](crate::power::Lifecycle) says it is alive.
    fn is_powered(&self, cpu: CpuId) -> bool;
    /// `cpu`'s run queue: the tasks it holds, and whether it takes tasks.
    fn queue_state(&self, cpu: CpuId) -> (usize, bool);
    /// Whether grace periods wait for `cpu` (what
    /// [`rcu_set_online`](StepKernel::rcu_set_online) said last).
    fn rcu_is_online(&self, cpu: usize) -> bool {
        self.rcu().is_online(cpu)
    }
    /// The RCU callbacks queued on `cpu`, ready or still waiting for their
    /// grace period; `None` if `cpu` has no callback list.
    fn rcu_queued(&self, cpu: usize) -> Option<usize> {
        let lists = self.rcu_callbacks();
        self.without_interrupts(|| lists.exists(cpu).then(|| lists.pending(cpu)))
    }

    // ----- the platform's own -----

    /// Makes `cpu`'s kernel thread `role` (not yet installed); `None` if
    /// it cannot.
    fn spawn_kthread(&self, cpu: CpuId, role: Role) -> Option<Self::Thread>;
    /// Gives `cpu` its trace buffer; false if it has one.
    fn trace_buffer_create(&self, cpu: CpuId) -> bool;
    /// Flushes `cpu`'s trace buffer and frees it unless `keep`; true if it
    /// had one.
    fn trace_buffer_retire(&self, cpu: CpuId, keep: bool) -> bool;
    /// Creates the sysfs nodes of `cpus`; returns the CPUs that had none.
    fn sysfs_create(&self, cpus: CpuSet) -> CpuSet;
    /// Removes the sysfs nodes of `cpus`; returns the CPUs that had some.
    fn sysfs_remove(&self, cpus: CpuSet) -> CpuSet;
    /// Starts or stops the calling CPU's tick (bare metal: the local APIC
    /// timer); called on the CPU itself, in the `Starting` section.
    fn cpu_tick(&self, cpu: CpuId, running: bool) {
        let _ = (cpu, running);
    }
}

/// Places everything in `kernel`'s limbo again, from the first active CPU
/// on; what still finds no CPU waits on.
pub fn place_waiting<K: StepKernel + ?Sized>(kernel: &K) {
    let Some(first) = kernel.active_mask().first().map(CpuId::index) else {
        return;
    };
    for item in kernel.limbo().take() {
        match item {
            Waiting::Task(task) => {
                let taken = place(first, kernel.active_mask(), task, |cpu, task| {
                    kernel.offer_task(cpu_id(cpu), task)
                });
                match taken {
                    Ok(cpu) => kernel.wake_cpu(cpu_id(cpu)),
                    Err(task) => kernel.limbo().keep(Waiting::Task(task)),
                }
            }
            Waiting::Work(work) => kernel.queue_work(first, work),
            Waiting::Timer(timer) => kernel.arm_timer(first, timer),
            Waiting::Callback(callback) => kernel.call_rcu(first, callback),
        }
    }
}
