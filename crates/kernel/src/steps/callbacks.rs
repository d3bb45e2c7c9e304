//! The steps' startups and teardowns, over [`StepKernel`]. Each acts on
//! every CPU of its call (`ctx.cpus`: several for a bulk operation's
//! aggregated `Prepare` call) and keeps the audit's books of what it
//! created and destroyed.

use alloc::boxed::Box;
use alloc::vec::Vec;

use hotkern_cpuhp::{CallbackError, Context, CpuId, CpuSet, Reuse};

use super::{heir, StepKernel};
use crate::audit::Resource;
use crate::cpuset::cpu_id;
use crate::kthread::Role;

type Outcome = Result<(), CallbackError>;

fn each(ctx: &Context) -> impl Iterator<Item = usize> + '_ {
    ctx.cpus.iter().map(|cpu| cpu.index())
}

/// Whether the engine keeps structures and threads for the CPU's return
/// (bolt) rather than freeing them (classic).
fn keeps(ctx: &Context) -> bool {
    ctx.reuse == Reuse::Yes
}

/// The CPU that inherits what the CPUs of `ctx` leave behind.
fn heir_of<K: StepKernel>(k: &K, leaving: CpuSet) -> usize {
    heir(k, leaving).unwrap_or(0)
}

// ----- kernel threads (Linux's smpboot threads) -----

pub(super) fn threads_create_up<K: StepKernel>(k: &K, ctx: &Context) -> Outcome {
    let mut made = Vec::new();
    for cpu in each(ctx) {
        for role in Role::ALL {
            if k.kthreads().exists(cpu, role) {
                continue; // kept by an earlier teardown: reuse it
            }
            let created = k
                .spawn_kthread(cpu_id(cpu), role)
                .is_some_and(|thread| k.kthreads().install(cpu, role, thread));
            if !created {
                // Leave things as they were for this call.
                for (cpu, role) in made {
                    if k.kthreads().remove(cpu, role) {
                        k.audit().destroyed(Resource::Kthread(role), cpu);
                    }
                }
                return Err(CallbackError::new("cannot create a kernel thread"));
            }
            k.audit().created(Resource::Kthread(role), cpu);
            made.push((cpu, role));
        }
    }
    Ok(())
}

pub(super) fn threads_create_down<K: StepKernel>(k: &K, ctx: &Context) -> Outcome {
    if keeps(ctx) {
        for cpu in each(ctx) {
            for role in Role::ALL {
                k.kthreads().park(cpu, role);
            }
        }
        return Ok(());
    }
    // Tell every thread to exit first, then destroy them all: they exit
    // in parallel rather than one after the other.
    let mut leaving = Vec::new();
    for cpu in each(ctx) {
        for role in Role::ALL {
            if k.kthreads().request_stop(cpu, role) {
                leaving.push((cpu, role));
            }
        }
    }
    for (cpu, role) in leaving {
        if k.kthreads().remove(cpu, role) {
            k.audit().destroyed(Resource::Kthread(role), cpu);
        }
    }
    Ok(())
}

pub(super) fn threads_unpark_up<K: StepKernel>(k: &K, ctx: &Context) -> Outcome {
    for cpu in each(ctx) {
        for role in Role::ALL {
            k.kthreads().unpark(cpu, role);
        }
        k.wake_cpu(cpu_id(cpu));
    }
    Ok(())
}

pub(super) fn threads_unpark_down<K: StepKernel>(k: &K, ctx: &Context) -> Outcome {
    for cpu in each(ctx) {
        for role in Role::ALL {
            k.kthreads().park(cpu, role);
        }
    }
    Ok(())
}

// ----- trace buffers, page caches, counters -----

pub(super) fn trace_up<K: StepKernel>(k: &K, ctx: &Context) -> Outcome {
    for cpu in each(ctx) {
        if k.trace_buffer_create(cpu_id(cpu)) {
            k.audit().created(Resource::EventLog, cpu);
        }
    }
    Ok(())
}

pub(super) fn trace_down<K: StepKernel>(k: &K, ctx: &Context) -> Outcome {
    for cpu in each(ctx) {
        if k.trace_buffer_retire(cpu_id(cpu), keeps(ctx)) && !keeps(ctx) {
            k.audit().destroyed(Resource::EventLog, cpu);
        }
    }
    Ok(())
}

pub(super) fn pagecache_up<K: StepKernel>(k: &K, ctx: &Context) -> Outcome {
    let pages = k.pages().ok_or(CallbackError::new("no page pool"))?;
    for cpu in each(ctx) {
        if k.without_interrupts(|| pages.create(cpu)) {
            k.audit().created(Resource::PageCache, cpu);
        }
    }
    Ok(())
}

pub(super) fn pagecache_down<K: StepKernel>(k: &K, ctx: &Context) -> Outcome {
    let pages = k.pages().ok_or(CallbackError::new("no page pool"))?;
    for cpu in each(ctx) {
        k.without_interrupts(|| pages.drain(cpu));
        if !keeps(ctx) && k.without_interrupts(|| pages.free(cpu)) {
            k.audit().destroyed(Resource::PageCache, cpu);
        }
    }
    Ok(())
}

pub(super) fn vmstat_up<K: StepKernel>(k: &K, ctx: &Context) -> Outcome {
    for cpu in each(ctx) {
        if k.vmstat().create(cpu) {
            k.audit().created(Resource::Vmstat, cpu);
        }
    }
    Ok(())
}

pub(super) fn vmstat_down<K: StepKernel>(k: &K, ctx: &Context) -> Outcome {
    if keeps(ctx) {
        return Ok(());
    }
    // One grace period covers every CPU of the call.
    for cpu in k.vmstat().retire(ctx.cpus, || k.synchronize_rcu()).iter() {
        k.audit().destroyed(Resource::Vmstat, cpu.index());
    }
    Ok(())
}

// ----- workqueue -----

pub(super) fn pool_up<K: StepKernel>(k: &K, ctx: &Context) -> Outcome {
    for cpu in each(ctx) {
        if k.workqueue().create(cpu) {
            k.audit().created(Resource::WorkerPool, cpu);
        }
    }
    Ok(())
}

pub(super) fn pool_down<K: StepKernel>(k: &K, ctx: &Context) -> Outcome {
    let heir = heir_of(k, ctx.cpus);
    for cpu in each(ctx) {
        let stranded = if keeps(ctx) {
            k.workqueue().unbind(cpu)
        } else {
            let left = k.workqueue().free(cpu);
            if left.is_some() {
                k.audit().destroyed(Resource::WorkerPool, cpu);
            }
            left
        };
        for work in stranded.unwrap_or_default() {
            k.queue_work(heir, work);
        }
    }
    Ok(())
}

pub(super) fn workqueue_online_up<K: StepKernel>(k: &K, ctx: &Context) -> Outcome {
    for cpu in each(ctx) {
        if !k.workqueue().bind(cpu) {
            return Err(CallbackError::new("no worker pool to bind"));
        }
    }
    Ok(())
}

pub(super) fn workqueue_online_down<K: StepKernel>(k: &K, ctx: &Context) -> Outcome {
    let heir = heir_of(k, ctx.cpus);
    for cpu in each(ctx) {
        for work in k.workqueue().unbind(cpu).unwrap_or_default() {
            k.queue_work(heir, work);
        }
    }
    Ok(())
}

// ----- timers -----

pub(super) fn timer_base_up<K: StepKernel>(k: &K, ctx: &Context) -> Outcome {
    for cpu in each(ctx) {
        if k.timers().create(cpu) {
            k.audit().created(Resource::TimerBase, cpu);
        }
    }
    Ok(())
}

pub(super) fn timer_base_down<K: StepKernel>(k: &K, ctx: &Context) -> Outcome {
    let heir = heir_of(k, ctx.cpus);
    for cpu in each(ctx) {
        let mut pending = k.timers().take_all(cpu);
        if !keeps(ctx) {
            if let Some(left) = k.timers().free(cpu) {
                pending.extend(left);
                k.audit().destroyed(Resource::TimerBase, cpu);
            }
        }
        for timer in pending {
            k.arm_timer(heir, timer);
        }
    }
    Ok(())
}

pub(super) fn timers_starting_up<K: StepKernel>(k: &K, ctx: &Context) -> Outcome {
    k.timers().set_enabled(ctx.cpu.index(), true);
    k.cpu_tick(ctx.cpu, true);
    Ok(())
}

pub(super) fn timers_starting_down<K: StepKernel>(k: &K, ctx: &Context) -> Outcome {
    k.cpu_tick(ctx.cpu, false);
    k.timers().set_enabled(ctx.cpu.index(), false);
    Ok(())
}

// ----- RCU -----

pub(super) fn rcu_data_up<K: StepKernel>(k: &K, ctx: &Context) -> Outcome {
    for cpu in each(ctx) {
        if k.rcu_create_data(cpu) {
            k.audit().created(Resource::RcuData, cpu);
        }
    }
    Ok(())
}

pub(super) fn rcu_data_down<K: StepKernel>(k: &K, ctx: &Context) -> Outcome {
    let heir = heir_of(k, ctx.cpus);
    for cpu in each(ctx) {
        k.rcu_migrate(cpu, heir);
        if !keeps(ctx) && k.rcu_free_data(cpu) {
            k.audit().destroyed(Resource::RcuData, cpu);
        }
    }
    Ok(())
}

pub(super) fn rcu_starting_up<K: StepKernel>(k: &K, ctx: &Context) -> Outcome {
    k.rcu_set_online(ctx.cpu.index(), true);
    Ok(())
}

pub(super) fn rcu_starting_down<K: StepKernel>(k: &K, ctx: &Context) -> Outcome {
    k.rcu_set_online(ctx.cpu.index(), false);
    Ok(())
}

// ----- scheduler -----

pub(super) fn online_mask_up<K: StepKernel>(k: &K, ctx: &Context) -> Outcome {
    k.set_online(ctx.cpu, true);
    Ok(())
}

pub(super) fn online_mask_down<K: StepKernel>(k: &K, ctx: &Context) -> Outcome {
    k.set_online(ctx.cpu, false);
    Ok(())
}

/// Whatever reached the dying CPU's queue since `sched:active` closed it
/// moves off (Linux's `sched_cpu_dying` migrating the last tasks).
pub(super) fn sched_starting_down<K: StepKernel>(k: &K, ctx: &Context) -> Outcome {
    let left = k.close_queue(ctx.cpu);
    let heir = heir_of(k, CpuSet::single(ctx.cpu));
    let moved = !left.is_empty();
    for task in left {
        k.push_task(heir, task);
    }
    if moved {
        k.wake_cpu(cpu_id(heir));
    }
    Ok(())
}

pub(super) fn sysfs_up<K: StepKernel>(k: &K, ctx: &Context) -> Outcome {
    for cpu in k.sysfs_create(ctx.cpus).iter() {
        k.audit().created(Resource::SysfsNodes, cpu.index());
    }
    Ok(())
}

pub(super) fn sysfs_down<K: StepKernel>(k: &K, ctx: &Context) -> Outcome {
    if keeps(ctx) {
        return Ok(());
    }
    for cpu in k.sysfs_remove(ctx.cpus).iter() {
        k.audit().destroyed(Resource::SysfsNodes, cpu.index());
    }
    Ok(())
}

pub(super) fn domains_up<K: StepKernel>(k: &K, ctx: &Context) -> Outcome {
    let old = k.domains().add(ctx.cpus);
    // SAFETY: `defer_free` runs this after a grace period, and readers of
    // the domains are CPUs between quiescent states.
    k.defer_free(Box::new(move || unsafe { old.free() }));
    Ok(())
}

pub(super) fn domains_down<K: StepKernel>(k: &K, ctx: &Context) -> Outcome {
    let old = k.domains().remove(ctx.cpus);
    // SAFETY: as in `domains_up`.
    k.defer_free(Box::new(move || unsafe { old.free() }));
    Ok(())
}

pub(super) fn active_up<K: StepKernel>(k: &K, ctx: &Context) -> Outcome {
    for cpu in each(ctx) {
        k.open_queue(cpu_id(cpu));
        k.set_active(cpu_id(cpu), true);
    }
    k.cpus_activated();
    Ok(())
}

/// The CPUs leave the active mask and their queues are spread over the
/// CPUs that stay (Linux's `sched_cpu_deactivate`, then the balancing
/// that empties the CPU).
pub(super) fn active_down<K: StepKernel>(k: &K, ctx: &Context) -> Outcome {
    let leaving = ctx.cpus;
    for cpu in each(ctx) {
        k.set_active(cpu_id(cpu), false);
        let tasks = k.close_queue(cpu_id(cpu));
        let stay = k.active_mask().difference(&leaving);
        let heirs: Vec<usize> = if stay.is_empty() {
            alloc::vec![heir_of(k, leaving)]
        } else {
            stay.iter().map(CpuId::index).collect()
        };
        let given = tasks.len().min(heirs.len());
        for (n, task) in tasks.into_iter().enumerate() {
            k.push_task(heirs[n % heirs.len()], task);
        }
        for &heir in &heirs[..given] {
            k.wake_cpu(cpu_id(heir));
        }
    }
    Ok(())
}
