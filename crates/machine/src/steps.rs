//! The machine's hotplug steps: each subsystem's startup and teardown, and
//! its class with the reason for it, as Bolt (ATC 2015) classified the
//! callbacks of Linux's hotplug state machine (kernel/cpu.c).
//!
//! Both engines run exactly these callbacks. What differs is what the
//! engine tells them (`Reuse::No` — free and destroy; `Reuse::Yes` — keep
//! and park) and when it runs them (now, or on the deferred worker).

use hotkern_cpuhp::{
    CallbackError, Class, Context as StepContext, CpuId, CpuSet, Reuse, Section, StepSpec,
};

use hotkern_kernel::audit::Resource;
use hotkern_kernel::kthread::Role;

use crate::kernel::Kernel;

type Callback = fn(&Kernel, &StepContext) -> Result<(), CallbackError>;

/// One row of the machine's step table.
pub(crate) struct StepDef {
    pub(crate) spec: StepSpec,
    /// Why the step has its class.
    pub(crate) reason: &'static str,
    pub(crate) startup: Option<Callback>,
    pub(crate) teardown: Option<Callback>,
}

const fn step(
    name: &'static str,
    section: Section,
    class: Class,
    reason: &'static str,
    startup: Option<Callback>,
    teardown: Option<Callback>,
) -> StepDef {
    StepDef {
        spec: StepSpec::new(name, section, class),
        reason,
        startup,
        teardown,
    }
}

use Class::{Critical, Deferrable};
use Section::{Online, Prepare, Starting};

/// The table, in startup order (teardowns run in exact reverse).
pub(crate) const STEPS: [StepDef; 16] = [
    // ----- Prepare: on the controlling thread, before power-on / after power-off.
    step(
        "threads:create",
        Prepare,
        Deferrable,
        "a CPU's kernel threads only run when it dispatches them; creating or destroying them is bookkeeping",
        Some(threads_create_up),
        Some(threads_create_down),
    ),
    step(
        "trace:buffer",
        Prepare,
        Deferrable,
        "a CPU without a trace buffer drops its events; allocating or flushing the buffer can wait",
        Some(trace_up),
        Some(trace_down),
    ),
    step(
        "mm:pagecache",
        Prepare,
        Deferrable,
        "allocation falls back to the shared pool while a CPU has no cache; draining an offline CPU's frames can wait",
        Some(pagecache_up),
        Some(pagecache_down),
    ),
    step(
        "mm:vmstat",
        Prepare,
        Deferrable,
        "readers skip a CPU without counters; folding a dead CPU's counters after a grace period can wait",
        Some(vmstat_up),
        Some(vmstat_down),
    ),
    step(
        "workqueue:pool",
        Prepare,
        Critical,
        "the critical online step binds this pool, and its teardown rescues work left on a dead CPU",
        Some(pool_up),
        Some(pool_down),
    ),
    step(
        "timers:base",
        Prepare,
        Critical,
        "state migration: a dead CPU's pending timers must move to a live CPU or they never fire",
        Some(timer_base_up),
        Some(timer_base_down),
    ),
    step(
        "rcu:data",
        Prepare,
        Critical,
        "state migration: RCU callbacks queued on a dead CPU must move or they never run",
        Some(rcu_data_up),
        Some(rcu_data_down),
    ),
    // ----- Starting: on the target, inside stop-machine; cannot fail.
    step(
        "sched:online-mask",
        Starting,
        Critical,
        "bitmask update: the online mask says where anything may run",
        Some(online_mask_up),
        Some(online_mask_down),
    ),
    step(
        "timers:starting",
        Starting,
        Critical,
        "a dying CPU's timer base must stop firing before the CPU stops",
        Some(timers_starting_up),
        Some(timers_starting_down),
    ),
    step(
        "rcu:starting",
        Starting,
        Critical,
        "grace periods must stop waiting for a CPU that will pass no more quiescent states",
        Some(rcu_starting_up),
        Some(rcu_starting_down),
    ),
    step(
        "sched:starting",
        Starting,
        Critical,
        "state migration: any task still queued moves off before the CPU stops",
        None,
        Some(sched_starting_down),
    ),
    // ----- Online: on the target's hotplug thread while it is online.
    step(
        "threads:unpark",
        Online,
        Deferrable,
        "parking made asynchronous: a thread of an offline CPU cannot be dispatched anyway",
        Some(threads_unpark_up),
        Some(threads_unpark_down),
    ),
    step(
        "sysfs:nodes",
        Online,
        Deferrable,
        "sysfs access is checked at open, so creating and removing nodes can wait",
        Some(sysfs_up),
        Some(sysfs_down),
    ),
    step(
        "workqueue:online",
        Online,
        Critical,
        "state migration: pending work moves to a live CPU, and a new CPU starts taking work",
        Some(workqueue_online_up),
        Some(workqueue_online_down),
    ),
    step(
        "sched:domains",
        Online,
        Critical,
        "re-organisation: load balancing must not place tasks on a CPU that is leaving",
        Some(domains_up),
        Some(domains_down),
    ),
    step(
        "sched:active",
        Online,
        Critical,
        "state migration and bitmask: queued tasks move off and the scheduler stops choosing the CPU",
        Some(active_up),
        Some(active_down),
    ),
];

fn each(ctx: &StepContext) -> impl Iterator<Item = usize> + '_ {
    ctx.cpus.iter().map(|cpu| cpu.index())
}

fn keeps(ctx: &StepContext) -> bool {
    ctx.reuse == Reuse::Yes
}

// ----- threads -----

fn threads_create_up(k: &Kernel, ctx: &StepContext) -> Result<(), CallbackError> {
    let mut made = Vec::new();
    for cpu in each(ctx) {
        for role in Role::ALL {
            let mut slot = k.kthreads[cpu].slot(role).lock();
            if slot.is_some() {
                continue; // kept by an earlier teardown: reuse it
            }
            match k.spawn_kthread(cpu, role) {
                Ok(thread) => {
                    *slot = Some(thread);
                    k.audit.created(Resource::Kthread(role), cpu);
                    made.push((cpu, role));
                }
                Err(_) => {
                    drop(slot);
                    // Leave things as they were for this call.
                    for (cpu, role) in made {
                        if let Some(thread) = k.kthreads[cpu].slot(role).lock().take() {
                            thread.stop();
                            k.audit.destroyed(Resource::Kthread(role), cpu);
                        }
                    }
                    return Err(CallbackError::new("cannot create a kernel thread"));
                }
            }
        }
    }
    Ok(())
}

fn threads_create_down(k: &Kernel, ctx: &StepContext) -> Result<(), CallbackError> {
    if keeps(ctx) {
        for cpu in each(ctx) {
            for role in Role::ALL {
                if let Some(thread) = k.kthreads[cpu].slot(role).lock().as_ref() {
                    thread.park();
                }
            }
        }
        return Ok(());
    }
    // Tell every thread to exit first, then join them all: they exit in
    // parallel rather than one after the other.
    let mut leaving = Vec::new();
    for cpu in each(ctx) {
        for role in Role::ALL {
            if let Some(thread) = k.kthreads[cpu].slot(role).lock().take() {
                thread.request_stop();
                leaving.push((cpu, role, thread));
            }
        }
    }
    for (cpu, role, thread) in leaving {
        thread.stop();
        k.audit.destroyed(Resource::Kthread(role), cpu);
    }
    Ok(())
}

fn threads_unpark_up(k: &Kernel, ctx: &StepContext) -> Result<(), CallbackError> {
    for cpu in each(ctx) {
        for role in Role::ALL {
            if let Some(thread) = k.kthreads[cpu].slot(role).lock().as_ref() {
                thread.unpark();
            }
        }
        k.doorbells.ring(cpu);
    }
    Ok(())
}

fn threads_unpark_down(k: &Kernel, ctx: &StepContext) -> Result<(), CallbackError> {
    for cpu in each(ctx) {
        for role in Role::ALL {
            if let Some(thread) = k.kthreads[cpu].slot(role).lock().as_ref() {
                thread.park();
            }
        }
    }
    Ok(())
}

// ----- trace buffers, page caches, counters -----

fn trace_up(k: &Kernel, ctx: &StepContext) -> Result<(), CallbackError> {
    for cpu in each(ctx) {
        if k.events.create(cpu) {
            k.audit.created(Resource::EventLog, cpu);
        }
    }
    Ok(())
}

fn trace_down(k: &Kernel, ctx: &StepContext) -> Result<(), CallbackError> {
    for cpu in each(ctx) {
        if k.events.retire(cpu, keeps(ctx)) && !keeps(ctx) {
            k.audit.destroyed(Resource::EventLog, cpu);
        }
    }
    Ok(())
}

fn pagecache_up(k: &Kernel, ctx: &StepContext) -> Result<(), CallbackError> {
    for cpu in each(ctx) {
        if k.pages.create(cpu) {
            k.audit.created(Resource::PageCache, cpu);
        }
    }
    Ok(())
}

fn pagecache_down(k: &Kernel, ctx: &StepContext) -> Result<(), CallbackError> {
    for cpu in each(ctx) {
        k.pages.drain(cpu);
        if !keeps(ctx) && k.pages.free(cpu) {
            k.audit.destroyed(Resource::PageCache, cpu);
        }
    }
    Ok(())
}

fn vmstat_up(k: &Kernel, ctx: &StepContext) -> Result<(), CallbackError> {
    for cpu in each(ctx) {
        if k.vmstat.create(cpu) {
            k.audit.created(Resource::Vmstat, cpu);
        }
    }
    Ok(())
}

fn vmstat_down(k: &Kernel, ctx: &StepContext) -> Result<(), CallbackError> {
    if keeps(ctx) {
        return Ok(());
    }
    // One grace period covers every CPU of the call.
    for cpu in k.vmstat.retire(ctx.cpus, &k.rcu).iter() {
        k.audit.destroyed(Resource::Vmstat, cpu.index());
    }
    Ok(())
}

// ----- workqueue -----

fn pool_up(k: &Kernel, ctx: &StepContext) -> Result<(), CallbackError> {
    for cpu in each(ctx) {
        if k.workqueue.create(cpu) {
            k.audit.created(Resource::WorkerPool, cpu);
        }
    }
    Ok(())
}

fn pool_down(k: &Kernel, ctx: &StepContext) -> Result<(), CallbackError> {
    let heir = k.heir(ctx.cpus).unwrap_or(0);
    for cpu in each(ctx) {
        let stranded = if keeps(ctx) {
            k.workqueue.unbind(cpu)
        } else {
            let left = k.workqueue.free(cpu);
            if left.is_some() {
                k.audit.destroyed(Resource::WorkerPool, cpu);
            }
            left
        };
        for work in stranded.unwrap_or_default() {
            k.queue_work(heir, work.id, work.job);
        }
    }
    Ok(())
}

fn workqueue_online_up(k: &Kernel, ctx: &StepContext) -> Result<(), CallbackError> {
    for cpu in each(ctx) {
        if !k.workqueue.bind(cpu) {
            return Err(CallbackError::new("no worker pool to bind"));
        }
    }
    Ok(())
}

fn workqueue_online_down(k: &Kernel, ctx: &StepContext) -> Result<(), CallbackError> {
    let heir = k.heir(ctx.cpus).unwrap_or(0);
    for cpu in each(ctx) {
        for work in k.workqueue.unbind(cpu).unwrap_or_default() {
            k.queue_work(heir, work.id, work.job);
        }
    }
    Ok(())
}

// ----- timers -----

fn timer_base_up(k: &Kernel, ctx: &StepContext) -> Result<(), CallbackError> {
    for cpu in each(ctx) {
        if k.timers.create(cpu) {
            k.audit.created(Resource::TimerBase, cpu);
        }
    }
    Ok(())
}

fn timer_base_down(k: &Kernel, ctx: &StepContext) -> Result<(), CallbackError> {
    let heir = k.heir(ctx.cpus).unwrap_or(0);
    for cpu in each(ctx) {
        let mut pending = k.timers.take_all(cpu);
        if !keeps(ctx) {
            if let Some(left) = k.timers.free(cpu) {
                pending.extend(left);
                k.audit.destroyed(Resource::TimerBase, cpu);
            }
        }
        for timer in pending {
            k.arm_timer(heir, timer.deadline, timer.id, timer.job);
        }
    }
    Ok(())
}

fn timers_starting_up(k: &Kernel, ctx: &StepContext) -> Result<(), CallbackError> {
    k.timers.set_enabled(ctx.cpu.index(), true);
    Ok(())
}

fn timers_starting_down(k: &Kernel, ctx: &StepContext) -> Result<(), CallbackError> {
    k.timers.set_enabled(ctx.cpu.index(), false);
    Ok(())
}

// ----- RCU -----

fn rcu_data_up(k: &Kernel, ctx: &StepContext) -> Result<(), CallbackError> {
    for cpu in each(ctx) {
        if k.rcu.create_data(cpu) {
            k.audit.created(Resource::RcuData, cpu);
        }
    }
    Ok(())
}

fn rcu_data_down(k: &Kernel, ctx: &StepContext) -> Result<(), CallbackError> {
    let heir = k.heir(ctx.cpus).unwrap_or(0);
    for cpu in each(ctx) {
        k.rcu.migrate(cpu, heir);
        if !keeps(ctx) && k.rcu.free_data(cpu) {
            k.audit.destroyed(Resource::RcuData, cpu);
        }
    }
    Ok(())
}

fn rcu_starting_up(k: &Kernel, ctx: &StepContext) -> Result<(), CallbackError> {
    k.rcu.set_tracked(ctx.cpu.index(), true);
    Ok(())
}

fn rcu_starting_down(k: &Kernel, ctx: &StepContext) -> Result<(), CallbackError> {
    k.rcu.set_tracked(ctx.cpu.index(), false);
    Ok(())
}

// ----- scheduler -----

fn online_mask_up(k: &Kernel, ctx: &StepContext) -> Result<(), CallbackError> {
    k.set_online(ctx.cpu.index(), true);
    Ok(())
}

fn online_mask_down(k: &Kernel, ctx: &StepContext) -> Result<(), CallbackError> {
    k.set_online(ctx.cpu.index(), false);
    Ok(())
}

fn sched_starting_down(k: &Kernel, ctx: &StepContext) -> Result<(), CallbackError> {
    let cpu = ctx.cpu.index();
    let left = k.vcpus[cpu].runqueue.lock().close();
    let heir = k.heir(CpuSet::single(ctx.cpu)).unwrap_or(0);
    for task in left {
        k.push_task(heir, task);
    }
    Ok(())
}

fn sysfs_up(k: &Kernel, ctx: &StepContext) -> Result<(), CallbackError> {
    for cpu in k.sysfs.create(ctx.cpus).iter() {
        k.audit.created(Resource::SysfsNodes, cpu.index());
    }
    Ok(())
}

fn sysfs_down(k: &Kernel, ctx: &StepContext) -> Result<(), CallbackError> {
    if keeps(ctx) {
        return Ok(());
    }
    for cpu in k.sysfs.remove(ctx.cpus).iter() {
        k.audit.destroyed(Resource::SysfsNodes, cpu.index());
    }
    Ok(())
}

fn domains_up(k: &Kernel, ctx: &StepContext) -> Result<(), CallbackError> {
    let old = k.domains.add(ctx.cpus);
    // SAFETY: `defer_free` runs this after a grace period, and readers of
    // the domains are vCPUs between quiescent states.
    k.defer_free(Box::new(move || unsafe { old.free() }));
    Ok(())
}

fn domains_down(k: &Kernel, ctx: &StepContext) -> Result<(), CallbackError> {
    let old = k.domains.remove(ctx.cpus);
    // SAFETY: as in `domains_up`.
    k.defer_free(Box::new(move || unsafe { old.free() }));
    Ok(())
}

fn active_up(k: &Kernel, ctx: &StepContext) -> Result<(), CallbackError> {
    for cpu in each(ctx) {
        k.vcpus[cpu].runqueue.lock().open();
        k.set_active(cpu, true);
    }
    k.replace_limbo_if_possible();
    Ok(())
}

fn active_down(k: &Kernel, ctx: &StepContext) -> Result<(), CallbackError> {
    let leaving = ctx.cpus;
    for cpu in each(ctx) {
        k.set_active(cpu, false);
        let tasks = k.vcpus[cpu].runqueue.lock().close();
        // Spread the queue over the CPUs that stay.
        let stay = k.active_mask().difference(&leaving);
        let heirs: Vec<usize> = if stay.is_empty() {
            vec![k.heir(leaving).unwrap_or(0)]
        } else {
            stay.iter().map(CpuId::index).collect()
        };
        for (n, task) in tasks.into_iter().enumerate() {
            k.push_task(heirs[n % heirs.len()], task);
        }
    }
    Ok(())
}
