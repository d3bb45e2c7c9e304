//! This kernel as hotkern-cpuhp's [`Platform`]: `Online` steps on each
//! CPU's hotplug thread (`cpuhp/N`, as Linux's `cpuhp_thread_fun`), an
//! incoming CPU's `Starting` steps posted to that thread before it starts
//! and run in its first turn (Linux's `notify_cpu_starting`: no other CPU
//! stops), a dying CPU's in [`crate::stop_machine`], grace periods from
//! [`crate::rcu`], power on as an INIT-SIPI-SIPI start and power off as a
//! park with interrupts off ([`crate::smp`]). Each failure is the engine's
//! typed [`PlatformError`], naming the operation and the CPU.

use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use hotkern_cpuhp::{
    CallbackError, Context, CpuId, CpuSet, Direction, Platform, PlatformError, PlatformOperation,
};
use hotkern_kernel::kthread::{PerCpuThread, Thread};
use hotkern_kernel::platform::Cpus;
use hotkern_kernel::steps::differential::{StepRecord, StepRecorder};

use super::{GRACE_TIMEOUT_US, THREAD_TIMEOUT_S};
use crate::cpu::MAX_CPUS;
use crate::kthread::Kthread;
use crate::stop_machine::KernelCpus;
use crate::{arch, cpu, hotplug_lock, rcu, smp, stop_machine, tsc};

/// Each CPU's hotplug thread (`cpuhp/N`), which runs `Online` steps.
static HOTPLUG_THREADS: spin::Once<PerCpuThread<Kthread>> = spin::Once::new();

/// Makes the hotplug thread of every CPU of `possible` (Linux registers
/// them for every possible CPU), each unparked for good: it runs whenever
/// work is posted to it.
pub(super) fn install_threads(possible: CpuSet) {
    let threads = HOTPLUG_THREADS.call_once(|| PerCpuThread::new(MAX_CPUS));
    for cpu in possible.iter() {
        threads.install(cpu.index(), Kthread::new("cpuhp", cpu.0, hotplug_body));
        threads.get(cpu.index()).inspect(|thread| thread.unpark());
    }
}

/// `cpu`'s hotplug thread, if it has one.
fn hotplug_thread(cpu: u32) -> Option<Arc<Kthread>> {
    HOTPLUG_THREADS.get()?.get(cpu as usize)
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
    let slot = &SLOTS[thread.cpu as usize];
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
    work(CpuId(thread.cpu));
    // Release: the work's effects are seen by the waiter, which halts
    // until this wake-up (Linux's `complete` of `st->done_up`/`done_down`).
    slot.done.store(number, Ordering::Release);
    smp::wake(slot.waiter.load(Ordering::Relaxed));
}

/// Runs `cpu`'s hotplug thread if work was posted to it. Called by the
/// CPU's idle loop, interrupts off.
pub fn run_thread(cpu: u32) {
    if let Some(thread) = hotplug_thread(cpu).filter(|t| t.is_woken()) {
        thread.run();
    }
}

/// Posts `*work` to the hotplug thread of every CPU of `cpus` but the
/// caller and wakes it; a CPU not started yet finds the work at its first
/// turn. Returns each CPU and the number of its request, for [`wait_for`],
/// which must be called before `*work` goes away, and the first CPU that
/// has no hotplug thread (nothing is posted to it).
fn post(cpus: CpuSet, work: &&(dyn Fn(CpuId) + Sync)) -> (Vec<(u32, u64)>, Option<CpuId>) {
    let me = cpu::current_id().unwrap_or(0);
    let address = work as *const &(dyn Fn(CpuId) + Sync) as usize;
    let mut posted = Vec::with_capacity(cpus.len());
    let mut unreached = None;
    for cpu in cpus.iter().filter(|cpu| cpu.0 != me) {
        let Some(thread) = hotplug_thread(cpu.0) else {
            unreached = unreached.or(Some(cpu));
            continue;
        };
        let slot = &SLOTS[cpu.index()];
        slot.work.store(address, Ordering::Relaxed);
        slot.waiter.store(me, Ordering::Relaxed);
        let number = slot.requested.load(Ordering::Relaxed) + 1;
        // Release: pairs with the acquire in `hotplug_body`.
        slot.requested.store(number, Ordering::Release);
        thread.wake();
        smp::wake(cpu.0);
        posted.push((cpu.0, number));
    }
    (posted, unreached)
}

/// Waits until every request of `posted` is done. The controller halts
/// until each thread's wake-up, as Linux's waits for a hotplug thread
/// (`wait_for_ap_thread`) sleep: a spinning virtual CPU would hold a host
/// core the target needs.
fn wait_for(posted: &[(u32, u64)]) {
    let deadline = tsc::nanos().saturating_add(THREAD_TIMEOUT_S * 1_000_000_000);
    for &(cpu, number) in posted {
        // Acquire: pairs with the release in `hotplug_body`.
        let done = || SLOTS[cpu as usize].done.load(Ordering::Acquire) == number;
        if !KernelCpus.wait_until_deadline(&done, deadline) {
            // The reference must outlive the work: a thread that may still
            // run it (a CPU that did not start may start later) leaves no
            // way to go on.
            panic!("cpu {cpu}'s hotplug thread did not finish its step");
        }
    }
}

/// Takes back the requests of `posted` that no thread has claimed, and
/// waits for those a thread did claim: afterwards no CPU runs the work.
fn take_back(posted: &[(u32, u64)]) {
    let mut running = Vec::new();
    for &(cpu, number) in posted {
        let slot = &SLOTS[cpu as usize];
        // AcqRel: pairs with the thread's claim in `hotplug_body`.
        if slot.claimed.fetch_max(number, Ordering::AcqRel) >= number {
            running.push((cpu, number));
        } else {
            slot.done.store(number, Ordering::Release);
        }
    }
    wait_for(&running);
}

/// A grace period (or the hotplug lock's) that stalled, as the engine's
/// error: the console gets the whole report, as Linux's stall warning
/// (which CPUs, what each ran, for how long); the error names the first
/// CPU it waited for.
fn stalled(operation: PlatformOperation, stall: rcu::Stall) -> PlatformError {
    crate::println!("hotkern: {operation}: {stall}");
    let cpu = stall.holding_up().first().unwrap_or(CpuId(0));
    PlatformError::new(operation, cpu, "stalled the grace period")
}

/// A failure to start or stop CPUs, as the engine's error.
fn power_failed(operation: PlatformOperation, (cpu, error): (u32, smp::SmpError)) -> PlatformError {
    PlatformError::new(operation, CpuId(cpu), error.cause())
}

/// Where the engine's step calls go while the differential scenario runs.
static RECORDER: StepRecorder = StepRecorder::new();
/// Whether they are recorded now.
static RECORDING: AtomicBool = AtomicBool::new(false);

/// Starts or stops recording the engine's step calls.
pub(super) fn record_steps(on: bool) {
    RECORDING.store(on, Ordering::Release);
}

/// The step calls recorded since the last take.
pub(super) fn take_steps() -> Vec<StepRecord> {
    arch::without_interrupts(|| RECORDER.take())
}

/// This kernel as the engine's platform.
pub struct KernelPlatform;

impl Platform for KernelPlatform {
    fn now_ns(&self) -> u64 {
        tsc::nanos()
    }

    fn run_on_each(
        &self,
        cpus: CpuSet,
        work: &(dyn Fn(CpuId) + Sync),
    ) -> Result<(), PlatformError> {
        let me = cpu::current_id().unwrap_or(0);
        let (posted, unreached) = post(cpus, &work);
        if cpus.contains(CpuId(me)) {
            work(CpuId(me));
        }
        wait_for(&posted);
        match unreached {
            Some(cpu) => Err(PlatformError::new(
                PlatformOperation::RunOn,
                cpu,
                "has no hotplug thread",
            )),
            None => Ok(()),
        }
    }

    fn stop_machine(
        &self,
        cpus: CpuSet,
        work: &(dyn Fn(CpuId) + Sync),
    ) -> Result<(), PlatformError> {
        stop_machine::stop_machine(cpus, work).map_err(|error| match error {
            stop_machine::StopError::Call(cpu, error) => {
                PlatformError::new(PlatformOperation::StopMachine, CpuId(cpu), error.cause())
            }
        })
    }

    /// The steps are posted to each incoming CPU's hotplug thread before
    /// it starts, and its idle loop runs that thread first, interrupts
    /// off: the CPU runs them in its first turn, as Linux's incoming CPU
    /// runs `notify_cpu_starting` on its way up, and the controller waits
    /// once, with no other CPU stopped. A CPU that does not start has its
    /// request taken back, so that it cannot run the steps if it comes
    /// later; the ones that came ran them, and the engine takes them down.
    fn bring_up(
        &self,
        cpus: CpuSet,
        work: &(dyn Fn(CpuId) + Sync),
        mark: &mut dyn FnMut(&'static str),
    ) -> Result<(), PlatformError> {
        if let Some(cpu) = cpus.iter().find(|cpu| hotplug_thread(cpu.0).is_none()) {
            return Err(PlatformError::new(
                PlatformOperation::PowerOn,
                cpu,
                "has no hotplug thread",
            ));
        }
        let (posted, _) = post(cpus, &work);
        let list: Vec<u32> = cpus.iter().map(|cpu| cpu.0).collect();
        let started = smp::start_many(&list);
        mark("power");
        match started {
            Ok(()) => {
                wait_for(&posted);
                mark("starting");
                Ok(())
            }
            Err(error) => {
                take_back(&posted);
                Err(power_failed(PlatformOperation::PowerOn, error))
            }
        }
    }

    fn synchronize_grace_period(&self) -> Result<(), PlatformError> {
        rcu::synchronize(rcu::Kind::Normal, GRACE_TIMEOUT_US)
            .map_err(|cpu| stalled(PlatformOperation::GracePeriod, cpu))
    }

    fn synchronize_grace_period_expedited(&self) -> Result<(), PlatformError> {
        rcu::synchronize(rcu::Kind::Expedited, GRACE_TIMEOUT_US)
            .map_err(|cpu| stalled(PlatformOperation::ExpeditedGracePeriod, cpu))
    }

    /// A stalled grace period gives the lock back: the engine does not
    /// unlock what it did not get.
    fn hotplug_lock(&self, expedited: bool) -> Result<(), PlatformError> {
        let kind = if expedited {
            rcu::Kind::Expedited
        } else {
            rcu::Kind::Normal
        };
        hotplug_lock::write_lock(kind, GRACE_TIMEOUT_US).map_err(|cpu| {
            hotplug_lock::write_unlock();
            stalled(PlatformOperation::HotplugLock, cpu)
        })
    }

    fn hotplug_unlock(&self) {
        hotplug_lock::write_unlock();
    }

    /// All or nothing: CPUs that came before one timed out are parked
    /// again.
    fn power_on_many(&self, cpus: CpuSet) -> Result<(), PlatformError> {
        let list: Vec<u32> = cpus.iter().map(|cpu| cpu.0).collect();
        smp::start_many(&list).map_err(|error| {
            let came: Vec<u32> = list
                .iter()
                .copied()
                .filter(|&cpu| smp::is_running(cpu))
                .collect();
            let _ = smp::offline_many(&came);
            power_failed(PlatformOperation::PowerOn, error)
        })
    }

    fn power_off_many(&self, cpus: CpuSet) -> Result<(), PlatformError> {
        let list: Vec<u32> = cpus.iter().map(|cpu| cpu.0).collect();
        smp::offline_many(&list).map_err(|error| power_failed(PlatformOperation::PowerOff, error))
    }

    /// Every step call is recorded as a `cpuhp_callback` event for each
    /// CPU it covers, where the engine makes it (Linux's
    /// `trace_cpuhp_enter`).
    fn step_entered(&self, context: &Context) {
        let up = u32::from(context.direction == Direction::Up);
        for cpu in context.cpus.iter() {
            crate::trace::cpuhp_callback::trace(cpu.0, u32::from(context.step.0), up);
        }
    }

    /// With interrupts off: a CPU holding the recorder's lock must not be
    /// called into a stop-machine whose dying steps record too.
    fn step_exited(&self, context: &Context, result: Result<(), CallbackError>) {
        if RECORDING.load(Ordering::Acquire) {
            arch::without_interrupts(|| RECORDER.record(context, result));
        }
    }
}
