//! Model checks of the grace-period handshake: a reader CPU's reports,
//! idle entries and exits against the driver's start and wait, with the
//! updater's publish and free around them. Loom also fails a model whose
//! threads all end up asleep (a lost wake-up).
//! Run with `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test
//! --release -p hotkern-kernel --test rcu_loom`.
#![cfg(loom)]

mod common;

use loom::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use loom::sync::Arc;

use common::{checker, Bells, Cpu};
use hotkern_cpuhp::CpuId;
use hotkern_kernel::rcu::{GracePeriods, Kind};

/// What the reader and the updater share: the published version and the
/// last one freed.
struct Shared {
    rcu: GracePeriods,
    version: AtomicUsize,
    freed: AtomicUsize,
}

/// A read-side section: whatever version it finds has not been freed.
fn read(shared: &Shared) {
    let seen = shared.version.load(SeqCst);
    assert_ne!(shared.freed.load(SeqCst), seen, "read a freed version");
}

/// CPUs `0..cpus` online; CPU 0 runs `reader`, CPU 1 (if any) runs
/// `other`; the model's main thread is the updater: it publishes version
/// 1, waits for a grace period and frees version 0. The updater is no CPU
/// (the machine's grace-period thread drives), or with `updater_is_cpu`
/// online CPU `cpus` (the bare-metal kernel's hotplug CPU drives).
fn reader_and_updater(
    cpus: u32,
    updater_is_cpu: bool,
    reader: fn(&Shared, &Cpu),
    other: fn(&Shared, &Cpu),
) {
    for kind in [Kind::Normal, Kind::Expedited] {
        checker().check(move || run(kind, cpus, updater_is_cpu, reader, other));
    }
}

/// One model run of [`reader_and_updater`], with grace periods of `kind`.
fn run(
    kind: Kind,
    cpus: u32,
    updater_is_cpu: bool,
    reader: fn(&Shared, &Cpu),
    other: fn(&Shared, &Cpu),
) {
    let bells = Bells::new(cpus as usize + 1);
    let shared = Arc::new(Shared {
        rcu: GracePeriods::new(),
        version: AtomicUsize::new(0),
        freed: AtomicUsize::new(usize::MAX),
    });
    let cpu = |n: u32| Cpu {
        me: Some(CpuId(n)),
        bells: Arc::clone(&bells),
    };
    for n in 0..cpus {
        shared.rcu.set_online(&cpu(n), CpuId(n), true);
    }
    let handles: Vec<_> = (0..cpus)
        .map(|n| {
            let (shared, me) = (Arc::clone(&shared), cpu(n));
            let body = if n == 0 { reader } else { other };
            loom::thread::spawn(move || body(&shared, &me))
        })
        .collect();
    let updater = Cpu {
        me: updater_is_cpu.then_some(CpuId(cpus)),
        bells: Arc::clone(&bells),
    };
    if updater_is_cpu {
        shared.rcu.set_online(&updater, CpuId(cpus), true);
    }
    shared.version.store(1, SeqCst);
    assert_eq!(shared.rcu.synchronize(&updater, kind, None), Ok(()));
    shared.freed.store(0, SeqCst);
    for handle in handles {
        handle.join().unwrap();
    }
}

/// The reader's last act: it goes to sleep for good, quiescent.
fn sleep(shared: &Shared, me: &Cpu) {
    shared.rcu.enter_idle(me, CpuId(0));
}

/// Two sections with a loop turn between them, then idle: whatever the
/// interleaving, neither sees its version freed, and the report that ends
/// the grace period wakes the updater.
#[test]
fn a_reader_never_sees_a_freed_version() {
    reader_and_updater(1, false, two_sections, |_, _| {});
}

/// The same with the bare-metal kernel's shape: the updater is a CPU, and
/// the last report wakes it with [`Cpus::wake`] rather than as a thread.
///
/// [`Cpus::wake`]: hotkern_kernel::platform::Cpus::wake
#[test]
fn a_reader_never_sees_a_freed_version_when_a_cpu_waits() {
    reader_and_updater(1, true, two_sections, |_, _| {});
}

fn two_sections(shared: &Shared, me: &Cpu) {
    read(shared);
    shared.rcu.quiescent(me, CpuId(0));
    read(shared);
    sleep(shared, me);
}

/// A busy CPU's normal grace period: its tick notices, a turn passes a
/// quiescent state, the next tick reports, with sections all along (a
/// tick may come in the middle of one).
#[test]
fn a_reader_reporting_from_its_tick_never_sees_a_freed_version() {
    reader_and_updater(1, false, ticks_and_sections, |_, _| {});
}

fn ticks_and_sections(shared: &Shared, me: &Cpu) {
    let seen = shared.version.load(SeqCst);
    shared.rcu.tick(me, CpuId(0));
    assert_ne!(shared.freed.load(SeqCst), seen, "read a freed version");
    shared.rcu.quiescent(me, CpuId(0));
    let seen = shared.version.load(SeqCst);
    shared.rcu.tick(me, CpuId(0));
    assert_ne!(shared.freed.load(SeqCst), seen, "read a freed version");
    shared.rcu.quiescent(me, CpuId(0));
    sleep(shared, me);
}

/// A CPU woken from idle is awake again before it reads: a grace period
/// that saw it idle began before it woke, so what it reads is new. The
/// same for a forcing scan that finds it awake but counts its idle entry
/// since the grace period began (a count compared with zero instead of
/// the snapshot, or a relaxed count, fails this model).
#[test]
fn a_cpu_leaving_idle_reads_what_the_grace_period_protects() {
    reader_and_updater(
        1,
        false,
        |shared, me| {
            shared.rcu.enter_idle(me, CpuId(0));
            shared.rcu.exit_idle(CpuId(0));
            read(shared);
            shared.rcu.quiescent(me, CpuId(0));
            sleep(shared, me);
        },
        |_, _| {},
    );
}

/// A grace period waiting for a CPU that goes offline ends without it.
#[test]
fn a_cpu_going_offline_releases_the_grace_period() {
    reader_and_updater(
        2,
        false,
        |shared, me| {
            read(shared);
            sleep(shared, me);
        },
        |shared, me| shared.rcu.set_online(me, CpuId(1), false),
    );
}

/// The planted bug: a reader that reports its quiescent state before its
/// section ends lets the grace period end under it. The model must catch
/// it, or the models above prove nothing.
#[test]
#[should_panic(expected = "read a freed version")]
fn reporting_inside_a_section_is_caught() {
    reader_and_updater(
        1,
        false,
        |shared, me| {
            let seen = shared.version.load(SeqCst);
            shared.rcu.quiescent(me, CpuId(0));
            shared.rcu.enter_idle(me, CpuId(0));
            assert_ne!(shared.freed.load(SeqCst), seen, "read a freed version");
        },
        |_, _| {},
    );
}
