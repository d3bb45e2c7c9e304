//! Model checks of the machine's grace-period handshake: a vCPU's quiescent
//! reports and its idle sleep (the vCPU loop's own idle path, doorbell and
//! all) against the grace-period thread's snapshot and wait.
//! Run with `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test
//! --release -p hotkern-machine --test loom`.
#![cfg(loom)]

use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use loom::sync::Arc;

use hotkern_machine::loom_model::GracePeriods;

fn checker() -> loom::model::Builder {
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder
}

/// The rest of a vCPU's life once its reads are done, as its scheduler
/// loop has it: look for work (here, only `stop`), sleep in idle until
/// rung, pass a quiescent state (a turn of the loop), and again. Rings
/// coalesce, so, like the real loop, it looks before each sleep rather
/// than count rings. A vCPU that stopped running while tracked and awake
/// would hold up every later grace period, which no real vCPU does.
fn idle_until_stopped(gp: &GracePeriods, cpu: usize, stop: &AtomicBool) {
    while !stop.load(SeqCst) {
        gp.idle(cpu);
        gp.quiescent(cpu);
    }
}

/// Ends the vCPU thread of `idle_until_stopped`: a doorbell rung before
/// the vCPU sleeps must still wake it.
fn stop_vcpu(gp: &GracePeriods, cpu: usize, stop: &AtomicBool) {
    stop.store(true, SeqCst);
    gp.wake(cpu);
}

/// vCPU 0, tracked, runs `reader` and then idles until stopped, while the
/// model's main thread, the updater, runs `updater`; a grace-period thread
/// serves both. Both get the grace periods, the published version and the
/// last version freed.
fn reader_and_updater(
    reader: fn(&GracePeriods, &AtomicUsize, &AtomicUsize),
    updater: fn(&GracePeriods, &AtomicUsize, &AtomicUsize),
) {
    let gp = Arc::new(GracePeriods::new(1));
    gp.track(0);
    let version = Arc::new(AtomicUsize::new(0));
    let freed = Arc::new(AtomicUsize::new(usize::MAX));
    let stop = Arc::new(AtomicBool::new(false));
    let thread = {
        let gp = Arc::clone(&gp);
        loom::thread::spawn(move || gp.run_thread())
    };
    let vcpu = {
        let (gp, version, freed, stop) = (
            Arc::clone(&gp),
            Arc::clone(&version),
            Arc::clone(&freed),
            Arc::clone(&stop),
        );
        loom::thread::spawn(move || {
            reader(&gp, &version, &freed);
            idle_until_stopped(&gp, 0, &stop);
        })
    };
    updater(&gp, &version, &freed);
    stop_vcpu(&gp, 0, &stop);
    vcpu.join().unwrap();
    gp.stop();
    thread.join().unwrap();
}

/// A read-side section: whatever version it finds has not been freed.
fn read(version: &AtomicUsize, freed: &AtomicUsize) {
    let seen = version.load(SeqCst);
    assert_ne!(freed.load(SeqCst), seen, "read a freed version");
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
        reader_and_updater(
            |gp, version, freed| {
                for _ in 0..2 {
                    read(version, freed);
                    gp.quiescent(0);
                }
            },
            |gp, version, freed| {
                for next in 1..=2 {
                    version.store(next, SeqCst);
                    gp.synchronize();
                    freed.store(next - 1, SeqCst);
                }
            },
        );
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
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let gp = Arc::clone(&gp);
            loom::thread::spawn(move || gp.run_thread())
        };
        let dying = {
            let gp = Arc::clone(&gp);
            loom::thread::spawn(move || gp.untrack(1))
        };
        let other = {
            let (gp, stop) = (Arc::clone(&gp), Arc::clone(&stop));
            loom::thread::spawn(move || {
                gp.quiescent(0);
                idle_until_stopped(&gp, 0, &stop);
            })
        };
        gp.synchronize();
        dying.join().unwrap();
        stop_vcpu(&gp, 0, &stop);
        other.join().unwrap();
        gp.stop();
        thread.join().unwrap();
    });
}

/// A vCPU rung out of its idle sleep is busy again before it runs
/// anything: a grace period that starts once it may be reading waits for
/// it, so what it reads after waking is never freed under it.
#[test]
fn a_woken_cpu_is_not_counted_idle_while_it_reads() {
    checker().check(|| {
        reader_and_updater(
            |gp, version, freed| {
                gp.idle(0);
                read(version, freed);
                gp.quiescent(0);
            },
            |gp, version, freed| {
                gp.wake(0);
                version.store(1, SeqCst);
                gp.synchronize();
                freed.store(0, SeqCst);
            },
        );
    });
}
