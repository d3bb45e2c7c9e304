//! Loom model of a function site's dispatch switch (`function::dispatch`)
//! against a caller: the site goes from shared (the list: tracers 0 and 1)
//! to direct (tracer 0 alone) because tracer 1 is uninstalled, while a
//! caller reads the old choice, enters, runs its body and exits.
//!
//! Checked in every interleaving: no entry into tracer 1 begins after its
//! gate's `close` returned, and every entry has its exit in the tracer it
//! entered. With the planted bug (`close` not waiting) the first fails.
//!
//! Run: `RUSTFLAGS="--cfg loom" cargo test --release -p hotkern-trace --test dispatch_loom`
#![cfg(loom)]

use std::sync::Mutex;

use hotkern_trace::internals::dispatch::{plant_unwaited_close, Doorway, Gate};
use loom::sync::atomic::{AtomicUsize, Ordering};
use loom::sync::Arc;
use loom::thread;

/// The planted bug is a global switch: the models take turns.
static TURNS: Mutex<()> = Mutex::new(());

/// The site's choice: tracer 0 directly, or the list of both.
const DIRECT_0: usize = 1;
const LIST: usize = 2;

struct Site {
    choice: AtomicUsize,
    gates: [Gate; 2],
    doorways: [Doorway; 2],
    entries: [AtomicUsize; 2],
    exits: [AtomicUsize; 2],
}

fn call(site: &Site) {
    let tracers: &[usize] = match site.choice.load(Ordering::Acquire) {
        DIRECT_0 => &[0],
        _ => &[0, 1],
    };
    // What the guard keeps: the tracers entered, not the choice.
    let mut entered = Vec::new();
    for &tracer in tracers {
        if let Some(passage) = site.gates[tracer].pass(&site.doorways[tracer]) {
            site.entries[tracer].fetch_add(1, Ordering::Relaxed);
            drop(passage);
            entered.push(tracer);
        }
    }
    for tracer in entered.into_iter().rev() {
        site.exits[tracer].fetch_add(1, Ordering::Relaxed);
    }
}

fn model() {
    loom::model(|| {
        let site = Arc::new(Site {
            choice: AtomicUsize::new(LIST),
            gates: [Gate::new(), Gate::new()],
            doorways: [Doorway::new(), Doorway::new()],
            entries: [AtomicUsize::new(0), AtomicUsize::new(0)],
            exits: [AtomicUsize::new(0), AtomicUsize::new(0)],
        });
        site.gates[0].open();
        site.gates[1].open();
        let caller = {
            let site = Arc::clone(&site);
            thread::spawn(move || call(&site))
        };
        // Uninstall tracer 1: the site becomes direct, then the gate closes.
        site.choice.store(DIRECT_0, Ordering::Release);
        site.gates[1].close([&site.doorways[1]]);
        let at_close = site.entries[1].load(Ordering::Relaxed);
        caller.join().unwrap();
        assert_eq!(
            site.entries[1].load(Ordering::Relaxed),
            at_close,
            "tracer 1 was entered after its uninstall returned"
        );
        for tracer in 0..2 {
            assert_eq!(
                site.entries[tracer].load(Ordering::Relaxed),
                site.exits[tracer].load(Ordering::Relaxed)
            );
        }
    });
}

#[test]
fn no_entry_after_close_and_every_exit_in_the_tracer_entered() {
    let _turn = TURNS.lock().unwrap_or_else(|e| e.into_inner());
    model();
}

#[test]
fn closing_without_waiting_is_caught() {
    let _turn = TURNS.lock().unwrap_or_else(|e| e.into_inner());
    plant_unwaited_close(true);
    let outcome = std::panic::catch_unwind(model);
    plant_unwaited_close(false);
    let message = match outcome {
        Ok(()) => panic!("the model missed the planted bug"),
        Err(panic) => panic.downcast_ref::<String>().cloned().unwrap_or_default(),
    };
    assert!(
        message.contains("after its uninstall returned"),
        "{message}"
    );
}
