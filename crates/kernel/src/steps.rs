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
//! mechanisms a kernel holds, one [`Subsystems`](crate::subsystems::Subsystems) read through one
//! accessor (timer bases, workqueue pools, RCU callback lists, counters,
//! scheduling domains, kernel threads, the limbo, the masks, the audit),
//! its page caches, and the few things only the platform can do (spawn a
//! kernel thread; its trace buffers and sysfs nodes; offer a task to a run
//! queue and wake the CPU that gets it; drive grace periods, through
//! [`GracePeriodDriver`](crate::rcu::callbacks::GracePeriodDriver); the CPU's own tick). What must hold after every operation is checked once too
//! ([`invariants::check`]).

mod callbacks;
pub mod differential;
pub mod invariants;
mod kernel;
mod needs;

use alloc::sync::Arc;
use alloc::vec::Vec;

use hotkern_cpuhp::{
    CallbackError, Callbacks, Class, Context, CpuId, CpuSet, Engine, Hotplug, Platform, Section,
    StepId, StepSpec,
};

use callbacks::*;
pub use kernel::{place_waiting, StepKernel};
pub use needs::{Needs, Protection};

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
