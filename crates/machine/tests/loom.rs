//! Model checks of the machine's grace-period handshake: a vCPU's quiescent
//! and idle reports against the grace-period thread's snapshot and wait.
//! Run with `RUSTFLAGS="--cfg loom" cargo test --release -p hotkern-machine --test loom`.
#![cfg(loom)]

use loom::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use loom::sync::Arc;

use hotkern_machine::loom_model::GracePeriods;

fn checker() -> loom::model::Builder {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder
}

/// RCU's guarantee: a version is freed only after a grace period that
/// began after it was replaced, so a reader that found it never sees it
/// freed. Two grace periods back to back exercise a request left over from
/// the first (the lost wake-up this model was written for: a vCPU consumed
/// the "wanted" flag with a quiescent state from before the snapshot, then
/// went idle without waking the grace-period thread). Loom also fails the
/// model if every thread ends up blocked.
#[test]
fn a_reader_never_sees_a_freed_version_and_grace_periods_end() {
    checker().check(|| {
        let gp = Arc::new(GracePeriods::new(1));
        gp.track(0);
        let version = Arc::new(AtomicUsize::new(0));
        let freed = Arc::new(AtomicUsize::new(usize::MAX));
        let thread = {
            let gp = Arc::clone(&gp);
            loom::thread::spawn(move || gp.run_thread())
        };
        let reader = {
            let (gp, version, freed) = (Arc::clone(&gp), Arc::clone(&version), Arc::clone(&freed));
            loom::thread::spawn(move || {
                for _ in 0..2 {
                    let seen = version.load(SeqCst);
                    assert_ne!(freed.load(SeqCst), seen, "read a freed version");
                    gp.quiescent(0);
                }
                gp.go_idle(0);
            })
        };
        for next in 1..=2 {
            version.store(next, SeqCst);
            gp.synchronize();
            freed.store(next - 1, SeqCst);
        }
        reader.join().unwrap();
        gp.stop();
        thread.join().unwrap();
    });
}

/// A grace period waiting on a vCPU that goes offline (its dying step
/// stops RCU tracking it) ends instead of waiting forever.
#[test]
fn a_cpu_going_offline_releases_the_grace_period() {
    checker().check(|| {
        let gp = Arc::new(GracePeriods::new(2));
        gp.track(0);
        gp.track(1);
        let thread = {
            let gp = Arc::clone(&gp);
            loom::thread::spawn(move || gp.run_thread())
        };
        let dying = {
            let gp = Arc::clone(&gp);
            loom::thread::spawn(move || gp.untrack(1))
        };
        let other = {
            let gp = Arc::clone(&gp);
            loom::thread::spawn(move || {
                gp.quiescent(0);
                gp.go_idle(0);
            })
        };
        gp.synchronize();
        dying.join().unwrap();
        other.join().unwrap();
        gp.wake(0);
        gp.stop();
        thread.join().unwrap();
    });
}
