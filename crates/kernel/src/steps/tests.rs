//! The table run by the real engine over a kernel whose platform part is
//! plain bookkeeping: what each step creates, keeps, moves and frees, with
//! both engines' `Reuse`, a failure rolled back, and nothing lost.

use alloc::collections::BTreeMap;
use alloc::sync::Arc;
use alloc::vec::Vec;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering::SeqCst};

use hotkern_cpuhp::{CpuId, CpuSet, Engine, Hotplug, Platform, PlatformError};
use hotkern_physmem::{PageCount, Pfn};

use super::*;
use crate::audit::Resource;
use crate::cpuset::{cpu_id, AtomicCpuSet};
use crate::frames::FramePool;
use crate::kthread::tests::{probe, Probe};
use crate::kthread::{Role, Thread};
use crate::pagecache::PageCaches;
use crate::rcu::callbacks::GracePeriodDriver;
use crate::sched::RunQueue;
use crate::subsystems::Subsystems;
use crate::sync::{Mutex, RawSpinlock};
use crate::timer::Timer;
use crate::workqueue::Work;

/// CPUs of the fake.
pub(crate) const CPUS: usize = 4;

/// A kernel thread's state in the fake: parked or not.
type Threads = BTreeMap<(usize, Role), bool>;

#[derive(Default)]
struct Platformish {
    traces: CpuSet,
    sysfs: CpuSet,
    /// Where each task, work item and timer went, by id.
    placed: Vec<(&'static str, u32, usize)>,
}

/// The fake's grace periods: one begins and ends when a test says so.
#[derive(Default)]
pub(crate) struct FakeRcu {
    completed: AtomicU64,
    in_progress: core::sync::atomic::AtomicBool,
    /// `synchronize` calls.
    pub(crate) synchronized: AtomicUsize,
    online: AtomicCpuSet,
    /// The CPU the caller runs on (none: the engine's thread).
    pub(crate) this_cpu: Mutex<Option<usize>>,
}

impl FakeRcu {
    /// A grace period begins: a callback queued from now on needs the
    /// next one.
    pub(crate) fn begin(&self) {
        self.in_progress.store(true, SeqCst);
    }

    /// The grace period in progress (or one that begins now) ends.
    pub(crate) fn end(&self) {
        self.in_progress.store(false, SeqCst);
        self.completed.fetch_add(1, SeqCst);
    }
}

impl GracePeriodDriver for FakeRcu {
    fn request(&self) -> u64 {
        self.completed.load(SeqCst) + 1 + u64::from(self.in_progress.load(SeqCst))
    }
    fn completed(&self) -> u64 {
        self.completed.load(SeqCst)
    }
    /// Waits out the one in progress, if any, and one more.
    fn synchronize(&self) {
        self.synchronized.fetch_add(1, SeqCst);
        let target = self.request();
        self.in_progress.store(false, SeqCst);
        self.completed.store(target, SeqCst);
    }
    fn set_online(&self, cpu: usize, online: bool) {
        self.online.set(cpu_id(cpu), online);
    }
    fn is_online(&self, cpu: usize) -> bool {
        self.online.contains(cpu_id(cpu))
    }
    fn this_cpu(&self) -> Option<usize> {
        *self.this_cpu.lock()
    }
}

/// A kernel whose platform part is bookkeeping; the kernel threads'
/// bodies run over it too (`crate::smpboot`'s tests).
pub(crate) struct Fake {
    pub(crate) shared: Subsystems<u32, u32, Probe>,
    pages: PageCaches,
    pub(crate) queues: Vec<Mutex<RunQueue<u32>>>,
    own: Mutex<Platformish>,
    /// The CPUs the platform powered ([`Inline`] powers them on and off).
    powered: Arc<AtomicCpuSet>,
    pub(crate) rcu: FakeRcu,
    /// Thread creations left before one fails.
    creations_left: AtomicUsize,
    /// Planted: sysfs nodes are never removed (a leak under classic).
    keeps_sysfs: core::sync::atomic::AtomicBool,
    /// Set while [`StepKernel::without_interrupts`] runs its closure.
    pub(crate) interrupts_off: core::sync::atomic::AtomicBool,
    /// What the kernel threads' bodies read: the clock.
    pub(crate) clock_ns: AtomicU64,
    /// What the bodies ran, in order: what, its id, and whether
    /// interrupts were off.
    pub(crate) ran: Mutex<Vec<(&'static str, u64, bool)>>,
    /// The CPUs woken, in order.
    pub(crate) woken: Mutex<Vec<usize>>,
}

impl Fake {
    /// No CPU up, nothing created.
    pub(crate) fn new() -> Fake {
        Fake {
            shared: Subsystems::new(CPUS),
            pages: PageCaches::new(CPUS, FramePool::new(Pfn(0), PageCount(4096)).unwrap()),
            queues: (0..CPUS).map(|_| Mutex::new(RunQueue::default())).collect(),
            own: Mutex::new(Platformish::default()),
            powered: Arc::new(AtomicCpuSet::default()),
            rcu: FakeRcu::default(),
            creations_left: AtomicUsize::new(usize::MAX),
            keeps_sysfs: core::sync::atomic::AtomicBool::new(false),
            interrupts_off: core::sync::atomic::AtomicBool::new(false),
            clock_ns: AtomicU64::new(0),
            ran: Mutex::new(Vec::new()),
            woken: Mutex::new(Vec::new()),
        }
    }

    /// Every kernel thread, and whether it is parked.
    fn threads(&self) -> Threads {
        (0..CPUS)
            .flat_map(|cpu| Role::ALL.map(|role| (cpu, role)))
            .filter_map(|(cpu, role)| {
                let thread = self.shared.kthreads.get(cpu, role)?;
                Some(((cpu, role), thread.is_parked()))
            })
            .collect()
    }

    /// Where the task, work item or timer with job `id` went: the CPU
    /// whose queue took the task, whose pool or base holds the item.
    fn placed(&self, what: &'static str, id: u32) -> Option<usize> {
        match what {
            "task" => self
                .own
                .lock()
                .placed
                .iter()
                .rev()
                .find(|(_, placed, _)| *placed == id)
                .map(|(_, _, cpu)| *cpu),
            "work" => (0..CPUS).find(|&cpu| {
                let mut held = Vec::new();
                while let Some(work) = self.shared.workqueue.next(cpu) {
                    held.push(work);
                }
                let found = held.iter().any(|work| work.job == id);
                held.into_iter()
                    .for_each(|work| drop(self.shared.workqueue.queue(cpu, work)));
                found
            }),
            _ => (0..CPUS).find(|&cpu| {
                let held = self.shared.timers.take_all(cpu);
                let found = held.iter().any(|timer| timer.job == id);
                held.into_iter()
                    .for_each(|timer| drop(self.shared.timers.arm(cpu, timer)));
                found
            }),
        }
    }
}

impl StepKernel for Fake {
    type Job = u32;
    type Task = u32;
    type Thread = Probe;
    type Rcu = FakeRcu;

    fn subsystems(&self) -> &Subsystems<u32, u32, Probe> {
        &self.shared
    }
    fn pages(&self) -> Option<&PageCaches> {
        Some(&self.pages)
    }
    fn without_interrupts<R>(&self, f: impl FnOnce() -> R) -> R {
        let was = self.interrupts_off.swap(true, SeqCst);
        let result = f();
        self.interrupts_off.store(was, SeqCst);
        result
    }
    fn open_queue(&self, cpu: CpuId) {
        self.queues[cpu.index()].lock().open();
    }
    fn close_queue(&self, cpu: CpuId) -> Vec<u32> {
        self.queues[cpu.index()].lock().close()
    }
    fn offer_task(&self, cpu: CpuId, task: u32) -> Result<(), u32> {
        self.queues[cpu.index()].lock().push(task)?;
        self.own.lock().placed.push(("task", task, cpu.index()));
        Ok(())
    }
    fn wake_cpu(&self, cpu: CpuId) {
        self.woken.lock().push(cpu.index());
    }
    fn rcu(&self) -> &FakeRcu {
        &self.rcu
    }
    fn is_powered(&self, cpu: CpuId) -> bool {
        self.powered.load().contains(cpu)
    }
    fn queue_state(&self, cpu: CpuId) -> (usize, bool) {
        let queue = self.queues[cpu.index()].lock();
        (queue.len(), queue.is_open())
    }
    fn spawn_kthread(&self, _cpu: CpuId, _role: Role) -> Option<Probe> {
        let left = self.creations_left.load(SeqCst);
        if left == 0 {
            return None;
        }
        self.creations_left.store(left.saturating_sub(1), SeqCst);
        Some(probe(&Arc::new(AtomicU32::new(0))))
    }
    fn trace_buffer_create(&self, cpu: CpuId) -> bool {
        let mut own = self.own.lock();
        let had = own.traces.contains(cpu);
        own.traces.insert(cpu);
        !had
    }
    fn trace_buffer_retire(&self, cpu: CpuId, keep: bool) -> bool {
        let mut own = self.own.lock();
        let had = own.traces.contains(cpu);
        if !keep {
            own.traces.remove(cpu);
        }
        had
    }
    fn sysfs_create(&self, cpus: CpuSet) -> CpuSet {
        let mut own = self.own.lock();
        let new = cpus.difference(&own.sysfs);
        own.sysfs = own.sysfs.union(&cpus);
        new
    }
    fn sysfs_remove(&self, cpus: CpuSet) -> CpuSet {
        if self.keeps_sysfs.load(SeqCst) {
            return CpuSet::EMPTY;
        }
        let mut own = self.own.lock();
        let had = cpus.intersection(&own.sysfs);
        own.sysfs = own.sysfs.difference(&cpus);
        had
    }
}

/// Runs everything where it is asked, at once: the table's callbacks do
/// not care which thread runs them. Powering a CPU on or off is a bit in
/// the fake's set.
struct Inline(Arc<AtomicCpuSet>, crate::steps::differential::StepRecorder);

impl Platform for Inline {
    fn power_on_many(&self, cpus: CpuSet) -> Result<(), PlatformError> {
        cpus.iter().for_each(|cpu| self.0.set(cpu, true));
        Ok(())
    }
    fn power_off_many(&self, cpus: CpuSet) -> Result<(), PlatformError> {
        cpus.iter().for_each(|cpu| self.0.set(cpu, false));
        Ok(())
    }
    fn now_ns(&self) -> u64 {
        0
    }
    fn run_on_each(
        &self,
        cpus: CpuSet,
        work: &(dyn Fn(CpuId) + Sync),
    ) -> Result<(), PlatformError> {
        cpus.iter().for_each(work);
        Ok(())
    }
    fn stop_machine(
        &self,
        cpus: CpuSet,
        work: &(dyn Fn(CpuId) + Sync),
    ) -> Result<(), PlatformError> {
        cpus.iter().for_each(work);
        Ok(())
    }
    fn synchronize_grace_period(&self) -> Result<(), PlatformError> {
        Ok(())
    }
    fn step_exited(&self, context: &hotkern_cpuhp::Context, result: Result<(), CallbackError>) {
        self.1.record(context, result);
    }
}

/// The fake kernel booted with every CPU online, every step up, under
/// `engine`.
fn boot(engine: Engine) -> (Arc<Fake>, Hotplug<RawSpinlock, Inline>) {
    let fake = Arc::new(Fake::new());
    let all = CpuSet::range(0, CPUS as u32);
    all.iter().for_each(|cpu| fake.powered.set(cpu, true));
    let power = Inline(
        Arc::clone(&fake.powered),
        crate::steps::differential::StepRecorder::new(),
    );
    let hotplug = super::engine::<_, _, Fake>(power, all, all, engine).unwrap();
    super::register(&hotplug, &fake).unwrap();
    (fake, hotplug)
}

fn live_on(fake: &Fake, cpu: usize) -> Vec<Resource> {
    let live = fake.shared.audit.live();
    live.iter()
        .filter(|(_, on)| on.index() == cpu)
        .map(|(resource, _)| *resource)
        .collect()
}

#[test]
fn every_row_is_named_once_and_says_why() {
    let steps = table::<Fake>();
    for (index, def) in steps.iter().enumerate() {
        assert!(!def.reason.is_empty(), "{} has no reason", def.spec.name);
        assert!(def.startup.is_some() || def.teardown.is_some());
        let earlier = &steps[..index];
        assert!(earlier.iter().all(|other| other.spec.name != def.spec.name));
    }
}

#[test]
fn classic_frees_everything_of_a_dead_cpu_and_rescues_what_it_held() {
    let (fake, hotplug) = boot(Engine::Classic);
    let resources = live_on(&fake, 2);
    assert_eq!(
        resources.len(),
        10,
        "3 threads and 7 structures: {resources:?}"
    );
    assert_eq!(fake.threads().len(), 3 * CPUS);
    // Something waits on CPU 2 when it goes.
    fake.queues[2].lock().push(7).unwrap();
    assert!(fake
        .shared
        .workqueue
        .queue(2, Work { id: 1, job: 8 })
        .is_ok());
    assert!(fake
        .shared
        .timers
        .arm(
            2,
            Timer {
                deadline: 5,
                id: 2,
                job: 9
            }
        )
        .is_ok());
    fake.shared
        .vmstat
        .with(2, |s| s.slices.fetch_add(4, SeqCst));

    hotplug.offline(CpuId(2)).unwrap();
    hotplug.flush_deferred();
    assert_eq!(live_on(&fake, 2), [], "classic frees every resource");
    assert!(!fake.online_mask().contains(CpuId(2)) && !fake.active_mask().contains(CpuId(2)));
    assert!(!fake.rcu.is_online(2));
    assert!(!fake.shared.domains.built_over().contains(CpuId(2)));
    let stay = [0, 1, 3];
    for (what, id) in [("task", 7), ("work", 8), ("timer", 9)] {
        let heir = fake.placed(what, id);
        assert!(
            heir.is_some_and(|cpu| stay.contains(&cpu)),
            "{what} went to {heir:?}"
        );
    }
    assert_eq!(
        fake.shared.vmstat.sum().slices,
        4,
        "counters folded, not lost"
    );
    assert!(
        fake.rcu.synchronized.load(SeqCst) >= 1,
        "vmstat waited for readers"
    );

    hotplug.online(CpuId(2)).unwrap();
    hotplug.flush_deferred();
    assert_eq!(live_on(&fake, 2).len(), 10);
    let threads = fake.threads();
    assert!(Role::ALL
        .iter()
        .all(|&role| threads.get(&(2, role)) == Some(&false)));
    assert!(fake.active_mask().contains(CpuId(2)) && fake.queues[2].lock().is_open());
    assert!(fake.shared.audit.violations().is_empty());
}

#[test]
fn bolt_parks_and_keeps_what_classic_frees() {
    let (fake, hotplug) = boot(Engine::Bolt);
    let created = |fake: &Fake| {
        let counts = fake.shared.audit.counts();
        counts.values().map(|c| c.created).sum::<u64>()
    };
    let before = created(&fake);
    hotplug.offline_many(CpuSet::range(1, 3)).unwrap();
    hotplug.flush_deferred();
    {
        let threads = fake.threads();
        assert!(
            [1, 2].iter().all(|&cpu| Role::ALL
                .iter()
                .all(|&role| threads.get(&(cpu, role)) == Some(&true))),
            "kept, parked"
        );
    }
    assert!(!fake.pages.is_enabled(1), "a kept cache is drained and off");
    hotplug.online_many(CpuSet::range(1, 3)).unwrap();
    hotplug.flush_deferred();
    assert_eq!(created(&fake), before, "everything was reused");
    assert!(fake.pages.is_enabled(1) && fake.shared.workqueue.is_bound(2));
}

#[test]
fn a_thread_that_cannot_be_made_leaves_nothing_behind() {
    let (fake, hotplug) = boot(Engine::Classic);
    hotplug.offline(CpuId(3)).unwrap();
    hotplug.flush_deferred();
    // The second of CPU 3's three threads cannot be created.
    fake.creations_left.store(1, SeqCst);
    assert!(hotplug.online(CpuId(3)).is_err());
    hotplug.flush_deferred();
    assert!(
        !fake.threads().keys().any(|&(cpu, _)| cpu == 3),
        "the first thread was destroyed again"
    );
    assert_eq!(live_on(&fake, 3), []);
    fake.creations_left.store(usize::MAX, SeqCst);
    hotplug.online(CpuId(3)).unwrap();
    assert_eq!(live_on(&fake, 3).len(), 10);
}

/// What no CPU takes waits in the limbo, runs nowhere meanwhile, and is
/// placed once a CPU becomes active: the one fallback of every platform.
#[test]
fn what_no_cpu_takes_waits_in_the_limbo_until_a_cpu_is_active() {
    let (fake, _hotplug) = boot(Engine::Classic);
    for cpu in 0..CPUS {
        fake.shared.workqueue.unbind(cpu);
        fake.shared.timers.set_enabled(cpu, false);
        fake.queues[cpu].lock().close();
    }
    fake.push_task(2, 7);
    fake.queue_work(2, Work { id: 1, job: 8 });
    fake.arm_timer(
        2,
        Timer {
            deadline: 5,
            id: 2,
            job: 9,
        },
    );
    assert_eq!(fake.shared.limbo.len(), 3);
    assert_eq!(fake.placed("task", 7), None);
    assert_eq!(fake.placed("work", 8), None);
    // CPU 3 comes back: everything goes there, nothing stays behind.
    fake.shared.workqueue.bind(3);
    fake.shared.timers.set_enabled(3, true);
    fake.queues[3].lock().open();
    fake.cpus_activated();
    assert!(fake.shared.limbo.is_empty());
    for (what, id) in [("task", 7), ("work", 8), ("timer", 9)] {
        assert_eq!(fake.placed(what, id), Some(3), "{what}");
    }
}

mod differential;
mod invariants;
