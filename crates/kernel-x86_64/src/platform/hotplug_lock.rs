//! Linux's `cpu_hotplug_lock` on this kernel's CPUs: the shared engine
//! platform's ([`Control::hotplug_lock`]), which each hotplug transition
//! takes for writing and reader tasks take across slices (`sched`),
//! needing the online mask to hold still.
//!
//! The grace period the last writer out queues (Linux's `rcu_sync_exit` →
//! `call_rcu`) is an RCU callback on this kernel's lists, as the machine's
//! is. Only the hotplug engine drives grace periods here (there is no
//! grace-period thread), so the callback runs after the next one it
//! drives; [`settle`] drives one outside any timed region, as Linux's
//! grace-period kthread does in the background between two operations.

use hotkern_kernel::hotplug::Control;

use crate::arch::console::println;
use crate::arch::smp;
use crate::arch::tsc;
use crate::platform::hotplug::control;
use crate::platform::rcu;
use crate::platform::Kernel;

/// Drives grace periods and runs their callbacks until readers are back on
/// their fast path, so that the next operation starts from a quiet lock
/// and its writer pays a whole grace period, as a lone operation does in
/// Linux. Returns false if that took longer than `timeout_us`.
pub fn settle(timeout_us: u64) -> bool {
    let Some(lock) = control().map(Control::hotplug_lock) else {
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
        Kernel::run_rcu_callbacks(
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
    control().is_none_or(|control| control.hotplug_lock().try_read(&Kernel::HANDLE))
}

/// Gives back a read hold, on any CPU.
pub fn read_unlock() {
    if let Some(control) = control() {
        control.hotplug_lock().read_unlock(&Kernel::HANDLE);
    }
}
