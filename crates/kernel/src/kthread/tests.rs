use super::*;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU32, Ordering::SeqCst};
use std::sync::Arc as StdArc;

/// A thread that records its turns and its end (the step table's tests
/// use it too).
pub(crate) struct Probe {
    parked: AtomicBool,
    turns: AtomicU32,
    stop_asked: AtomicBool,
    /// Counts drops across every probe of a test.
    dropped: StdArc<AtomicU32>,
    /// Run on each turn (gives another role work).
    on_turn: Option<StdArc<AtomicBool>>,
}

impl Thread for Probe {
    fn run(&self) -> bool {
        if self.parked.load(SeqCst) {
            return false;
        }
        self.turns.fetch_add(1, SeqCst);
        if let Some(flag) = &self.on_turn {
            flag.store(true, SeqCst);
        }
        true
    }
    fn park(&self) {
        self.parked.store(true, SeqCst);
    }
    fn unpark(&self) {
        self.parked.store(false, SeqCst);
    }
    fn is_parked(&self) -> bool {
        self.parked.load(SeqCst)
    }
    fn request_stop(&self) {
        self.stop_asked.store(true, SeqCst);
    }
}

impl Drop for Probe {
    fn drop(&mut self) {
        self.dropped.fetch_add(1, SeqCst);
    }
}

impl Probe {
    /// The turns it was switched to.
    pub(crate) fn turns(&self) -> u32 {
        self.turns.load(SeqCst)
    }
}

/// A probe whose drops are counted in `dropped`.
pub(crate) fn probe(dropped: &StdArc<AtomicU32>) -> Probe {
    Probe {
        parked: AtomicBool::new(false),
        turns: AtomicU32::new(0),
        stop_asked: AtomicBool::new(false),
        dropped: StdArc::clone(dropped),
        on_turn: None,
    }
}

#[test]
fn every_role_indexes_its_own_slot() {
    for (slot, role) in Role::ALL.into_iter().enumerate() {
        assert_eq!(role.index(), slot, "{}", role.name());
    }
}

#[test]
fn roles_carry_linux_thread_names() {
    assert_eq!(Role::ALL.map(Role::name), ["ksoftirqd", "kworker", "rcuc"]);
}

#[test]
fn a_thread_is_installed_parked_and_once() {
    let dropped = StdArc::new(AtomicU32::new(0));
    let threads = Kthreads::new(2);
    let mut first = probe(&dropped);
    first.parked = AtomicBool::new(false);
    assert!(threads.install(0, Role::Worker, first));
    assert!(threads.get(0, Role::Worker).unwrap().is_parked());
    assert!(!threads.install(0, Role::Worker, probe(&dropped)));
    assert_eq!(dropped.load(SeqCst), 1, "the refused thread is dropped");
    assert!(
        !threads.install(2, Role::Worker, probe(&dropped)),
        "no CPU 2"
    );
    assert!(threads.exists(0, Role::Worker));
    assert!(!threads.exists(0, Role::Softirq));
    assert!(!threads.exists(1, Role::Worker));
}

#[test]
fn only_unparked_threads_with_work_run() {
    let dropped = StdArc::new(AtomicU32::new(0));
    let threads = Kthreads::new(1);
    for role in Role::ALL {
        assert!(threads.install(0, role, probe(&dropped)));
    }
    assert!(
        !threads.run_ready(0, |_| true),
        "every thread starts parked"
    );
    threads.unpark(0, Role::Softirq);
    threads.unpark(0, Role::Worker);
    assert!(threads.run_ready(0, |role| role != Role::Worker));
    assert!(!threads.run_ready(0, |role| role == Role::RcuCallbacks));
    let turns = |role| threads.get(0, role).unwrap().turns.load(SeqCst);
    assert_eq!(
        Role::ALL.map(turns),
        [1, 0, 0],
        "softirq ran; the worker had no work; rcuc is parked"
    );
    threads.park(0, Role::Softirq);
    assert!(threads.run_ready(0, |_| true));
    assert_eq!(Role::ALL.map(turns), [1, 1, 0]);
}

#[test]
fn which_roles_have_work_is_decided_before_any_runs() {
    let dropped = StdArc::new(AtomicU32::new(0));
    let threads = Kthreads::new(1);
    let worker_has_work = StdArc::new(AtomicBool::new(false));
    let mut softirq = probe(&dropped);
    softirq.on_turn = Some(StdArc::clone(&worker_has_work));
    assert!(threads.install(0, Role::Softirq, softirq));
    assert!(threads.install(0, Role::Worker, probe(&dropped)));
    threads.unpark(0, Role::Softirq);
    threads.unpark(0, Role::Worker);
    let has_work = |role| role == Role::Softirq || worker_has_work.load(SeqCst);
    assert!(threads.run_ready(0, has_work));
    let worker = threads.get(0, Role::Worker).unwrap();
    assert_eq!(worker.turns.load(SeqCst), 0, "its work came after the look");
    assert!(threads.run_ready(0, has_work));
    assert_eq!(worker.turns.load(SeqCst), 1);
}

#[test]
fn a_removed_thread_lives_while_a_handle_to_it_does() {
    let dropped = StdArc::new(AtomicU32::new(0));
    let threads = Kthreads::new(1);
    assert!(threads.install(0, Role::RcuCallbacks, probe(&dropped)));
    assert!(threads.request_stop(0, Role::RcuCallbacks));
    let held = threads.get(0, Role::RcuCallbacks).unwrap();
    assert!(held.stop_asked.load(SeqCst));
    assert!(threads.remove(0, Role::RcuCallbacks));
    assert!(!threads.exists(0, Role::RcuCallbacks));
    assert_eq!(dropped.load(SeqCst), 0, "still held");
    drop(held);
    assert_eq!(dropped.load(SeqCst), 1);
    assert!(!threads.remove(0, Role::RcuCallbacks));
    assert!(!threads.request_stop(0, Role::RcuCallbacks));
}

/// CPUs switching to their threads while a controller creates and
/// destroys them over and over: every thread is dropped exactly once, and
/// none is dropped while a CPU runs it.
#[test]
fn create_and_destroy_under_running_cpus() {
    const CPUS: usize = 3;
    const ROUNDS: u32 = 300;
    let dropped = StdArc::new(AtomicU32::new(0));
    let threads = StdArc::new(Kthreads::<Probe>::new(CPUS));
    let stop = StdArc::new(AtomicBool::new(false));
    let cpus: Vec<_> = (0..CPUS)
        .map(|cpu| {
            let threads = StdArc::clone(&threads);
            let stop = StdArc::clone(&stop);
            std::thread::spawn(move || {
                while !stop.load(SeqCst) {
                    threads.run_ready(cpu, |_| true);
                    std::thread::yield_now();
                }
            })
        })
        .collect();
    let mut made = 0;
    for _ in 0..ROUNDS {
        for cpu in 0..CPUS {
            for role in Role::ALL {
                if threads.install(cpu, role, probe(&dropped)) {
                    made += 1;
                }
                threads.unpark(cpu, role);
            }
        }
        std::thread::yield_now();
        for cpu in 0..CPUS {
            for role in Role::ALL {
                threads.park(cpu, role);
                assert!(threads.remove(cpu, role));
            }
        }
    }
    stop.store(true, SeqCst);
    cpus.into_iter().for_each(|cpu| cpu.join().unwrap());
    assert_eq!(made, ROUNDS * (CPUS * 3) as u32);
    assert_eq!(dropped.load(SeqCst), made, "each thread dropped once");
}
