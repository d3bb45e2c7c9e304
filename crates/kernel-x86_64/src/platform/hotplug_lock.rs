//! Linux's `cpu_hotplug_lock` on this kernel's CPUs: [`Control::hotplug_lock`],
//! which each hotplug transition takes for writing and reader tasks take
//! across slices (`sched`). Its grace periods are driven only by the
//! controller, so between operations [`settle`] drives them.

use hotkern_cpuhp::CpuId;
use hotkern_kernel::hotplug::{self, Control};

use crate::arch::console::println;
use crate::platform::cpus::KernelCpus;
use crate::platform::hotplug::control;
use crate::platform::{rcu, subsystems};

/// Drives grace periods until readers are back on their fast path
/// ([`hotplug::settle`]), running this CPU's ready callbacks after each;
/// false if that stalled or took longer than [`rcu::GRACE_TIMEOUT_US`].
pub fn settle() -> bool {
    let Some(lock) = control().map(Control::hotplug_lock) else {
        return true;
    };
    let cpu = crate::arch::cpu::current_id().unwrap_or(CpuId(0));
    let run_callbacks = || {
        subsystems::run_rcu_callbacks(cpu);
    };
    hotplug::settle(lock, &rcu::RCU, run_callbacks)
        .inspect_err(|unsettled| println!("hotkern: {unsettled}"))
        .is_ok()
}

/// Takes the read side if no writer holds it (Linux's `cpus_read_trylock`).
/// Called inside a task slice, between two quiescent states of the
/// caller's CPU: what lets its fast path go without a barrier.
pub fn try_read() -> bool {
    control().is_none_or(|control| control.hotplug_lock().try_read(&KernelCpus))
}

/// Gives back a read hold, on any CPU.
pub fn read_unlock() {
    if let Some(control) = control() {
        control.hotplug_lock().read_unlock(&KernelCpus);
    }
}
