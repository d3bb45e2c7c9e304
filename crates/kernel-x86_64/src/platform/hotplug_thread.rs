//! Each CPU's hotplug thread (`cpuhp/N`, as Linux's `cpuhp_thread_fun`):
//! the engine posts a step's work to it through the shared core's
//! [`Mailboxes`] and halts until it is done; the CPU's loop runs the
//! thread first at every turn when work waits for it ([`run_thread`]).

use alloc::sync::Arc;

use hotkern_cpuhp::{CpuId, CpuSet};
use hotkern_kernel::kthread::{PerCpuThread, Thread};
use hotkern_kernel::mailbox::{Mailboxes, Posted, Unfinished};

use crate::arch::cpu::MAX_CPUS;
use crate::arch::kthread::Kthread;
use crate::arch::tsc;
use crate::platform::cpus::KernelCpus;

/// How long a hotplug thread may take to run a step before the run stops.
pub const THREAD_TIMEOUT_S: u64 = 5;

/// Each CPU's hotplug thread.
static HOTPLUG_THREADS: spin::Once<PerCpuThread<Kthread>> = spin::Once::new();
/// The work posted to each CPU's hotplug thread.
static MAILBOXES: spin::Once<Mailboxes> = spin::Once::new();

/// Makes the hotplug thread of every CPU of `possible` (Linux registers
/// them for every possible CPU), each unparked for good: it runs whenever
/// work is posted to it.
pub fn install_threads(possible: CpuSet) {
    MAILBOXES.call_once(|| Mailboxes::new(MAX_CPUS));
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
fn hotplug_body(thread: &Kthread) {
    if let Some(boxes) = MAILBOXES.get() {
        boxes.run_pending(&KernelCpus, thread.cpu.index());
    }
}

/// Runs `cpu`'s hotplug thread if work was posted to it. Called by the
/// CPU's idle loop, interrupts off.
pub fn run_thread(cpu: CpuId) {
    let pending = MAILBOXES
        .get()
        .is_some_and(|boxes| boxes.has_pending(cpu.index()));
    if let Some(thread) = thread_of(cpu).filter(|_| pending) {
        thread.run();
    }
}

/// The deadline of a wait for hotplug threads.
fn deadline() -> u64 {
    tsc::nanos().saturating_add(THREAD_TIMEOUT_S * 1_000_000_000)
}

/// Runs `work` on the hotplug thread of every CPU of `cpus` (the caller's
/// own inline) and waits; a CPU without a hotplug thread is skipped and
/// named after the others ran.
pub fn run_on_each(cpus: CpuSet, work: &(dyn Fn(CpuId) + Sync)) -> Result<(), CpuId> {
    let reached: CpuSet = cpus
        .iter()
        .filter(|&cpu| thread_of(cpu).is_some())
        .collect();
    let unreached = cpus.difference(&reached);
    let Some(boxes) = MAILBOXES.get() else {
        return Err(cpus.first().unwrap_or(CpuId(0)));
    };
    boxes
        .run_on_each(&KernelCpus, reached, work, deadline())
        .map_err(|Unfinished(cpu)| cpu)?;
    unreached.first().map_or(Ok(()), Err)
}

/// Posts `*work` to the hotplug thread of every CPU of `cpus`, for
/// [`wait_for`] or [`take_back`] before `*work` goes away; a CPU not
/// started yet finds it at its first turn.
pub fn post(cpus: CpuSet, work: &&(dyn Fn(CpuId) + Sync)) -> Option<Posted> {
    Some(MAILBOXES.get()?.post(&KernelCpus, cpus, work))
}

/// Waits until every request of `posted` is done; the controller halts
/// until each thread's wake-up, as Linux's waits for a hotplug thread
/// (`wait_for_ap_thread`) sleep.
///
/// # Panics
///
/// If a thread has not finished by the deadline and cannot have its work
/// taken back: it may be running it.
pub fn wait_for(posted: Posted) {
    let Some(boxes) = MAILBOXES.get() else { return };
    if boxes.wait(&KernelCpus, &posted, deadline()).is_err() {
        take_back(posted);
    }
}

/// Takes back the requests of `posted` that no thread has claimed, and
/// waits for those a thread did claim: afterwards no CPU runs the work.
pub fn take_back(posted: Posted) {
    let Some(boxes) = MAILBOXES.get() else { return };
    if let Err(Unfinished(cpu)) = boxes.take_back(&KernelCpus, posted, deadline()) {
        panic!("cpu {}'s hotplug thread did not finish its step", cpu.0);
    }
}
