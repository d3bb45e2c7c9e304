//! The loop turn over a platform that records what it is asked, and over
//! the real grace periods.

use core::cell::{Cell, RefCell};
use std::vec::Vec;

use hotkern_cpuhp::CpuId;

use super::*;
use crate::platform::Cpus;
use crate::rcu::{GracePeriods, Kind};
use crate::tick::Hz;

const JIFFY: u64 = 1_000_000; // HZ=1000
/// The one CPU these loops run.
const CPU0: CpuId = CpuId(0);

/// A CPU whose work is counted out in advance; every call is logged.
/// `HALT` is its [`CpuLoop::HALT_WHEN_BUSY`].
struct Fake<const HALT: bool = false> {
    ticks: Ticks,
    now: Cell<u64>,
    leaving: bool,
    online: bool,
    kthreads: Cell<u32>,
    tasks: Cell<u32>,
    timer: Option<u64>,
    callbacks: bool,
    /// The deadline each halt was given.
    halts: RefCell<Vec<Option<u64>>>,
    log: RefCell<Vec<&'static str>>,
    /// Real grace periods to report to, if any.
    rcu: Option<GracePeriods>,
}

impl<const HALT: bool> Fake<HALT> {
    fn new() -> Self {
        let ticks = Ticks::new(Hz::DEFAULT);
        ticks.start(0, 0);
        Fake {
            ticks,
            now: Cell::new(0),
            leaving: false,
            online: true,
            kthreads: Cell::new(0),
            tasks: Cell::new(0),
            timer: None,
            callbacks: false,
            halts: RefCell::new(Vec::new()),
            log: RefCell::new(Vec::new()),
            rcu: None,
        }
    }

    fn log(&self, what: &'static str) {
        self.log.borrow_mut().push(what);
    }

    fn take_log(&self) -> Vec<&'static str> {
        self.log.take()
    }
}

fn take_one(count: &Cell<u32>) -> bool {
    let left = count.get();
    count.set(left.saturating_sub(1));
    left > 0
}

/// Grace periods' view of the fake: no CPU is "current" (the test thread
/// drives), wake-ups do nothing (the test turns the loop itself).
struct NoCpus;

impl Cpus for NoCpus {
    fn current(&self) -> Option<CpuId> {
        None
    }
    fn wake(&self, _cpu: CpuId) {}
    fn wake_threads(&self) {}
    fn wait_until(&self, condition: &dyn Fn() -> bool) {
        assert!(condition(), "a test never waits");
    }
}

impl<const HALT: bool> CpuLoop for Fake<HALT> {
    const HALT_WHEN_BUSY: bool = HALT;
    fn now_ns(&self) -> u64 {
        self.now.get()
    }
    fn ticks(&self) -> &Ticks {
        &self.ticks
    }
    fn run_calls(&self, _cpu: CpuId) -> Option<bool> {
        self.log("calls");
        (!self.leaving).then_some(false)
    }
    fn is_online(&self, _cpu: CpuId) -> bool {
        self.online
    }
    fn run_kthreads(&self, _cpu: CpuId, _now: u64) -> bool {
        let ran = take_one(&self.kthreads);
        if ran {
            self.log("kthread");
        }
        ran
    }
    fn run_task(&self, _cpu: CpuId) -> bool {
        let ran = take_one(&self.tasks);
        if ran {
            self.log("task");
        }
        ran
    }
    fn next_timer(&self, _cpu: CpuId) -> Option<u64> {
        self.timer
    }
    fn rcu_quiescent(&self, cpu: CpuId) {
        self.log("qs");
        if let Some(rcu) = &self.rcu {
            rcu.quiescent(&NoCpus, cpu);
        }
    }
    fn rcu_tick(&self, cpu: CpuId) {
        self.log("tick");
        if let Some(rcu) = &self.rcu {
            rcu.tick(&NoCpus, cpu);
        }
    }
    fn rcu_needs_cpu(&self, _cpu: CpuId) -> bool {
        self.callbacks
    }
    fn rcu_enter_idle(&self, cpu: CpuId) {
        self.log("enter idle");
        if let Some(rcu) = &self.rcu {
            rcu.enter_idle(&NoCpus, cpu);
        }
    }
    fn rcu_exit_idle(&self, cpu: CpuId) {
        self.log("exit idle");
        if let Some(rcu) = &self.rcu {
            rcu.exit_idle(cpu);
        }
    }
    fn halt(&self, _cpu: CpuId, deadline: Option<u64>, enter: &dyn Fn(), exit: &dyn Fn()) {
        self.halts.borrow_mut().push(deadline);
        enter();
        self.log("halt");
        exit();
    }
}

#[test]
fn a_busy_turn_runs_calls_tick_threads_and_a_task_each_followed_by_a_quiescent_state() {
    let cpu = Fake::<false>::new();
    cpu.now.set(JIFFY);
    cpu.kthreads.set(1);
    cpu.tasks.set(1);
    assert_eq!(turn(&cpu, CPU0), Turn::Ran);
    // Every quiescent state comes after what ran before it, never before:
    // a report ahead of the work would let a grace period end under it.
    assert_eq!(
        cpu.take_log(),
        ["calls", "qs", "tick", "kthread", "qs", "task", "qs"]
    );
    assert!(cpu.halts.borrow().is_empty(), "a busy CPU does not idle");
}

#[test]
fn a_cpu_taken_down_by_a_call_leaves_at_once() {
    let mut cpu = Fake::<false>::new();
    cpu.leaving = true;
    cpu.tasks.set(1);
    assert_eq!(turn(&cpu, CPU0), Turn::Left);
    assert_eq!(cpu.take_log(), ["calls"]);
    assert_eq!(cpu.tasks.get(), 1);
}

#[test]
fn a_cpu_not_online_only_answers_calls_then_idles() {
    let mut cpu = Fake::<false>::new();
    cpu.online = false;
    cpu.tasks.set(1);
    cpu.kthreads.set(1);
    cpu.now.set(5 * JIFFY);
    assert_eq!(turn(&cpu, CPU0), Turn::Idled);
    assert_eq!(
        cpu.take_log(),
        ["calls", "qs", "enter idle", "halt", "exit idle"]
    );
    assert_eq!((cpu.tasks.get(), cpu.kthreads.get()), (1, 1));
}

#[test]
fn an_idle_cpu_with_nothing_pending_stops_its_tick_and_sleeps_until_woken() {
    let cpu = Fake::<false>::new();
    cpu.now.set(JIFFY / 2);
    assert_eq!(turn(&cpu, CPU0), Turn::Idled);
    // No timer, no callbacks: dyntick-idle, so the halt has no deadline.
    assert_eq!(*cpu.halts.borrow(), [None]);
    assert_eq!(
        cpu.take_log(),
        ["calls", "qs", "qs", "enter idle", "halt", "exit idle"]
    );
    // Awake again, the tick runs from the next jiffy.
    assert_eq!(cpu.ticks.next(0), Some(JIFFY));
}

#[test]
fn rcu_callbacks_keep_the_tick_of_an_idle_cpu() {
    let mut cpu = Fake::<false>::new();
    cpu.callbacks = true;
    cpu.now.set(JIFFY / 2);
    turn(&cpu, CPU0);
    assert_eq!(*cpu.halts.borrow(), [Some(JIFFY)]);
}

#[test]
fn an_idle_cpu_wakes_for_its_timer_at_the_tick_it_expires_at() {
    let mut cpu = Fake::<false>::new();
    cpu.timer = Some(3 * JIFFY + 1);
    cpu.now.set(JIFFY / 2);
    turn(&cpu, CPU0);
    assert_eq!(*cpu.halts.borrow(), [Some(4 * JIFFY)]);
    // With RCU needing the tick too, the earlier of the two.
    cpu.callbacks = true;
    cpu.halts.take();
    turn(&cpu, CPU0);
    assert_eq!(*cpu.halts.borrow(), [Some(JIFFY)]);
}

#[test]
fn the_tick_runs_once_per_jiffy_from_the_loop_or_an_interrupt() {
    let cpu = Fake::<false>::new();
    assert!(!tick(&cpu, CPU0, JIFFY - 1));
    assert!(tick(&cpu, CPU0, JIFFY));
    // The loop's turn in the same jiffy finds it taken.
    cpu.now.set(JIFFY + 1);
    cpu.tasks.set(1);
    turn(&cpu, CPU0);
    assert_eq!(cpu.take_log(), ["tick", "calls", "qs", "task", "qs"]);
}

#[test]
fn a_platform_that_halts_when_busy_keeps_the_tick_through_the_halt() {
    // It halts after a busy turn, keeping its tick; only a CPU with
    // nothing runnable stops it.
    let cpu = Fake::<true>::new();
    cpu.kthreads.set(1);
    assert_eq!(turn(&cpu, CPU0), Turn::Ran);
    assert_eq!(*cpu.halts.borrow(), [Some(JIFFY)]);
    assert_eq!(turn(&cpu, CPU0), Turn::Idled);
    assert_eq!(*cpu.halts.borrow(), [Some(JIFFY), None]);
}

#[test]
fn a_busy_cpus_turns_end_a_normal_grace_period_and_its_halt_an_expedited_one() {
    let mut cpu = Fake::<false>::new();
    cpu.rcu = Some(GracePeriods::new());
    let rcu = cpu.rcu.as_ref().unwrap();
    rcu.set_online(&NoCpus, CpuId(0), true);
    let grace_period = rcu.begin(&NoCpus, Kind::Normal);
    assert!(grace_period.waiting().contains(CpuId(0)));
    // Busy at each jiffy: the first tick notices the grace period, the
    // turn's switch is a quiescent state, the next tick reports it.
    cpu.tasks.set(3);
    cpu.now.set(JIFFY);
    turn(&cpu, CPU0);
    assert!(rcu.holding_up().contains(CpuId(0)));
    cpu.now.set(2 * JIFFY);
    turn(&cpu, CPU0);
    assert!(
        rcu.holding_up().is_empty(),
        "the tick after the turn reports"
    );
    drop(grace_period);

    // Its halt is an extended quiescent state, which an expedited grace
    // period takes at once; awake again, it is no longer idle for RCU.
    let grace_period = rcu.begin(&NoCpus, Kind::Expedited);
    assert!(rcu.holding_up().contains(CpuId(0)));
    idle(&cpu, CPU0, true);
    assert!(rcu.holding_up().is_empty(), "the halt reported");
    assert!(!rcu.is_idle(CpuId(0)), "awake after its halt");
    drop(grace_period);
}

#[test]
fn a_stopped_cpu_is_quiescent_with_its_tick_stopped_until_it_starts_again() {
    let mut cpu = Fake::<false>::new();
    cpu.rcu = Some(GracePeriods::new());
    let rcu = cpu.rcu.as_ref().unwrap();
    rcu.set_online(&NoCpus, CpuId(0), true);
    stop(&cpu, CPU0);
    assert!(rcu.is_idle(CpuId(0)));
    assert_eq!(cpu.ticks.next(0), None);
    // A grace period that begins meanwhile does not wait for it.
    let grace_period = rcu.begin(&NoCpus, Kind::Expedited);
    assert!(rcu.holding_up().is_empty());
    drop(grace_period);
    cpu.now.set(JIFFY / 2);
    start(&cpu, CPU0);
    assert!(!rcu.is_idle(CpuId(0)), "awake before it runs anything");
    assert_eq!(cpu.ticks.next(0), Some(JIFFY));
    let _grace_period = rcu.begin(&NoCpus, Kind::Expedited);
    assert!(rcu.holding_up().contains(CpuId(0)));
}
