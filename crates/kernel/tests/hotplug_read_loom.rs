//! Model checks of the hotplug lock's atomic read side against a take-down
//! without a stop-machine (`bolt-nostop`): a reader CPU picks a CPU from
//! the online mask and queues something on it, as `call_rcu` does, while
//! the writer hides the dying CPU, drains the readers and runs its dying
//! steps. A reader that saw the CPU finishes before the dying steps run;
//! a reader that enters after the hide never sees it.
//! Run with `RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom cargo test
//! --release -p hotkern-kernel --test hotplug_read_loom`.
#![cfg(loom)]

use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use loom::sync::Arc;

use hotkern_cpuhp::{CpuId, CpuSet};
use hotkern_kernel::hotplug_read::HotplugReadSide;

const DYING: CpuId = CpuId(1);

struct Shared {
    side: HotplugReadSide,
    /// The dying CPU's callback list: how many were queued on it.
    queued_on_dying: AtomicUsize,
    /// The writer hid the CPU and flipped the phase.
    hidden: AtomicBool,
    /// The dying steps ran (the list's callbacks moved after them).
    dying_ran: AtomicBool,
}

impl Shared {
    fn new() -> Arc<Shared> {
        Arc::new(Shared {
            side: HotplugReadSide::new(2),
            queued_on_dying: AtomicUsize::new(0),
            hidden: AtomicBool::new(false),
            dying_ran: AtomicBool::new(false),
        })
    }

    /// A reader on CPU 0: picks CPUs from the mask, queues on the dying
    /// one if it sees it. Returns whether it saw it.
    fn read(&self) -> bool {
        let after_hide = self.hidden.load(SeqCst);
        let reader = self.side.enter(Some(CpuId(0)));
        let online = reader.online(CpuSet::range(0, 2));
        let saw = online.contains(DYING);
        if saw {
            assert!(
                !after_hide,
                "a reader that entered after the hide saw the CPU"
            );
            self.queued_on_dying.fetch_add(1, SeqCst);
            assert!(
                !self.dying_ran.load(SeqCst),
                "a reader that saw the CPU queued on it after its dying steps ran"
            );
        }
        drop(reader);
        saw
    }

    /// The writer: hide, drain (unless `skip_drain`, the planted bug),
    /// dying steps.
    fn take_down(&self, skip_drain: bool) {
        self.side.hide(CpuSet::single(DYING));
        let phase = self.side.flip();
        self.hidden.store(true, SeqCst);
        while !skip_drain && !self.side.drained(phase) {
            loom::thread::yield_now();
        }
        self.dying_ran.store(true, SeqCst);
    }
}

fn model(skip_drain: bool) {
    loom::model(move || {
        let shared = Shared::new();
        let reader = {
            let shared = Arc::clone(&shared);
            loom::thread::spawn(move || {
                shared.read();
                shared.read();
            })
        };
        shared.take_down(skip_drain);
        reader.join().unwrap();
        // Once the writer is done, nobody sees the CPU any more.
        assert!(!shared.read(), "a reader after the take-down saw the CPU");
        assert_eq!(shared.side.readers(), 0);
    });
}

#[test]
fn a_reader_that_saw_the_cpu_finishes_before_its_dying_steps() {
    model(false);
}

/// The planted bug: without the drain the model finds the reader that
/// queues on the CPU after its dying steps (and its callback is stranded).
#[test]
#[should_panic(expected = "after its dying steps ran")]
fn without_the_drain_a_reader_queues_on_a_dead_cpu() {
    model(true);
}

/// Two readers on different slots, one of them nested: the writer waits
/// for both phases' readers that saw the CPU, and neither waits for it.
#[test]
fn nested_readers_on_two_cpus_are_drained_too() {
    loom::model(|| {
        let shared = Shared::new();
        let other = {
            let shared = Arc::clone(&shared);
            loom::thread::spawn(move || {
                let outer = shared.side.enter(Some(CpuId(1)));
                let saw = outer.online(CpuSet::range(0, 2)).contains(DYING);
                shared.read();
                if saw {
                    assert!(
                        !shared.dying_ran.load(SeqCst),
                        "outer reader outlived the drain"
                    );
                }
                drop(outer);
            })
        };
        shared.take_down(false);
        other.join().unwrap();
        assert_eq!(shared.side.readers(), 0);
    });
}
