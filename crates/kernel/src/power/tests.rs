use super::*;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU32, Ordering::SeqCst};
use std::cell::Cell;
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

std::thread_local!(static ME: Cell<Option<CpuId>> = const { Cell::new(None) });

/// CPUs that are std threads sleeping on one condvar, as the machine's
/// vCPUs sleep on their doorbells.
struct Threads {
    lives: Lifecycle,
    lock: Mutex<()>,
    changed: Condvar,
    epoch: Instant,
    /// Kicks each CPU got.
    kicks: Vec<AtomicU32>,
    /// CPUs that ignore their first kick (a lost SIPI).
    deaf_once: Vec<AtomicBool>,
    /// CPUs that never answer.
    broken: Vec<AtomicBool>,
    /// Each CPU takes this long to answer (so that the controller is
    /// already asleep when it does).
    answer_after_ms: AtomicU32,
    /// Wake-ups each CPU got, and those for threads that are no CPU.
    woken: Vec<AtomicU32>,
    threads_woken: AtomicU32,
    shutdown: AtomicBool,
}

impl Threads {
    fn new(cpus: usize) -> Arc<Threads> {
        let threads = Arc::new(Threads {
            lives: Lifecycle::new(),
            lock: Mutex::new(()),
            changed: Condvar::new(),
            epoch: Instant::now(),
            kicks: (0..cpus).map(|_| AtomicU32::new(0)).collect(),
            deaf_once: (0..cpus).map(|_| AtomicBool::new(false)).collect(),
            broken: (0..cpus).map(|_| AtomicBool::new(false)).collect(),
            answer_after_ms: AtomicU32::new(0),
            woken: (0..cpus).map(|_| AtomicU32::new(0)).collect(),
            threads_woken: AtomicU32::new(0),
            shutdown: AtomicBool::new(false),
        });
        threads.lives.boot_cpu(0);
        threads
    }

    /// Runs CPU `cpu`'s life on a thread of its own: sleep while dead,
    /// arrive when kicked (and heard), leave when asked.
    fn spawn_cpu(self: &Arc<Self>, cpu: usize) -> std::thread::JoinHandle<()> {
        let me = Arc::clone(self);
        std::thread::spawn(move || {
            ME.with(|id| id.set(Some(CpuId(cpu as u32))));
            loop {
                me.wait_until(&|| {
                    me.shutdown.load(SeqCst)
                        || (me.lives.life(cpu) == Life::Kicked && me.hears(cpu))
                });
                if me.shutdown.load(SeqCst) {
                    return;
                }
                me.pause();
                assert!(me.lives.arrive(&*me, cpu));
                me.wait_until(&|| me.shutdown.load(SeqCst) || me.lives.should_die(cpu));
                if me.shutdown.load(SeqCst) {
                    return;
                }
                me.pause();
                assert!(me.lives.die(&*me, cpu));
            }
        })
    }

    fn pause(&self) {
        let ms = self.answer_after_ms.load(SeqCst);
        std::thread::sleep(std::time::Duration::from_millis(u64::from(ms)));
    }

    fn hears(&self, cpu: usize) -> bool {
        let kicks = self.kicks[cpu].load(SeqCst);
        !self.broken[cpu].load(SeqCst) && (kicks >= 2 || !self.deaf_once[cpu].load(SeqCst))
    }

    fn stop(&self) {
        self.shutdown.store(true, SeqCst);
        self.ring();
    }

    /// Every sleeper checks its condition again (one condvar for all).
    fn ring(&self) {
        let _held = self.lock.lock().unwrap();
        self.changed.notify_all();
    }
}

impl Cpus for Threads {
    fn current(&self) -> Option<CpuId> {
        ME.with(Cell::get)
    }
    fn wake(&self, cpu: CpuId) {
        self.woken[cpu.index()].fetch_add(1, SeqCst);
        self.ring();
    }
    fn wake_threads(&self) {
        self.threads_woken.fetch_add(1, SeqCst);
        self.ring();
    }
    fn wait_until(&self, condition: &dyn Fn() -> bool) {
        self.wait_until_deadline(condition, u64::MAX);
    }
    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }
    fn wait_until_deadline(&self, condition: &dyn Fn() -> bool, deadline_ns: u64) -> bool {
        let mut held = self.lock.lock().unwrap();
        loop {
            if condition() {
                return true;
            }
            let now = self.now_ns();
            if now >= deadline_ns {
                return false;
            }
            let left = std::time::Duration::from_nanos((deadline_ns - now).min(50_000_000));
            held = self.changed.wait_timeout(held, left).unwrap().0;
        }
    }
}

impl Power for Threads {
    fn kick(&self, cpu: CpuId) {
        self.kicks[cpu.index()].fetch_add(1, SeqCst);
        self.wake(cpu);
    }
    fn kick_again_after_ns(&self) -> Option<u64> {
        Some(20_000_000)
    }
}

fn set(cpus: &[u32]) -> CpuSet {
    cpus.iter().map(|&cpu| CpuId(cpu)).collect()
}

const SECOND: u64 = 1_000_000_000;

fn deadline(platform: &Threads, ns: u64) -> u64 {
    platform.now_ns() + ns
}

#[test]
fn cpus_start_and_stop_together_many_times() {
    let platform = Threads::new(4);
    let cpus: Vec<_> = (1..4).map(|cpu| platform.spawn_cpu(cpu)).collect();
    for round in 0..200 {
        let some = if round % 2 == 0 {
            set(&[1, 2, 3])
        } else {
            set(&[2])
        };
        platform
            .lives
            .start_many(&*platform, some, deadline(&platform, 5 * SECOND))
            .unwrap();
        assert!(some.iter().all(|cpu| platform.lives.is_alive(cpu.index())));
        platform
            .lives
            .stop_many(&*platform, some, deadline(&platform, 5 * SECOND))
            .unwrap();
        assert!(some
            .iter()
            .all(|cpu| platform.lives.life(cpu.index()) == Life::Dead));
    }
    assert!(platform.lives.is_alive(0), "the boot CPU is never touched");
    platform.stop();
    cpus.into_iter().for_each(|cpu| cpu.join().unwrap());
}

#[test]
fn a_wrong_state_is_refused_before_anything_changes() {
    let platform = Threads::new(3);
    let cpu = platform.spawn_cpu(1);
    let later = deadline(&platform, 5 * SECOND);
    assert_eq!(
        platform.lives.start_many(&*platform, set(&[1, 0]), later),
        Err(PowerError::WrongState(CpuId(0), Life::Alive))
    );
    assert_eq!(platform.lives.life(1), Life::Dead, "cpu 1 was not kicked");
    assert_eq!(platform.kicks[1].load(SeqCst), 0);
    assert_eq!(
        platform.lives.stop_many(&*platform, set(&[1]), later),
        Err(PowerError::WrongState(CpuId(1), Life::Dead))
    );
    // A CPU answers only the request it was given.
    assert!(
        !platform.lives.arrive(&*platform, 2),
        "cpu 2 was not kicked"
    );
    assert!(
        !platform.lives.die(&*platform, 0),
        "cpu 0 was not asked to die"
    );
    assert_eq!(platform.lives.life(2), Life::Dead);
    assert!(platform.lives.is_alive(0));
    platform.stop();
    cpu.join().unwrap();
}

#[test]
fn a_late_cpu_is_kicked_again_and_a_dead_one_is_named() {
    let platform = Threads::new(4);
    let cpus: Vec<_> = (1..4).map(|cpu| platform.spawn_cpu(cpu)).collect();
    platform.deaf_once[2].store(true, SeqCst);
    platform
        .lives
        .start_many(&*platform, set(&[1, 2]), deadline(&platform, 5 * SECOND))
        .unwrap();
    assert_eq!(platform.kicks[1].load(SeqCst), 1);
    assert_eq!(platform.kicks[2].load(SeqCst), 2, "kicked again once late");

    platform.broken[3].store(true, SeqCst);
    let started = Instant::now();
    assert_eq!(
        platform
            .lives
            .start_many(&*platform, set(&[3]), deadline(&platform, SECOND / 20)),
        Err(PowerError::Timeout(CpuId(3)))
    );
    assert!(
        started.elapsed().as_millis() >= 50,
        "it waited to the deadline"
    );
    assert_eq!(platform.lives.life(3), Life::Kicked);
    platform.stop();
    cpus.into_iter().for_each(|cpu| cpu.join().unwrap());
}

#[test]
fn the_waiter_is_woken_not_left_to_its_deadline() {
    // The CPU answers 1 ms after it is asked, when the controller sleeps:
    // only the CPU's wake-up ends that sleep before the fake condvar's
    // 50 ms look (100 sleeps of 50 ms would take 5 s).
    let platform = Threads::new(2);
    platform.answer_after_ms.store(1, SeqCst);
    let cpu = platform.spawn_cpu(1);
    let started = Instant::now();
    for _ in 0..50 {
        let hour = deadline(&platform, 3600 * SECOND);
        platform
            .lives
            .start_many(&*platform, set(&[1]), hour)
            .unwrap();
        platform
            .lives
            .stop_many(&*platform, set(&[1]), hour)
            .unwrap();
    }
    assert!(started.elapsed().as_secs() < 2, "{:?}", started.elapsed());
    platform.stop();
    cpu.join().unwrap();
}

/// A platform that keeps [`Power`]'s defaults: one kick, no second one.
struct KicksOnce(Arc<Threads>);

impl Cpus for KicksOnce {
    fn current(&self) -> Option<CpuId> {
        self.0.current()
    }
    fn wake(&self, cpu: CpuId) {
        self.0.wake(cpu);
    }
    fn wake_threads(&self) {
        self.0.wake_threads();
    }
    fn wait_until(&self, condition: &dyn Fn() -> bool) {
        self.0.wait_until(condition);
    }
    fn now_ns(&self) -> u64 {
        self.0.now_ns()
    }
    fn wait_until_deadline(&self, condition: &dyn Fn() -> bool, deadline_ns: u64) -> bool {
        self.0.wait_until_deadline(condition, deadline_ns)
    }
}

impl Power for KicksOnce {
    fn kick(&self, cpu: CpuId) {
        self.0.kick(cpu);
    }
}

#[test]
fn by_default_a_late_cpu_is_not_kicked_again() {
    let platform = Threads::new(2);
    let cpu = platform.spawn_cpu(1);
    platform.deaf_once[1].store(true, SeqCst);
    let once = KicksOnce(Arc::clone(&platform));
    assert_eq!(
        platform
            .lives
            .start_many(&once, set(&[1]), deadline(&platform, SECOND / 10)),
        Err(PowerError::Timeout(CpuId(1)))
    );
    assert_eq!(platform.kicks[1].load(SeqCst), 1);
    platform.stop();
    cpu.join().unwrap();
}

#[test]
fn errors_name_the_cpu_and_what_went_wrong() {
    let text = |error: PowerError| std::format!("{error}");
    assert_eq!(text(PowerError::NoSuchCpu(CpuId(70))), "there is no cpu 70");
    assert_eq!(
        text(PowerError::WrongState(CpuId(2), Life::Alive)),
        "cpu 2 is Alive"
    );
    assert_eq!(
        text(PowerError::Timeout(CpuId(3))),
        "cpu 3 did not answer in time"
    );
}

#[test]
fn the_cpu_that_waits_is_the_one_woken() {
    let platform = Threads::new(2);
    let cpu = platform.spawn_cpu(1);
    let controller = Arc::clone(&platform);
    std::thread::spawn(move || {
        ME.with(|id| id.set(Some(CpuId(0))));
        let one = set(&[1]);
        let lives = &controller.lives;
        lives
            .start_many(&*controller, one, deadline(&controller, 5 * SECOND))
            .unwrap();
        lives
            .stop_many(&*controller, one, deadline(&controller, 5 * SECOND))
            .unwrap();
    })
    .join()
    .unwrap();
    assert_eq!(
        platform.woken[0].load(SeqCst),
        2,
        "the arrival and the death each woke cpu 0"
    );
    assert_eq!(platform.threads_woken.load(SeqCst), 0, "no thread waited");
    platform.stop();
    cpu.join().unwrap();
}
