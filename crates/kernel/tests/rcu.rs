//! Grace-period detection: when a grace period is over, on CPUs that are
//! std threads (the loom models are in `tests/rcu_loom.rs`).
#![cfg(not(loom))]

mod common;

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;

use common::{Bells, Cpu};
use hotkern_cpuhp::{CpuId, CpuSet};
use hotkern_kernel::platform::Cpus;
use hotkern_kernel::rcu::{GracePeriods, Kind, Unfinished};
use hotkern_kernel::tick::Hz;

/// The thread that drives grace periods, no CPU.
fn driver(bells: &Arc<Bells>) -> Cpu {
    Cpu {
        me: None,
        bells: Arc::clone(bells),
    }
}

/// CPU 0 of a one-CPU platform, driving its own grace periods.
fn only_cpu() -> Cpu {
    Cpu {
        me: Some(CpuId(0)),
        bells: Bells::new(1),
    }
}

fn set(cpus: &[u32]) -> CpuSet {
    cpus.iter().map(|&n| CpuId(n)).collect()
}

/// Grace periods over CPUs `0..n`, all online and awake.
fn online(cpus: &Cpu, n: u32) -> GracePeriods {
    let rcu = GracePeriods::new();
    for cpu in 0..n {
        rcu.set_online(cpus, CpuId(cpu), true);
    }
    rcu
}

/// Whether the grace period is over now, without sleeping.
fn over(grace_period: &hotkern_kernel::rcu::GracePeriod<'_>, cpus: &Cpu) -> Result<(), Unfinished> {
    grace_period.wait(cpus, None, &|| true)
}

/// What a busy CPU does over two ticks with a turn of its loop between.
fn tick_turn_tick(rcu: &GracePeriods, cpus: &Cpu, cpu: u32) {
    rcu.tick(cpus, CpuId(cpu));
    rcu.quiescent(cpus, CpuId(cpu));
    rcu.tick(cpus, CpuId(cpu));
}

#[test]
fn a_normal_grace_period_takes_reports_from_the_tick_after_a_noticed_one() {
    let bells = Bells::new(2);
    let me = driver(&bells);
    let rcu = online(&me, 2);
    // A report from before the grace period began does not count.
    tick_turn_tick(&rcu, &me, 0);
    let grace_period = rcu.begin(&me, Kind::Normal);
    assert_eq!(grace_period.waiting(), set(&[0, 1]));
    assert_eq!(over(&grace_period, &me), Err(Unfinished(set(&[0, 1]))));
    // A turn is not a report of a normal grace period, nor is a turn
    // before the tick noticed the grace period.
    rcu.quiescent(&me, CpuId(0));
    rcu.tick(&me, CpuId(0));
    assert_eq!(over(&grace_period, &me), Err(Unfinished(set(&[0, 1]))));
    rcu.tick(&me, CpuId(0));
    assert_eq!(over(&grace_period, &me), Err(Unfinished(set(&[0, 1]))));
    // Noticed at the first tick: the turn counts, the next tick reports.
    rcu.quiescent(&me, CpuId(0));
    rcu.tick(&me, CpuId(0));
    assert_eq!(over(&grace_period, &me), Err(Unfinished(set(&[1]))));
    assert_eq!(rcu.completed(), 0);
    tick_turn_tick(&rcu, &me, 1);
    assert_eq!(over(&grace_period, &me), Ok(()));
    grace_period.end();
    assert_eq!(rcu.completed(), 1);
    // What CPU 1 noticed was that grace period: the next needs a new tick.
    let grace_period = rcu.begin(&me, Kind::Normal);
    rcu.quiescent(&me, CpuId(1));
    rcu.tick(&me, CpuId(1));
    assert_eq!(over(&grace_period, &me), Err(Unfinished(set(&[0, 1]))));
}

#[test]
fn an_expedited_grace_period_takes_reports_from_turns_and_idle_entry() {
    let bells = Bells::new(3);
    let me = driver(&bells);
    let rcu = online(&me, 3);
    rcu.quiescent(&me, CpuId(0));
    assert!(!rcu.enter_idle(&me, CpuId(2)));
    let grace_period = rcu.begin(&me, Kind::Expedited);
    // Idle CPUs are skipped as it begins.
    assert_eq!(grace_period.waiting(), set(&[0, 1]));
    rcu.quiescent(&me, CpuId(0));
    assert_eq!(over(&grace_period, &me), Err(Unfinished(set(&[1]))));
    assert!(!rcu.enter_idle(&me, CpuId(1)));
    assert_eq!(over(&grace_period, &me), Ok(()));
    assert_eq!(rcu.fqs_scans(), 0);
}

#[test]
fn an_idle_cpu_holds_a_normal_grace_period_up_until_quiescent_states_are_forced() {
    let bells = Bells::new(2);
    let me = driver(&bells);
    let rcu = online(&me, 2);
    assert!(!rcu.enter_idle(&me, CpuId(1)));
    let grace_period = rcu.begin(&me, Kind::Normal);
    assert_eq!(grace_period.waiting(), set(&[0, 1]));
    // Going idle while it waits reports nothing by itself either.
    assert!(!rcu.enter_idle(&me, CpuId(0)));
    assert_eq!(over(&grace_period, &me), Err(Unfinished(set(&[0, 1]))));
    assert_eq!(rcu.force_quiescent_states(), CpuSet::new());
    assert_eq!(over(&grace_period, &me), Ok(()));
    grace_period.end();
    assert_eq!(rcu.fqs_scans(), 1);
    // Awake again, it is waited for.
    rcu.exit_idle(CpuId(1));
    let grace_period = rcu.begin(&me, Kind::Normal);
    assert_eq!(rcu.force_quiescent_states(), set(&[1]));
    assert_eq!(over(&grace_period, &me), Err(Unfinished(set(&[1]))));
}

#[test]
fn an_offline_cpu_does_not_hold_a_grace_period_up() {
    let bells = Bells::new(3);
    let me = driver(&bells);
    let rcu = online(&me, 3);
    rcu.set_online(&me, CpuId(2), false);
    assert!(!rcu.is_online(CpuId(2)));
    let grace_period = rcu.begin(&me, Kind::Normal);
    assert_eq!(grace_period.waiting(), set(&[0, 1]));
    tick_turn_tick(&rcu, &me, 0);
    // Its dying step, while the grace period waits for it.
    rcu.set_online(&me, CpuId(1), false);
    assert_eq!(over(&grace_period, &me), Ok(()));
}

#[test]
fn the_calling_cpu_is_quiescent_while_it_waits() {
    let cpu0 = only_cpu();
    let rcu = online(&cpu0, 1);
    assert_eq!(rcu.synchronize(&cpu0, Kind::Normal, None), Ok(()));
    assert!(!rcu.is_idle(CpuId(0)), "awake again once it returns");
    assert_eq!(rcu.completed(), 1);
}

#[test]
fn the_last_report_wakes_a_sleeping_driver() {
    let bells = Bells::new(2);
    let me = driver(&bells);
    let rcu = Arc::new(online(&me, 2));
    // Expedited: its driver sleeps until woken (a normal one's driver
    // also wakes to force quiescent states, which these bells make at once).
    let waiter = {
        let (rcu, me) = (Arc::clone(&rcu), me.clone());
        std::thread::spawn(move || rcu.synchronize(&me, Kind::Expedited, None))
    };
    while rcu.holding_up() != set(&[0, 1]) {
        assert!(!waiter.is_finished(), "ended without the busy CPUs");
        std::thread::yield_now();
    }
    rcu.quiescent(&me, CpuId(0));
    // Time for the driver to be asleep again, should the first report
    // have woken it: only the last one may be what wakes it.
    std::thread::sleep(std::time::Duration::from_millis(20));
    rcu.quiescent(&me, CpuId(1));
    assert_eq!(waiter.join().unwrap(), Ok(()));
    assert_eq!(rcu.completed(), 1);
}

#[test]
fn a_stalled_cpu_is_named_at_the_deadline_and_later_grace_periods_still_end() {
    // A millisecond a read.
    let platform = Stepping {
        now: AtomicU64::new(0),
        step: 1_000_000,
        cpu: driver(&Bells::new(2)),
    };
    let rcu = online(&platform.cpu, 2);
    rcu.enter_idle(&platform, CpuId(0));
    // Past the first forcing (3 jiffies), which finds CPU 0 idle.
    let deadline = platform.now_ns() + 20_000_000;
    assert_eq!(
        rcu.synchronize(&platform, Kind::Normal, Some(deadline))
            .map_err(|stall| stall.holding_up()),
        Err(set(&[1]))
    );
    assert_eq!(rcu.completed(), 0);
    // Dropped, not in progress: a caller now needs only the next one.
    assert_eq!(rcu.snapshot(), 1);
    rcu.enter_idle(&platform, CpuId(1));
    let deadline = platform.now_ns() + 20_000_000;
    assert_eq!(
        rcu.synchronize(&platform, Kind::Normal, Some(deadline)),
        Ok(())
    );
    assert_eq!(rcu.completed(), 1);
}

/// A platform whose clock advances by `step` nanoseconds each time it is
/// read, and whose deadline waits spin on it.
struct Stepping {
    now: AtomicU64,
    step: u64,
    cpu: Cpu,
}

impl Cpus for Stepping {
    fn current(&self) -> Option<CpuId> {
        self.cpu.current()
    }
    fn wake(&self, cpu: CpuId) {
        self.cpu.wake(cpu);
    }
    fn wake_threads(&self) {
        self.cpu.wake_threads();
    }
    fn wait_until(&self, condition: &dyn Fn() -> bool) {
        self.cpu.wait_until(condition);
    }
    fn now_ns(&self) -> u64 {
        self.now.fetch_add(self.step, SeqCst)
    }
    fn wait_until_deadline(&self, condition: &dyn Fn() -> bool, deadline_ns: u64) -> bool {
        while !condition() {
            if self.now_ns() >= deadline_ns {
                return false;
            }
        }
        true
    }
}

#[test]
fn a_normal_grace_period_on_an_idle_machine_ends_at_the_first_forcing() {
    for (hz, jiffies) in [(100, 1), (250, 1), (300, 2), (1000, 3)] {
        let hz = Hz::new(hz).unwrap();
        let platform = Stepping {
            now: AtomicU64::new(0),
            step: 10_000,
            cpu: driver(&Bells::new(2)),
        };
        let rcu = online(&platform.cpu, 2);
        rcu.set_hz(hz);
        rcu.enter_idle(&platform, CpuId(0));
        rcu.enter_idle(&platform, CpuId(1));
        assert_eq!(rcu.synchronize(&platform, Kind::Normal, None), Ok(()));
        let took = platform.now.load(SeqCst);
        // Began in jiffy 0, forced at the start of jiffy `jiffies`.
        let forced = jiffies * hz.nanos_per_jiffy();
        assert!(
            (forced..forced + 100_000).contains(&took),
            "HZ={}: took {took} ns, expected just over {forced}",
            hz.get()
        );
        assert_eq!(rcu.fqs_scans(), 1, "HZ={}", hz.get());
        // Expedited, the idle CPUs are skipped at once.
        let before = platform.now.load(SeqCst);
        assert_eq!(rcu.synchronize(&platform, Kind::Expedited, None), Ok(()));
        assert!(platform.now.load(SeqCst) - before < 100_000);
        assert_eq!(rcu.fqs_scans(), 1);
    }
}

#[test]
fn a_busy_cpu_that_reports_from_its_tick_needs_no_forcing() {
    // Each read a nanosecond: the busy thread has millions of reads'
    // time to report before the first forcing is due.
    let platform = Stepping {
        now: AtomicU64::new(0),
        step: 1,
        cpu: driver(&Bells::new(1)),
    };
    let rcu = Arc::new(online(&platform.cpu, 1));
    let started = Arc::new(AtomicU64::new(0));
    let busy = {
        let (rcu, cpu, started) = (Arc::clone(&rcu), platform.cpu.clone(), Arc::clone(&started));
        std::thread::spawn(move || {
            while rcu.completed() == 0 {
                started.store(1, SeqCst);
                tick_turn_tick(&rcu, &cpu, 0);
            }
        })
    };
    while started.load(SeqCst) == 0 {
        std::thread::yield_now();
    }
    assert_eq!(rcu.synchronize(&platform, Kind::Normal, None), Ok(()));
    busy.join().unwrap();
    assert_eq!(rcu.fqs_scans(), 0);
}

#[test]
fn an_expedite_request_turns_a_normal_grace_period_in_progress_expedited() {
    // A nanosecond a read: no forcing is due for millions of reads.
    let platform = Arc::new(Stepping {
        now: AtomicU64::new(0),
        step: 1,
        cpu: driver(&Bells::new(2)),
    });
    let rcu = Arc::new(online(&platform.cpu, 2));
    rcu.enter_idle(&platform.cpu, CpuId(1));
    let waiter = {
        let (rcu, platform) = (Arc::clone(&rcu), Arc::clone(&platform));
        std::thread::spawn(move || rcu.synchronize(&*platform, Kind::Normal, None))
    };
    while rcu.holding_up() != set(&[0, 1]) {
        std::thread::yield_now();
    }
    // Turns alone do not end a normal grace period...
    rcu.quiescent(&platform.cpu, CpuId(0));
    assert_eq!(rcu.holding_up(), set(&[0, 1]));
    // ...but once expedited, the idle CPU is found at once and the busy
    // one reports from its next turn.
    rcu.expedite(&platform.cpu);
    while rcu.holding_up().contains(CpuId(1)) {
        std::thread::yield_now();
    }
    while !waiter.is_finished() {
        rcu.quiescent(&platform.cpu, CpuId(0));
        std::thread::yield_now();
    }
    assert_eq!(waiter.join().unwrap(), Ok(()));
    assert!(
        platform.now.load(SeqCst) < 3_000_000,
        "ended before any forcing was due"
    );
}

#[test]
fn masks_and_the_sequence_read_back_what_was_set() {
    let bells = Bells::new(2);
    let me = driver(&bells);
    let rcu = online(&me, 2);
    assert!(rcu.is_online(CpuId(0)) && rcu.is_online(CpuId(1)));
    assert!(!rcu.is_idle(CpuId(1)));
    assert!(!rcu.enter_idle(&me, CpuId(1)));
    assert!(rcu.is_idle(CpuId(1)));
    assert!(rcu.enter_idle(&me, CpuId(1)), "was idle already");
    rcu.exit_idle(CpuId(1));
    assert!(!rcu.is_idle(CpuId(1)));
    // `snapshot`: the first grace period to begin after the call must end.
    assert_eq!((rcu.completed(), rcu.snapshot()), (0, 1));
    let grace_period = rcu.begin(&me, Kind::Expedited);
    // One in progress began before: the next one is needed.
    assert_eq!(rcu.snapshot(), 2);
    rcu.quiescent(&me, CpuId(0));
    rcu.quiescent(&me, CpuId(1));
    assert_eq!(over(&grace_period, &me), Ok(()));
    grace_period.end();
    assert_eq!((rcu.completed(), rcu.snapshot()), (1, 2));
}

#[test]
fn each_synchronize_waits_for_a_grace_period_of_its_own() {
    let cpu0 = only_cpu();
    let rcu = online(&cpu0, 1);
    for n in 1..=3 {
        assert_eq!(rcu.synchronize(&cpu0, Kind::Normal, None), Ok(()));
        assert_eq!(rcu.completed(), n);
    }
}

#[test]
fn a_cpu_both_idle_and_offline_is_never_waited_for() {
    let bells = Bells::new(2);
    let me = driver(&bells);
    let rcu = online(&me, 2);
    // A dead vCPU's thread sleeps idle, and its CPU is offline.
    rcu.enter_idle(&me, CpuId(1));
    rcu.set_online(&me, CpuId(1), false);
    for kind in [Kind::Normal, Kind::Expedited] {
        let grace_period = rcu.begin(&me, kind);
        assert_eq!(grace_period.waiting(), set(&[0]), "{kind:?}");
        assert_eq!(rcu.force_quiescent_states(), set(&[0]), "{kind:?}");
    }
}

/// A platform whose deadline waits spin on a stepping clock, and whose
/// CPU 1 halts and wakes between any two looks at the clock: awake at
/// every forcing scan, idle in between, as a vCPU that halts after every
/// turn runs in lock-step with the driver under QEMU's -icount
/// round-robin.
struct LockStep<'a> {
    clock: Stepping,
    rcu: &'a GracePeriods,
}

impl Cpus for LockStep<'_> {
    fn current(&self) -> Option<CpuId> {
        self.clock.current()
    }
    fn wake(&self, cpu: CpuId) {
        self.clock.wake(cpu);
    }
    fn wake_threads(&self) {
        self.clock.wake_threads();
    }
    fn wait_until(&self, condition: &dyn Fn() -> bool) {
        self.clock.wait_until(condition);
    }
    fn now_ns(&self) -> u64 {
        self.clock.now_ns()
    }
    fn wait_until_deadline(&self, condition: &dyn Fn() -> bool, deadline_ns: u64) -> bool {
        while !condition() {
            if self.now_ns() >= deadline_ns {
                return false;
            }
            self.rcu.enter_idle(self, CpuId(1));
            self.rcu.exit_idle(CpuId(1));
        }
        true
    }
}

#[test]
fn a_cpu_that_idles_between_forcing_scans_but_is_awake_at_each_is_quiescent() {
    let rcu = online(&driver(&Bells::new(2)), 2);
    let platform = LockStep {
        clock: Stepping {
            now: AtomicU64::new(0),
            step: 100_000,
            cpu: driver(&Bells::new(2)),
        },
        rcu: &rcu,
    };
    rcu.enter_idle(&platform, CpuId(0));
    // CPU 1 never ticks, never turns and is awake whenever the driver
    // looks; only its idle entries since the grace period began tell.
    let deadline = platform.now_ns() + 20_000_000;
    assert_eq!(
        rcu.synchronize(&platform, Kind::Normal, Some(deadline)),
        Ok(())
    );
    assert!(!rcu.is_idle(CpuId(1)));
    assert_eq!(rcu.fqs_scans(), 1, "found at the first forcing");
    // An idle entry from before the grace period began is none of its
    // quiescent states: a CPU that idled once and then stays awake stalls.
    rcu.enter_idle(&platform.clock, CpuId(1));
    rcu.exit_idle(CpuId(1));
    let deadline = platform.clock.now_ns() + 20_000_000;
    assert_eq!(
        rcu.synchronize(&platform.clock, Kind::Normal, Some(deadline))
            .map_err(|stall| stall.holding_up()),
        Err(set(&[1]))
    );
}
