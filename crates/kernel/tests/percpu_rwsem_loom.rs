//! Model checks of the per-CPU reader-writer lock against the shared
//! kernel's grace periods: a reader CPU takes it in a read-side section
//! (its fast path while no writer is near) while a writer thread takes it,
//! waiting for the grace period of `RcuSync::enter`; neither may find the
//! other inside, and no wake-up may be lost (loom fails a model whose
//! threads all sleep).
//! Run with `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test
//! --release -p hotkern-kernel --test percpu_rwsem_loom`.
#![cfg(loom)]

mod common;

use loom::sync::atomic::{AtomicBool, Ordering::SeqCst};
use loom::sync::Arc;

use common::{checker, Bells, Cpu};
use hotkern_cpuhp::CpuId;
use hotkern_kernel::percpu_rwsem::PercpuRwsem;
use hotkern_kernel::rcu::{GracePeriods, Kind};

struct Shared {
    rcu: GracePeriods,
    lock: PercpuRwsem,
    reader_inside: AtomicBool,
    writer_inside: AtomicBool,
}

impl Shared {
    fn new() -> Arc<Shared> {
        Arc::new(Shared {
            rcu: GracePeriods::new(),
            lock: PercpuRwsem::new(1),
            reader_inside: AtomicBool::new(false),
            writer_inside: AtomicBool::new(false),
        })
    }

    /// A reader's try: inside, it must not find the writer.
    fn read(&self, me: &Cpu) {
        if self.lock.try_read(me) {
            self.reader_inside.store(true, SeqCst);
            assert!(
                !self.writer_inside.load(SeqCst),
                "reader in with the writer"
            );
            self.reader_inside.store(false, SeqCst);
            self.lock.read_unlock(me);
        }
    }

    /// The writer's turn: inside, it must not find a reader.
    fn write(&self, me: &Cpu, synchronize: impl FnOnce()) {
        self.lock.write_lock(me, synchronize);
        self.writer_inside.store(true, SeqCst);
        assert!(!self.reader_inside.load(SeqCst), "writer in with a reader");
        self.writer_inside.store(false, SeqCst);
        assert!(self.lock.write_unlock(me));
    }
}

/// One read-side section that tries the lock, a loop turn, and idle.
fn reader(shared: &Shared, me: &Cpu) {
    shared.read(me);
    shared.rcu.tick(me, CpuId(0));
    shared.rcu.quiescent(me, CpuId(0));
    shared.rcu.tick(me, CpuId(0));
    shared.rcu.enter_idle(me, CpuId(0));
}

fn model(kind: Kind) {
    let bells = Bells::new(1);
    let shared = Shared::new();
    let cpu = Cpu {
        me: Some(CpuId(0)),
        bells: Arc::clone(&bells),
    };
    shared.rcu.set_online(&cpu, CpuId(0), true);
    let theirs = Arc::clone(&shared);
    let handle = loom::thread::spawn(move || reader(&theirs, &cpu));
    let writer = Cpu {
        me: None,
        bells: Arc::clone(&bells),
    };
    shared.write(&writer, || {
        assert_eq!(shared.rcu.synchronize(&writer, kind, None), Ok(()));
    });
    handle.join().unwrap();
    assert_eq!(shared.lock.readers(), 0);
}

/// A reader that is no CPU always takes the slow path: only `block` and
/// the counts keep it and the writer apart (no grace period waits for it).
#[test]
fn a_thread_reader_and_a_writer_exclude_each_other() {
    checker().check(|| {
        let bells = Bells::new(1);
        let shared = Shared::new();
        let thread = Cpu {
            me: None,
            bells: Arc::clone(&bells),
        };
        let (theirs, me) = (Arc::clone(&shared), thread.clone());
        let handle = loom::thread::spawn(move || theirs.read(&me));
        shared.write(&thread, || {});
        handle.join().unwrap();
        assert_eq!(shared.lock.readers(), 0);
    });
}

#[test]
fn a_reader_and_a_writer_exclude_each_other_normal() {
    checker().check(|| model(Kind::Normal));
}

#[test]
fn a_reader_and_a_writer_exclude_each_other_expedited() {
    checker().check(|| model(Kind::Expedited));
}

/// Two writers arrive together, one on a CPU, one a thread: whichever
/// comes second waits for the first one's grace period, and is woken
/// when it ends.
#[test]
fn a_second_writer_waits_for_the_first_ones_grace_period() {
    use hotkern_kernel::rcu_sync::RcuSync;
    checker().check(|| {
        let bells = Bells::new(1);
        let sync = Arc::new(RcuSync::new());
        let passed = Arc::new(AtomicBool::new(false));
        let writer = |me: Option<CpuId>| {
            let (sync, passed) = (Arc::clone(&sync), Arc::clone(&passed));
            let cpu = Cpu {
                me,
                bells: Arc::clone(&bells),
            };
            move || {
                sync.enter(&cpu, || passed.store(true, SeqCst));
                assert!(
                    passed.load(SeqCst),
                    "a writer passed before the grace period"
                );
                sync.exit()
            }
        };
        let on_cpu = loom::thread::spawn(writer(Some(CpuId(0))));
        let queued = writer(None)();
        let other = on_cpu.join().unwrap();
        assert!(queued ^ other, "exactly the last writer out queues");
    });
}
