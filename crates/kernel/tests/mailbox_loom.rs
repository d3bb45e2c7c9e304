//! Model checks of running borrowed work on another CPU
//! ([`Mailboxes`]): the poster sleeps until the CPU has run it, and the
//! CPU's wake-up of the poster is never lost; a poster that takes its
//! request back while the CPU comes for it leaves the work run exactly
//! once (the CPU won) or never (the poster won), and never after
//! `take_back` returned.
//! Run with `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test
//! --release -p hotkern-kernel --test mailbox_loom`.
#![cfg(loom)]

mod common;

use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;

use common::{checker, Bells, Cpu};
use hotkern_cpuhp::{CpuId, CpuSet};
use hotkern_kernel::mailbox::Mailboxes;
use hotkern_kernel::platform::Cpus;

#[test]
fn the_poster_sleeps_until_the_cpu_ran_its_work() {
    checker().check(|| {
        let bells = Bells::new(2);
        let boxes = Arc::new(Mailboxes::new(2));
        let cpu = Cpu {
            me: Some(CpuId(1)),
            bells: Arc::clone(&bells),
        };
        let theirs = Arc::clone(&boxes);
        let thread = loom::thread::spawn(move || {
            cpu.wait_until(&|| theirs.has_pending(1));
            assert!(theirs.run_pending(&cpu, 1));
        });
        let poster = Cpu { me: None, bells };
        let runs = AtomicUsize::new(0);
        let work = |cpu: CpuId| {
            assert_eq!(cpu, CpuId(1));
            runs.fetch_add(1, Ordering::Relaxed);
        };
        boxes
            .run_on_each(&poster, CpuSet::single(CpuId(1)), &work, u64::MAX)
            .unwrap();
        // Acquire through the mailbox's `done`: the work's effect is seen.
        assert_eq!(runs.load(Ordering::Relaxed), 1);
        thread.join().unwrap();
    });
}

#[test]
fn a_request_taken_back_runs_once_or_never() {
    checker().check(|| {
        let bells = Bells::new(2);
        let boxes = Arc::new(Mailboxes::new(2));
        let runs = Arc::new(AtomicUsize::new(0));
        let poster = Cpu {
            me: None,
            bells: Arc::clone(&bells),
        };
        let cpu = Cpu {
            me: Some(CpuId(1)),
            bells,
        };
        let counted = Arc::clone(&runs);
        let work = move |_: CpuId| {
            counted.fetch_add(1, Ordering::Relaxed);
        };
        let work: &(dyn Fn(CpuId) + Sync) = &work;
        let posted = boxes.post(&poster, CpuSet::single(CpuId(1)), &work);
        // The borrowed work is a static-free closure on this stack: the
        // CPU's thread reaches it only through the mailbox, so it must be
        // done with it (or never start) once `take_back` returns.
        let theirs = Arc::clone(&boxes);
        let thread = loom::thread::spawn(move || theirs.run_pending(&cpu, 1));
        let taken = boxes.take_back(&poster, posted, u64::MAX).unwrap();
        let ran_before_return = runs.load(Ordering::Relaxed);
        let cpu_ran = thread.join().unwrap();
        assert_eq!(cpu_ran, taken.is_empty());
        assert_eq!(ran_before_return, usize::from(cpu_ran));
        assert_eq!(runs.load(Ordering::Relaxed), usize::from(cpu_ran));
    });
}
