//! The hotplug step table both platforms run: each subsystem's startup and
//! teardown, with its class and the reason for it, as Bolt (ATC 2015)
//! classified the callbacks of Linux's hotplug state machine
//! (kernel/cpu.c, `cpuhp_hp_states`).
//!
//! Both engines run exactly these callbacks, on the user-mode machine and
//! on the bare-metal kernel alike. What differs is what the engine tells
//! them (`Reuse::No`: free and destroy; `Reuse::Yes`: keep and park) and
//! when it runs them (now, or on the deferred worker).
//!
//! The callbacks are written once, over [`StepKernel`]: the shared
//! mechanisms a kernel holds, one [`Subsystems`] read through one
//! accessor (timer bases, workqueue pools, RCU callback lists, counters,
//! scheduling domains, kernel threads, the limbo, the masks, the audit),
//! its page caches, and the few things only the platform can do (spawn a
//! kernel thread; its trace buffers and sysfs nodes; offer a task to a run
//! queue and wake the CPU that gets it; drive grace periods, through
//! [`GracePeriodDriver`]; the CPU's own tick). What must hold after every operation is checked once too
//! ([`invariants::check`]).

mod callbacks;
pub mod differential;
pub mod invariants;
mod needs;

use alloc::boxed::Box;
use alloc::sync::Arc;
use alloc::vec::Vec;

use hotkern_cpuhp::{
    CallbackError, Callbacks, Class, Context, CpuId, CpuSet, Engine, Hotplug, Platform, Section,
    StepId, StepSpec,
};

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

use callbacks::*;
pub use needs::{Needs, Protection};

/// A kernel the step table runs on: the shared mechanisms it holds, and
/// the platform's part of bringing a CPU up and down.
///
/// Callbacks get `&K` and the engine's [`Context`]; `cpu` arguments are
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

/// A step's startup or teardown over kernel `K`.
pub type Callback<K> = fn(&K, &Context) -> Result<(), CallbackError>;

/// One row of the step table.
pub struct StepDef<K> {
    /// Name, section and class, as the engine takes them.
    pub spec: StepSpec,
    /// Why the step has its class.
    pub reason: &'static str,
    /// What it needs from the other CPUs while it runs, and why.
    pub needs: Needs,
    /// Runs as a CPU comes up; `None` does nothing.
    pub startup: Option<Callback<K>>,
    /// Runs as a CPU goes down; `None` does nothing.
    pub teardown: Option<Callback<K>>,
}

const fn step<K>(
    name: &'static str,
    section: Section,
    class: Class,
    reason: &'static str,
    needs: Needs,
    startup: Option<Callback<K>>,
    teardown: Option<Callback<K>>,
) -> StepDef<K> {
    StepDef {
        spec: StepSpec::new(name, section, class),
        reason,
        needs,
        startup,
        teardown,
    }
}

/// Steps in the table.
pub const STEP_COUNT: usize = 16;

/// The table over kernel `K`, in startup order (teardowns run in exact
/// reverse). A platform makes it a constant of its own kernel type
/// (`const STEPS: [StepDef<Kernel>; STEP_COUNT] = table();`) and hands
/// each row's spec to the engine and its callbacks to `setup`.
pub const fn table<K: StepKernel>() -> [StepDef<K>; STEP_COUNT] {
    use Class::{Critical, Deferrable};
    use Section::{Online, Prepare, Starting};
    [
        // ----- Prepare: on the controlling CPU, before power-on / after power-off.
        step(
            "threads:create",
            Prepare,
            Deferrable,
            "a CPU's kernel threads only run when it dispatches them; creating or destroying them is bookkeeping",
            Needs::new(
                Protection::OwnLocks,
                "the thread table's lock; a dead CPU's threads are never dispatched, so no one else touches them",
            ),
            Some(threads_create_up::<K>),
            Some(threads_create_down::<K>),
        ),
        step(
            "trace:buffer",
            Prepare,
            Deferrable,
            "a CPU without a trace buffer drops its events; allocating or flushing the buffer can wait",
            Needs::new(
                Protection::OwnLocks,
                "only the CPU's own events write its buffer, and it is dead; the buffer's lock covers the flush",
            ),
            Some(trace_up::<K>),
            Some(trace_down::<K>),
        ),
        step(
            "mm:pagecache",
            Prepare,
            Deferrable,
            "allocation falls back to the shared pool while a CPU has no cache; draining an offline CPU's frames can wait",
            Needs::new(
                Protection::OwnLocks,
                "a dead CPU allocates nothing more; the cache's lock covers the drain",
            ),
            Some(pagecache_up::<K>),
            Some(pagecache_down::<K>),
        ),
        step(
            "mm:vmstat",
            Prepare,
            Deferrable,
            "readers skip a CPU without counters; folding a dead CPU's counters after a grace period can wait",
            Needs::new(
                Protection::GracePeriod,
                "readers that found the counters finish within the grace period the fold waits for",
            ),
            Some(vmstat_up::<K>),
            Some(vmstat_down::<K>),
        ),
        step(
            "workqueue:pool",
            Prepare,
            Critical,
            "the critical online step binds this pool, and its teardown rescues work left on a dead CPU",
            Needs::new(
                Protection::OwnLocks,
                "the pool's lock; an unbound pool refuses work, so queuers go elsewhere",
            ),
            Some(pool_up::<K>),
            Some(pool_down::<K>),
        ),
        step(
            "timers:base",
            Prepare,
            Critical,
            "state migration: a dead CPU's pending timers must move to a live CPU or they never fire",
            Needs::new(
                Protection::OwnLocks,
                "the base's lock; a disabled base refuses timers, so armers go elsewhere",
            ),
            Some(timer_base_up::<K>),
            Some(timer_base_down::<K>),
        ),
        step(
            "rcu:data",
            Prepare,
            Critical,
            "state migration: RCU callbacks queued on a dead CPU must move or they never run",
            Needs::new(
                Protection::Readers,
                "call_rcu picks a list from the online mask and any online CPU's list takes the callback: a reader that saw the CPU must be done before this migration, or what it queues is stranded; the reader drain (or stop-machine) before the dying steps ensures it",
            ),
            Some(rcu_data_up::<K>),
            Some(rcu_data_down::<K>),
        ),
        // ----- Starting: on the target with interrupts off (going down inside a
        // stop-machine; going up as it starts, where the platform can); cannot fail.
        step(
            "sched:online-mask",
            Starting,
            Critical,
            "bitmask update: the online mask says where anything may run",
            Needs::new(
                Protection::Readers,
                "readers pick CPUs from the online mask and then touch their state: they must not see the CPU once its dying steps run, so it is hidden from them and they are drained first (or stopped)",
            ),
            Some(online_mask_up::<K>),
            Some(online_mask_down::<K>),
        ),
        step(
            "timers:starting",
            Starting,
            Critical,
            "a dying CPU's timer base and tick must stop before the CPU stops",
            Needs::new(
                Protection::DyingCpu,
                "stops the CPU's own tick, so it must run there with interrupts off; timers others still try to arm are refused by the disabled base",
            ),
            Some(timers_starting_up::<K>),
            Some(timers_starting_down::<K>),
        ),
        step(
            "rcu:starting",
            Starting,
            Critical,
            "grace periods must stop waiting for a CPU that will pass no more quiescent states",
            Needs::new(
                Protection::DyingCpu,
                "the CPU reports no quiescent state after this, so it runs there; RCU's own lock orders it with grace periods",
            ),
            Some(rcu_starting_up::<K>),
            Some(rcu_starting_down::<K>),
        ),
        step(
            "sched:starting",
            Starting,
            Critical,
            "state migration: any task still queued moves off before the CPU stops",
            Needs::new(
                Protection::OwnLocks,
                "the run queue's lock: sched:active closed the queue and a grace period passed, so no one places a task on it",
            ),
            None,
            Some(sched_starting_down::<K>),
        ),
        // ----- Online: on the target's hotplug thread while it is online.
        step(
            "threads:unpark",
            Online,
            Deferrable,
            "parking made asynchronous: a thread of an offline CPU cannot be dispatched anyway",
            Needs::new(
                Protection::OwnLocks,
                "the thread's own state; the CPU is online and runs its threads",
            ),
            Some(threads_unpark_up::<K>),
            Some(threads_unpark_down::<K>),
        ),
        step(
            "sysfs:nodes",
            Online,
            Deferrable,
            "sysfs access is checked at open, so creating and removing nodes can wait",
            Needs::new(
                Protection::OwnLocks,
                "sysfs's lock; access is checked at open",
            ),
            Some(sysfs_up::<K>),
            Some(sysfs_down::<K>),
        ),
        step(
            "workqueue:online",
            Online,
            Critical,
            "state migration: pending work moves to a live CPU, and a new CPU starts taking work",
            Needs::new(
                Protection::OwnLocks,
                "the pool's lock; binding and unbinding decide whether it takes work",
            ),
            Some(workqueue_online_up::<K>),
            Some(workqueue_online_down::<K>),
        ),
        step(
            "sched:domains",
            Online,
            Critical,
            "re-organisation: load balancing must not place tasks on a CPU that is leaving",
            Needs::new(
                Protection::GracePeriod,
                "domains are read under RCU, and the old ones are freed after a grace period",
            ),
            Some(domains_up::<K>),
            Some(domains_down::<K>),
        ),
        step(
            "sched:active",
            Online,
            Critical,
            "state migration and bitmask: queued tasks move off and the scheduler stops choosing the CPU",
            Needs::new(
                Protection::GracePeriod,
                "readers of the active mask finish within the grace period the engine waits for before the dying steps",
            ),
            Some(active_up::<K>),
            Some(active_down::<K>),
        ),
    ]
}

/// `def`'s callbacks over `kernel`, as the engine is given them. A
/// direction the row has no callback for gets one that does nothing, so
/// that every platform's engine makes, and traces, the same calls.
pub fn callbacks<K: StepKernel + Send + Sync + 'static>(
    def: &StepDef<K>,
    kernel: &Arc<K>,
) -> Callbacks {
    let bind = |own: Option<Callback<K>>| {
        let kernel = Arc::clone(kernel);
        move |ctx: &Context| own.map_or(Ok(()), |own| own(&kernel, ctx))
    };
    Callbacks::new()
        .startup(bind(def.startup))
        .teardown(bind(def.teardown))
}

/// The engine both platforms run: the shared table's rows, with
/// `platform` under it and no callbacks yet ([`register`] adds them, once
/// the CPUs of `online` can run them).
///
/// # Errors
///
/// What [`Hotplug::new`] refuses (no CPU online, a CPU outside the
/// possible set).
pub fn engine<R, P, K>(
    platform: P,
    possible: CpuSet,
    online: CpuSet,
    kind: Engine,
) -> Result<Hotplug<R, P>, hotkern_cpuhp::Error>
where
    R: lock_api::RawMutex + Sync,
    P: Platform,
    K: StepKernel,
{
    let specs: Vec<StepSpec> = table::<K>().iter().map(|def| def.spec).collect();
    Hotplug::new(platform, &specs, possible, online, kind)
}

/// Registers every row's callbacks over `kernel` on `hotplug` (made by
/// [`engine`]), in table order, each row's startup running on the online
/// CPUs as Linux's `cpuhp_setup_state` does.
///
/// # Errors
///
/// What [`Hotplug::setup`] refuses (a startup that fails, after the rows
/// before it were registered).
pub fn register<R, P, K>(
    hotplug: &Hotplug<R, P>,
    kernel: &Arc<K>,
) -> Result<(), hotkern_cpuhp::Error>
where
    R: lock_api::RawMutex + Sync,
    P: Platform,
    K: StepKernel + Send + Sync + 'static,
{
    for (step, def) in (0..).map(StepId).zip(table::<K>().iter()) {
        hotplug.setup(step, callbacks(def, kernel))?;
    }
    Ok(())
}

/// A live CPU outside `leaving` to inherit a leaving CPU's work: an active
/// one if there is one, else any online one.
pub fn heir<K: StepKernel>(kernel: &K, leaving: CpuSet) -> Option<usize> {
    let online = kernel.online_mask().difference(&leaving);
    online
        .intersection(&kernel.active_mask())
        .first()
        .or_else(|| online.first())
        .map(CpuId::index)
}

#[cfg(test)]
pub(crate) mod tests;
