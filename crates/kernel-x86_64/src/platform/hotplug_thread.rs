//! Each CPU's hotplug thread (`cpuhp/N`): the shared core's
//! [`HotplugThreads`] over this kernel's [`Kthread`]s.

use hotkern_cpuhp::{CpuId, CpuSet};
use hotkern_kernel::hotplug::HotplugThreads;

use crate::arch::cpu::MAX_CPUS;
use crate::arch::kthread::Kthread;
use crate::platform::cpus::KernelCpus;
use crate::platform::hotplug::control;

static HOTPLUG_THREADS: spin::Once<HotplugThreads<Kthread>> = spin::Once::new();

/// Makes the hotplug thread of every CPU of `possible`.
pub fn install_threads(possible: CpuSet) {
    let threads = HOTPLUG_THREADS.call_once(|| HotplugThreads::new(MAX_CPUS));
    threads.install(possible, |cpu| Kthread::new("cpuhp", cpu, hotplug_body));
}

/// A hotplug thread's turn: the posted work, if there is new work.
#[hotkern_trace::function]
fn hotplug_body(thread: &Kthread) {
    if let Some(control) = control() {
        control.run_pending(&KernelCpus, thread.cpu);
    }
}

/// Runs `cpu`'s hotplug thread if work was posted to it. Called by the
/// CPU's idle loop, interrupts off.
pub fn run_thread(cpu: CpuId) {
    if let (Some(threads), Some(control)) = (HOTPLUG_THREADS.get(), control()) {
        threads.run_if_posted(control, cpu);
    }
}
