//! Each CPU's hotplug thread (`cpuhp/N`, as Linux's `cpuhp_thread_fun`):
//! the engine's platform posts a step's work to the CPU's slot in the
//! shared [`Control`] and halts until it is done; the CPU's loop runs the
//! thread first at every turn when work waits for it ([`run_thread`]).

use alloc::sync::Arc;

use hotkern_cpuhp::{CpuId, CpuSet};
use hotkern_kernel::hotplug::Control;
use hotkern_kernel::kthread::{PerCpuThread, Thread};

use crate::arch::cpu::MAX_CPUS;
use crate::arch::kthread::Kthread;
use crate::platform::hotplug::control;
use crate::platform::Kernel;

/// Each CPU's hotplug thread.
static HOTPLUG_THREADS: spin::Once<PerCpuThread<Kthread>> = spin::Once::new();

/// Makes the hotplug thread of every CPU of `possible` (Linux registers
/// them for every possible CPU), each unparked for good: it runs whenever
/// work is posted to it.
pub fn install_threads(possible: CpuSet) {
    let threads = HOTPLUG_THREADS.call_once(|| PerCpuThread::new(MAX_CPUS));
    for cpu in possible.iter() {
        threads.install(cpu.index(), Kthread::new("cpuhp", cpu, hotplug_body));
        threads.get(cpu.index()).inspect(|thread| thread.unpark());
    }
}

/// `cpu`'s hotplug thread, if it has one.
pub fn thread_of(cpu: CpuId) -> Option<Arc<Kthread>> {
    HOTPLUG_THREADS.get()?.get(cpu.index())
}

/// A hotplug thread's turn: the posted work, if there is new work.
#[hotkern_trace::function]
fn hotplug_body(cpu: CpuId) {
    if let Some(control) = control() {
        control.run_pending(&Kernel::HANDLE, cpu);
    }
}

/// Runs `cpu`'s hotplug thread if work was posted to it. Called by the
/// CPU's idle loop, interrupts off.
pub fn run_thread(cpu: CpuId) {
    let pending = control().is_some_and(|control: &Control| control.has_pending(cpu));
    if let Some(thread) = thread_of(cpu).filter(|_| pending) {
        thread.run();
    }
}
