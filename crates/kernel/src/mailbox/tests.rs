//! Posting to CPUs that are threads here, each waiting on a condvar as a
//! halted CPU waits for its wake-up.

use std::sync::atomic::AtomicBool;
use std::sync::{Condvar, Mutex};
use std::vec;
use std::vec::Vec;

use super::*;

/// CPUs as threads: a wake rings every bell, a wait sleeps on it.
#[derive(Default)]
struct Threads {
    bell: Mutex<u64>,
    rung: Condvar,
}

std::thread_local! {
    static ME: core::cell::Cell<Option<CpuId>> = const { core::cell::Cell::new(None) };
}

impl Cpus for Threads {
    fn current(&self) -> Option<CpuId> {
        ME.with(|me| me.get())
    }
    fn wake(&self, _: CpuId) {
        self.wake_threads();
    }
    fn wake_threads(&self) {
        *self.bell.lock().unwrap() += 1;
        self.rung.notify_all();
    }
    fn wait_until(&self, condition: &dyn Fn() -> bool) {
        let mut bell = self.bell.lock().unwrap();
        while !condition() {
            bell = self.rung.wait(bell).unwrap();
        }
    }
    fn now_ns(&self) -> u64 {
        std::time::UNIX_EPOCH.elapsed().unwrap().as_nanos() as u64
    }
    fn wait_until_deadline(&self, condition: &dyn Fn() -> bool, deadline_ns: u64) -> bool {
        let mut bell = self.bell.lock().unwrap();
        loop {
            if condition() {
                return true;
            }
            let now = self.now_ns();
            if now >= deadline_ns {
                return false;
            }
            let left = std::time::Duration::from_nanos((deadline_ns - now).min(1_000_000));
            bell = self.rung.wait_timeout(bell, left).unwrap().0;
        }
    }
}

/// A CPU's loop: runs what is posted to it until told to stop.
fn cpu_loop(boxes: &Mailboxes, platform: &Threads, cpu: usize, stop: &AtomicBool) {
    ME.with(|me| me.set(Some(CpuId(cpu as u32))));
    while !stop.load(Ordering::Acquire) {
        if !boxes.run_pending(platform, cpu) {
            platform.wait_until_deadline(
                &|| boxes.has_pending(cpu) || stop.load(Ordering::Acquire),
                platform.now_ns() + 1_000_000,
            );
        }
    }
}

#[test]
fn every_cpu_runs_the_work_once_the_caller_its_own_inline() {
    let boxes = Mailboxes::new(4);
    let platform = Threads::default();
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        for cpu in 1..4 {
            let (boxes, platform, stop) = (&boxes, &platform, &stop);
            scope.spawn(move || cpu_loop(boxes, platform, cpu, stop));
        }
        ME.with(|me| me.set(Some(CpuId(0))));
        for _ in 0..200 {
            let ran = Mutex::new(Vec::new());
            let work = |cpu: CpuId| {
                assert_eq!(platform.current(), Some(cpu), "ran on another CPU");
                ran.lock().unwrap().push(cpu);
            };
            boxes
                .run_on_each(&platform, CpuSet::range(0, 4), &work, u64::MAX)
                .unwrap();
            let mut ran = ran.into_inner().unwrap();
            ran.sort();
            assert_eq!(ran, [CpuId(0), CpuId(1), CpuId(2), CpuId(3)]);
        }
        stop.store(true, Ordering::Release);
        platform.wake_threads();
    });
}

#[test]
fn a_cpu_that_never_comes_has_its_work_taken_back_and_never_runs_it() {
    let boxes = Mailboxes::new(4);
    let platform = Threads::default();
    let ran = AtomicBool::new(false);
    let work = |_: CpuId| ran.store(true, Ordering::SeqCst);
    let soon = platform.now_ns() + 20_000_000;
    // CPU 3 runs nothing: its request is taken back at the deadline.
    assert_eq!(
        boxes.run_on_each(&platform, CpuSet::single(CpuId(3)), &work, soon),
        Err(Unfinished(CpuId(3)))
    );
    // It comes late, and finds nothing to run.
    assert!(!boxes.has_pending(3));
    assert!(!boxes.run_pending(&platform, 3));
    assert!(!ran.load(Ordering::SeqCst));
    // The next request to it is a new one, and runs.
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let (b, p, s) = (&boxes, &platform, &stop);
        scope.spawn(move || cpu_loop(b, p, 3, s));
        boxes
            .run_on_each(&platform, CpuSet::single(CpuId(3)), &work, u64::MAX)
            .unwrap();
        stop.store(true, Ordering::Release);
        platform.wake_threads();
    });
    assert!(ran.load(Ordering::SeqCst));
}

#[test]
fn a_cpu_outside_the_slots_is_named_after_the_others_ran() {
    let boxes = Mailboxes::new(2);
    let platform = Threads::default();
    let ran = Mutex::new(Vec::new());
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let (b, p, s) = (&boxes, &platform, &stop);
        scope.spawn(move || cpu_loop(b, p, 1, s));
        let result = boxes.run_on_each(
            &platform,
            CpuSet::single(CpuId(1)).union(&CpuSet::single(CpuId(5))),
            &|cpu| ran.lock().unwrap().push(cpu),
            u64::MAX,
        );
        assert_eq!(result, Err(Unfinished(CpuId(5))));
        stop.store(true, Ordering::Release);
        platform.wake_threads();
    });
    assert_eq!(*ran.lock().unwrap(), [CpuId(1)]);
}

/// The poster and a late CPU race for the claim many times: the work runs
/// at most once per request, and exactly when the CPU won.
#[test]
fn the_claim_goes_to_one_side_only() {
    let boxes = Mailboxes::new(2);
    let platform = Threads::default();
    for _ in 0..500 {
        let runs = AtomicUsize::new(0);
        let work = |_: CpuId| {
            runs.fetch_add(1, Ordering::SeqCst);
        };
        let work: &(dyn Fn(CpuId) + Sync) = &work;
        let posted = boxes.post(&platform, CpuSet::single(CpuId(1)), &work);
        let taken = std::thread::scope(|scope| {
            let late = scope.spawn(|| boxes.run_pending(&platform, 1));
            let taken = boxes.take_back(&platform, posted, u64::MAX).unwrap();
            let ran = late.join().unwrap();
            assert_eq!(ran, taken.is_empty());
            taken
        });
        assert_eq!(runs.load(Ordering::SeqCst), usize::from(taken.is_empty()));
    }
}

#[test]
fn work_is_pending_from_its_post_until_it_ran_or_was_taken_back() {
    let boxes = Mailboxes::new(2);
    let platform = Threads::default();
    let work = |_: CpuId| {};
    let work: &(dyn Fn(CpuId) + Sync) = &work;
    assert!(!boxes.has_pending(1));
    let posted = boxes.post(&platform, CpuSet::single(CpuId(1)), &work);
    assert!(boxes.has_pending(1) && !boxes.has_pending(0));
    assert!(boxes.run_pending(&platform, 1));
    assert!(!boxes.has_pending(1));
    boxes.wait(&platform, &posted, u64::MAX).unwrap();
    let posted = boxes.post(&platform, CpuSet::single(CpuId(1)), &work);
    assert!(boxes.has_pending(1));
    assert_eq!(
        boxes.take_back(&platform, posted, u64::MAX),
        Ok(vec![CpuId(1)])
    );
    assert!(!boxes.has_pending(1));
    // A CPU just past the slots is posted nothing, and no slot is touched.
    let posted = boxes.post(&platform, CpuSet::single(CpuId(2)), &work);
    assert_eq!(boxes.take_back(&platform, posted, u64::MAX), Ok(vec![]));
    assert_eq!(
        boxes.run_on_each(&platform, CpuSet::single(CpuId(2)), &work, u64::MAX),
        Err(Unfinished(CpuId(2)))
    );
}

/// A CPU that claimed its work before the deadline but finishes after it
/// is waited for, not taken back: the work ran, once, and the call
/// succeeds.
#[test]
fn a_slow_cpu_that_claimed_its_work_is_waited_for() {
    let boxes = Mailboxes::new(2);
    let platform = Threads::default();
    let runs = AtomicUsize::new(0);
    let work = |_: CpuId| {
        runs.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(std::time::Duration::from_millis(60));
    };
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let (b, p, s) = (&boxes, &platform, &stop);
        scope.spawn(move || cpu_loop(b, p, 1, s));
        let soon = platform.now_ns() + 20_000_000;
        assert_eq!(
            boxes.run_on_each(&platform, CpuSet::single(CpuId(1)), &work, soon),
            Ok(())
        );
        stop.store(true, Ordering::Release);
        platform.wake_threads();
    });
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}
