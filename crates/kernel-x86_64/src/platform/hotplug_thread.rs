//! Each CPU's hotplug thread (`cpuhp/N`, as Linux's `cpuhp_thread_fun`):
//! the engine posts a step's work to it and halts until it is done; the
//! CPU's loop runs it first at every turn ([`run_thread`]).

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

use hotkern_cpuhp::{CpuId, CpuSet};
use hotkern_kernel::kthread::{PerCpuThread, Thread};
use hotkern_kernel::platform::Cpus;

use crate::arch::cpu::{self, MAX_CPUS};
use crate::arch::kthread::Kthread;
use crate::arch::smp;
use crate::arch::tsc;
use crate::platform::cpus::KernelCpus;

/// How long the engine waits for a CPU's hotplug thread to finish a step.
pub const THREAD_TIMEOUT_S: u64 = 5;

/// Each CPU's hotplug thread (`cpuhp/N`), which runs `Online` steps.
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

/// The work posted to a CPU's hotplug thread, the numbers of the last
/// request, the last one claimed and the last one done (as [`smp`]'s
/// mailboxes), and the CPU that waits for it.
///
/// A request is run by whoever claims its number first: the thread, to
/// run it, or the controller, to take it back from a CPU that did not
/// start (which may still start later and must then not run work whose
/// owner has returned). Both claim with `fetch_max`, so exactly one wins.
struct HotplugSlot {
    work: AtomicUsize,
    requested: AtomicU64,
    claimed: AtomicU64,
    done: AtomicU64,
    waiter: AtomicU32,
}

static SLOTS: [HotplugSlot; MAX_CPUS] = [const {
    HotplugSlot {
        work: AtomicUsize::new(0),
        requested: AtomicU64::new(0),
        claimed: AtomicU64::new(0),
        done: AtomicU64::new(0),
        waiter: AtomicU32::new(0),
    }
}; MAX_CPUS];

/// A hotplug thread's turn: the posted work, if there is new work.
fn hotplug_body(thread: &Kthread) {
    let slot = &SLOTS[thread.cpu.index()];
    // Acquire: pairs with the release in `post`, which stored the work
    // first.
    let number = slot.requested.load(Ordering::Acquire);
    if slot.done.load(Ordering::Relaxed) == number {
        return;
    }
    // AcqRel: pairs with the controller's claim in `take_back`; the loser
    // of the two leaves the work alone.
    if slot.claimed.fetch_max(number, Ordering::AcqRel) >= number {
        return;
    }
    let address = slot.work.load(Ordering::Relaxed);
    // SAFETY: `post`'s caller stored the address of its `&dyn Fn` and waits
    // for `done` to reach `number` (or claims the request back) before the
    // reference goes away.
    let work = unsafe { *(address as *const &(dyn Fn(CpuId) + Sync)) };
    work(thread.cpu);
    // Release: the work's effects are seen by the waiter, which halts
    // until this wake-up (Linux's `complete` of `st->done_up`/`done_down`).
    slot.done.store(number, Ordering::Release);
    smp::wake(CpuId(slot.waiter.load(Ordering::Relaxed)));
}

/// Runs `cpu`'s hotplug thread if work was posted to it. Called by the
/// CPU's idle loop, interrupts off.
pub fn run_thread(cpu: CpuId) {
    if let Some(thread) = thread_of(cpu).filter(|t| t.is_woken()) {
        thread.run();
    }
}

/// Posts `*work` to the hotplug thread of every CPU of `cpus` but the
/// caller and wakes it; a CPU not started yet finds the work at its first
/// turn. Returns each CPU and the number of its request, for [`wait_for`],
/// which must be called before `*work` goes away, and the first CPU that
/// has no hotplug thread (nothing is posted to it).
pub fn post(cpus: CpuSet, work: &&(dyn Fn(CpuId) + Sync)) -> (Vec<(CpuId, u64)>, Option<CpuId>) {
    let me = cpu::current_id().unwrap_or(CpuId(0));
    let address = work as *const &(dyn Fn(CpuId) + Sync) as usize;
    let mut posted = Vec::with_capacity(cpus.len());
    let mut unreached = None;
    for cpu in cpus.iter().filter(|&cpu| cpu != me) {
        let Some(thread) = thread_of(cpu) else {
            unreached = unreached.or(Some(cpu));
            continue;
        };
        let slot = &SLOTS[cpu.index()];
        slot.work.store(address, Ordering::Relaxed);
        slot.waiter.store(me.0, Ordering::Relaxed);
        let number = slot.requested.load(Ordering::Relaxed) + 1;
        // Release: pairs with the acquire in `hotplug_body`.
        slot.requested.store(number, Ordering::Release);
        thread.wake();
        smp::wake(cpu);
        posted.push((cpu, number));
    }
    (posted, unreached)
}

/// Waits until every request of `posted` is done. The controller halts
/// until each thread's wake-up, as Linux's waits for a hotplug thread
/// (`wait_for_ap_thread`) sleep: a spinning virtual CPU would hold a host
/// core the target needs.
pub fn wait_for(posted: &[(CpuId, u64)]) {
    let deadline = tsc::nanos().saturating_add(THREAD_TIMEOUT_S * 1_000_000_000);
    for &(cpu, number) in posted {
        // Acquire: pairs with the release in `hotplug_body`.
        let done = || SLOTS[cpu.index()].done.load(Ordering::Acquire) == number;
        if !KernelCpus.wait_until_deadline(&done, deadline) {
            // The reference must outlive the work: a thread that may still
            // run it (a CPU that did not start may start later) leaves no
            // way to go on.
            panic!("cpu {}'s hotplug thread did not finish its step", cpu.0);
        }
    }
}

/// Takes back the requests of `posted` that no thread has claimed, and
/// waits for those a thread did claim: afterwards no CPU runs the work.
pub fn take_back(posted: &[(CpuId, u64)]) {
    let mut running = Vec::new();
    for &(cpu, number) in posted {
        let slot = &SLOTS[cpu.index()];
        // AcqRel: pairs with the thread's claim in `hotplug_body`.
        if slot.claimed.fetch_max(number, Ordering::AcqRel) >= number {
            running.push((cpu, number));
        } else {
            slot.done.store(number, Ordering::Release);
        }
    }
    wait_for(&running);
}
