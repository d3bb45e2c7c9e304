//! The per-CPU reader-writer lock under contention: reader CPUs take it in
//! their read-side sections (fast path while no writer is near) while a
//! writer thread takes it again and again; neither ever finds the other
//! inside. Grace periods are the shared kernel's, expedited and normal.

#![cfg(not(loom))]

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{Bells, Cpu};
use hotkern_cpuhp::CpuId;
use hotkern_kernel::percpu_rwsem::PercpuRwsem;
use hotkern_kernel::rcu::{GracePeriods, Kind};

struct Shared {
    rcu: GracePeriods,
    lock: PercpuRwsem,
    readers_inside: AtomicUsize,
    writer_inside: AtomicBool,
    stop: AtomicBool,
}

const READERS: u32 = 2;

/// A reader CPU: sections that each try the lock, with a loop turn (a
/// quiescent state, and a tick for normal grace periods) between them.
fn reader(shared: &Shared, me: &Cpu) -> usize {
    let cpu = me.me.unwrap();
    let mut held = 0;
    while !shared.stop.load(SeqCst) {
        if shared.lock.try_read(me) {
            shared.readers_inside.fetch_add(1, SeqCst);
            assert!(
                !shared.writer_inside.load(SeqCst),
                "a reader got in while the writer held the lock"
            );
            std::hint::spin_loop();
            shared.readers_inside.fetch_sub(1, SeqCst);
            shared.lock.read_unlock(me);
            held += 1;
        }
        shared.rcu.tick(me, cpu);
        shared.rcu.quiescent(me, cpu);
        shared.rcu.tick(me, cpu);
    }
    shared.rcu.enter_idle(me, cpu);
    held
}

fn contend(kind: Kind) {
    let bells = Bells::new(READERS as usize);
    let shared = Arc::new(Shared {
        rcu: GracePeriods::new(),
        lock: PercpuRwsem::new(READERS as usize),
        readers_inside: AtomicUsize::new(0),
        writer_inside: AtomicBool::new(false),
        stop: AtomicBool::new(false),
    });
    let cpu = |n: u32| Cpu {
        me: Some(CpuId(n)),
        bells: Arc::clone(&bells),
    };
    for n in 0..READERS {
        shared.rcu.set_online(&cpu(n), CpuId(n), true);
    }
    let readers: Vec<_> = (0..READERS)
        .map(|n| {
            let (shared, me) = (Arc::clone(&shared), cpu(n));
            std::thread::spawn(move || reader(&shared, &me))
        })
        .collect();
    let writer = Cpu {
        me: None,
        bells: Arc::clone(&bells),
    };
    let mut grace_periods = 0;
    let start = Instant::now();
    let mut rounds = 0;
    // The exit's grace period, when the last round left it pending.
    let mut pending = false;
    while start.elapsed() < Duration::from_millis(300) || rounds < 20 {
        let waited = shared.lock.write_lock(&writer, || {
            shared.rcu.synchronize(&writer, kind, None).unwrap();
        });
        assert!(
            !(pending && waited),
            "a writer within the exit's grace period waited"
        );
        grace_periods += usize::from(waited);
        if pending {
            // Run late, with a writer back in: readers must stay slow.
            shared.rcu.synchronize(&writer, kind, None).unwrap();
            assert!(!shared.lock.grace_period_ended());
        }
        shared.writer_inside.store(true, SeqCst);
        assert_eq!(
            shared.readers_inside.load(SeqCst),
            0,
            "the writer got in while a reader held the lock"
        );
        std::thread::sleep(Duration::from_micros(200));
        assert_eq!(shared.readers_inside.load(SeqCst), 0);
        shared.writer_inside.store(false, SeqCst);
        // Nothing else runs the exit's callback: every other round ends its
        // grace period at once (the next writer pays one of its own), the
        // others leave it pending across the next writer's entry.
        let queued = shared.lock.write_unlock(&writer);
        assert!(queued, "the last writer out queues a grace period");
        pending = rounds % 2 == 1;
        if !pending {
            shared.rcu.synchronize(&writer, kind, None).unwrap();
            assert!(!shared.lock.grace_period_ended());
        }
        std::thread::sleep(Duration::from_micros(100));
        rounds += 1;
    }
    assert!(
        grace_periods >= rounds / 2,
        "writers after a quiet spell wait for a grace period"
    );
    shared.stop.store(true, SeqCst);
    let held: usize = readers.into_iter().map(|r| r.join().unwrap()).sum();
    assert!(held > 0, "readers never got in");
    assert_eq!(shared.lock.readers(), 0);
}

#[test]
fn readers_and_a_writer_exclude_each_other_expedited() {
    contend(Kind::Expedited);
}

#[test]
fn readers_and_a_writer_exclude_each_other_normal() {
    contend(Kind::Normal);
}

/// A platform that counts its sleeps: a waiter must sleep, not spin.
struct Counting {
    cpu: Cpu,
    sleeps: AtomicUsize,
}

impl hotkern_kernel::platform::Cpus for Counting {
    fn current(&self) -> Option<CpuId> {
        self.cpu.current()
    }
    fn wake(&self, cpu: CpuId) {
        self.cpu.wake(cpu)
    }
    fn wake_threads(&self) {
        self.cpu.wake_threads()
    }
    fn wait_until(&self, condition: &dyn Fn() -> bool) {
        self.sleeps.fetch_add(1, SeqCst);
        self.cpu.wait_until(condition)
    }
}

/// Waits up to five seconds for `done`.
fn within_seconds(done: &AtomicBool) -> bool {
    let start = Instant::now();
    while !done.load(SeqCst) && start.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(1));
    }
    done.load(SeqCst)
}

/// A reader that sleeps in `read` while the writer holds the lock gets in
/// once it is given back, having slept rather than spun; the flags say
/// where the lock is all along.
#[test]
fn a_blocked_reader_sleeps_until_the_writer_leaves() {
    let bells = Bells::new(1);
    let lock = Arc::new(PercpuRwsem::new(1));
    let writer = Cpu {
        me: None,
        bells: Arc::clone(&bells),
    };
    assert!(!lock.writer_near() && !lock.is_write_locked());
    lock.write_lock(&writer, || {});
    assert!(lock.writer_near() && lock.is_write_locked());
    let got_in = Arc::new(AtomicBool::new(false));
    let reader = {
        let (lock, got_in) = (Arc::clone(&lock), Arc::clone(&got_in));
        let me = Counting {
            cpu: Cpu {
                me: Some(CpuId(0)),
                bells: Arc::clone(&bells),
            },
            sleeps: AtomicUsize::new(0),
        };
        std::thread::spawn(move || {
            lock.read(&me);
            got_in.store(true, SeqCst);
            lock.read_unlock(&me);
            me.sleeps.load(SeqCst)
        })
    };
    std::thread::sleep(Duration::from_millis(50));
    assert!(!got_in.load(SeqCst), "a reader got in under the writer");
    assert!(lock.write_unlock(&writer));
    assert!(!lock.is_write_locked());
    assert!(
        lock.writer_near(),
        "readers stay slow until the grace period"
    );
    assert!(within_seconds(&got_in), "the reader was not woken");
    let sleeps = reader.join().unwrap();
    assert!(
        (1..=3).contains(&sleeps),
        "the reader slept {sleeps} times: it should sleep once, not spin"
    );
    assert!(!lock.grace_period_ended());
    assert!(!lock.writer_near());
    assert_eq!(lock.readers(), 0);
}

/// The last reader out wakes the writer waiting for it, from a CPU: the
/// writer sleeps on the threads' bell, which nothing else rings here.
#[test]
fn the_last_reader_out_wakes_the_waiting_writer() {
    let bells = Bells::new(1);
    let lock = Arc::new(PercpuRwsem::new(1));
    let cpu0 = Cpu {
        me: Some(CpuId(0)),
        bells: Arc::clone(&bells),
    };
    // In before any writer: its fast path.
    assert!(lock.try_read(&cpu0));
    let done = Arc::new(AtomicBool::new(false));
    let writer = {
        let (lock, done) = (Arc::clone(&lock), Arc::clone(&done));
        let me = Cpu {
            me: None,
            bells: Arc::clone(&bells),
        };
        std::thread::spawn(move || {
            lock.write_lock(&me, || {});
            done.store(true, SeqCst);
            lock.write_unlock(&me);
        })
    };
    while !lock.is_write_locked() {
        std::thread::yield_now();
    }
    std::thread::sleep(Duration::from_millis(20));
    assert!(!done.load(SeqCst), "the writer got in with a reader inside");
    lock.read_unlock(&cpu0);
    assert!(within_seconds(&done), "the writer was not woken");
    writer.join().unwrap();
}

/// A writer that arrives while the first waits for its grace period
/// sleeps until that grace period ends, and is woken then (on a CPU: the
/// first writer's wake finds it by its CPU).
#[test]
fn a_second_writer_sleeps_until_the_first_ones_grace_period_ends() {
    use hotkern_kernel::rcu_sync::RcuSync;
    let bells = Bells::new(1);
    let sync = Arc::new(RcuSync::new());
    let release = Arc::new(AtomicBool::new(false));
    let first = {
        let (sync, release) = (Arc::clone(&sync), Arc::clone(&release));
        let me = Cpu {
            me: None,
            bells: Arc::clone(&bells),
        };
        std::thread::spawn(move || {
            sync.enter(&me, || {
                while !release.load(SeqCst) {
                    std::thread::sleep(Duration::from_millis(1));
                }
            })
        })
    };
    // The first writer is in its grace period once readers are slow.
    while sync.is_idle() {
        std::thread::yield_now();
    }
    let second_in = Arc::new(AtomicBool::new(false));
    let second = {
        let (sync, second_in) = (Arc::clone(&sync), Arc::clone(&second_in));
        let me = Cpu {
            me: Some(CpuId(0)),
            bells: Arc::clone(&bells),
        };
        std::thread::spawn(move || {
            let waited = sync.enter(&me, || panic!("a second grace period"));
            second_in.store(true, SeqCst);
            waited
        })
    };
    std::thread::sleep(Duration::from_millis(30));
    assert!(
        !second_in.load(SeqCst),
        "the second writer went on before the first one's grace period ended"
    );
    release.store(true, SeqCst);
    assert!(first.join().unwrap(), "the first writer waits");
    assert!(
        within_seconds(&second_in),
        "the second writer was not woken"
    );
    assert!(!second.join().unwrap(), "the second writer waits for none");
    assert!(!sync.exit());
    assert!(sync.exit());
}
