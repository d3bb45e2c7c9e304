//! Linux's `cpu_hotplug_lock` on this kernel's CPUs: the shared core's
//! [`PercpuRwsem`], which each hotplug transition takes for writing (the
//! engine's `Platform::hotplug_lock`) and reader tasks take across slices
//! (`sched`), needing the online mask to hold still.
//!
//! The grace period the last writer out queues (Linux's `rcu_sync_exit` →
//! `call_rcu`) is an RCU callback on this kernel's lists, as the machine's
//! is. Only the hotplug engine drives grace periods here (there is no
//! grace-period thread), so the callback runs after the next one it
//! drives; [`settle`] drives one outside any timed region, as Linux's
//! grace-period kthread does in the background between two operations.

use alloc::boxed::Box;

use hotkern_kernel::percpu_rwsem::PercpuRwsem;

use crate::arch::console::println;
use crate::arch::smp;
use crate::arch::tsc;
use crate::platform::cpus::KernelCpus;
use crate::platform::rcu;
use crate::platform::subsystems;

static LOCK: spin::Once<PercpuRwsem> = spin::Once::new();

/// Makes the lock for CPUs `0..cpus`, once the heap exists.
pub fn init(cpus: usize) {
    LOCK.call_once(|| PercpuRwsem::new(cpus));
}

/// Takes the write side for one transition, waiting for a grace period of
/// `kind` if readers were on their fast path.
pub fn write_lock(kind: rcu::Kind, timeout_us: u64) -> Result<(), rcu::Stall> {
    let Some(lock) = LOCK.get() else {
        return Ok(());
    };
    let mut result = Ok(());
    lock.write_lock(&KernelCpus, || {
        result = rcu::synchronize(kind, timeout_us);
    });
    result
}

/// Gives the write side back, queueing the grace period after which
/// readers go fast again.
pub fn write_unlock() {
    if let Some(lock) = LOCK.get() {
        if lock.write_unlock(&KernelCpus) {
            queue_callback();
        }
    }
}

/// Queues `rcu_sync`'s callback; it queues itself again when a writer came
/// and went before it ran.
fn queue_callback() {
    subsystems::call_rcu(Box::new(|| {
        if LOCK.get().is_some_and(|lock| lock.grace_period_ended()) {
            queue_callback();
        }
    }));
}

/// Drives grace periods and runs their callbacks until readers are back on
/// their fast path, so that the next operation starts from a quiet lock
/// and its writer pays a whole grace period, as a lone operation does in
/// Linux. Returns false if that took longer than `timeout_us`.
pub fn settle(timeout_us: u64) -> bool {
    let Some(lock) = LOCK.get() else {
        return true;
    };
    let deadline = tsc::nanos().saturating_add(timeout_us.saturating_mul(1_000));
    while lock.writer_near() {
        if tsc::nanos() > deadline {
            return false;
        }
        if let Err(stall) = rcu::synchronize(rcu::Kind::Normal, timeout_us) {
            println!("hotkern: hotplug lock: {stall}");
            return false;
        }
        // The callback sits on this CPU's list, or on another's whose
        // `rcuc` thread runs it once woken.
        subsystems::run_rcu_callbacks(
            crate::arch::cpu::current_id().unwrap_or(hotkern_cpuhp::CpuId(0)),
        );
        for cpu in smp::cpus() {
            if smp::is_running(cpu) {
                smp::wake(cpu);
            }
        }
        core::hint::spin_loop();
    }
    true
}

/// Takes the read side if no writer holds it (Linux's
/// `cpus_read_trylock`). Called inside a task slice, between two
/// quiescent states of the caller's CPU: what lets its fast path go
/// without a barrier.
pub fn try_read() -> bool {
    LOCK.get().is_none_or(|lock| lock.try_read(&KernelCpus))
}

/// Gives back a read hold, on any CPU.
pub fn read_unlock() {
    if let Some(lock) = LOCK.get() {
        lock.read_unlock(&KernelCpus);
    }
}
