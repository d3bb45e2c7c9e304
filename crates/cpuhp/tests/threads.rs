//! Real threads: several controllers reconfigure CPUs at once (operations
//! serialise on the hotplug lock) while a worker thread runs deferred
//! callbacks and the platform runs targets in parallel. Afterwards every
//! step's state agrees with the callbacks' physical state. And an operation
//! waits for the deferred callback running on its CPU.

mod common;

use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc, Condvar, Mutex};

use common::*;
use hotkern_cpuhp::{
    Callbacks, Class, CpuId, CpuSet, Engine, Error, Hotplug, Section, StepId, StepSpec, StepStatus,
};
use lock_api::RawMutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

#[test]
fn concurrent_controllers_and_worker_keep_states_exact() {
    const CPUS: u32 = 8;
    let (hp, world) = machine(Engine::Bolt, CPUS, true);
    let hp = Arc::new(hp);
    let worker = {
        let hp = hp.clone();
        std::thread::spawn(move || {
            // Sleeps until the engine kicks it, as a platform's worker does.
            let (mut ran, mut seen) = (0, 0);
            loop {
                ran += hp.run_deferred();
                match hp.platform().wait_for_kick(seen) {
                    Some(count) => seen = count,
                    None => return ran,
                }
            }
        })
    };
    let controllers: Vec<_> = (0..3u64)
        .map(|seed| {
            let hp = hp.clone();
            std::thread::spawn(move || {
                // StdRng: the same sequence on every platform (SmallRng's
                // algorithm changes with the pointer width).
                let mut rng = StdRng::seed_from_u64(seed);
                let (mut tried, mut done) = (0, 0);
                for round in 0..150 {
                    let cpu = CpuId(rng.random_range(1..CPUS));
                    let set: CpuSet = (1..CPUS).filter(|_| rng.random()).map(CpuId).collect();
                    // Targets fit the state seen just before the call, so
                    // they are refused only when another controller races.
                    let now = hp.online_cpus();
                    let fit = |part: CpuSet, all: CpuSet| if part.is_empty() { all } else { part };
                    let offline = fit(
                        set.difference(&now),
                        CpuSet::range(1, CPUS).difference(&now),
                    );
                    let online = fit(
                        set.intersection(&now),
                        CpuSet::range(1, CPUS).intersection(&now),
                    );
                    let result = match rng.random_range(0..5) {
                        0 => hp.online(offline.first().unwrap_or(cpu)),
                        1 => hp.offline(online.first().unwrap_or(cpu)),
                        2 => hp.online_many(offline),
                        3 => hp.offline_many(online),
                        _ => {
                            if round % 50 == 0 {
                                let engine = if seed % 2 == 0 {
                                    Engine::Classic
                                } else {
                                    Engine::Bolt
                                };
                                hp.set_engine(engine);
                            }
                            continue;
                        }
                    };
                    tried += 1;
                    match result {
                        Ok(_) => done += 1,
                        // Other controllers move CPUs between our check and our call.
                        Err(
                            Error::AlreadyOnline(_) | Error::AlreadyOffline(_) | Error::EmptySet,
                        ) => {}
                        Err(other) => panic!("unexpected {other}"),
                    }
                }
                (tried, done)
            })
        })
        .collect();
    let (tried, done) = controllers
        .into_iter()
        .map(|c| c.join().unwrap())
        .fold((0, 0), |(t, d), (ct, cd)| (t + ct, d + cd));
    hp.platform().stop_worker();
    let ran = worker.join().unwrap();
    hp.flush_deferred();
    eprintln!("{done} of {tried} operations succeeded; the worker ran {ran} jobs");
    // Another controller may move a CPU between the check and the call,
    // but most operations must get through for the race to be tested.
    assert!(
        2 * done >= tried,
        "only {done} of {tried} operations succeeded"
    );
    assert!(ran > 0, "the worker never ran deferred work");
    assert!(hp.online_cpus().contains(CpuId(0)));
    for cpu in hp.possible_cpus() {
        let want = if hp.is_online(cpu) {
            StepStatus::Up
        } else {
            StepStatus::Down
        };
        for i in 0..TABLE.len() {
            assert_eq!(
                hp.step_status(cpu, StepId(i as u16)),
                Some(want),
                "{cpu} step {i}"
            );
        }
    }
    assert_consistent(&hp, &world);
    assert_eq!(hp.warnings(), Default::default());
    // One reconfiguration at a time: no two stop-machines ever overlapped.
    assert_eq!(hp.platform().overlaps.load(Ordering::SeqCst), 0);
}

/// What the test saw of the threads, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Seen {
    /// A thread found an [`Observed`] lock taken and waits for it.
    Blocked,
    OnlineReturned,
}

static SEEN: Mutex<Vec<Seen>> = Mutex::new(Vec::new());
static CHANGED: Condvar = Condvar::new();

fn note(seen: Seen) {
    SEEN.lock().unwrap().push(seen);
    CHANGED.notify_all();
}

/// A lock that reports when a thread must wait for it: the one way to tell,
/// without a clock, that an operation is blocked rather than not yet there.
struct Observed(parking_lot::RawMutex);

// SAFETY: every method defers to parking_lot's mutex, which upholds the
// contract; the report is made before waiting and changes nothing.
unsafe impl RawMutex for Observed {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = Observed(parking_lot::RawMutex::INIT);
    type GuardMarker = lock_api::GuardNoSend;

    fn lock(&self) {
        if !self.0.try_lock() {
            note(Seen::Blocked);
            self.0.lock();
        }
    }

    fn try_lock(&self) -> bool {
        self.0.try_lock()
    }

    unsafe fn unlock(&self) {
        // SAFETY: the caller holds the lock, as `RawMutex::unlock` requires.
        unsafe { self.0.unlock() }
    }
}

/// A CPU comes back online while the worker is inside its deferred
/// teardown: the online must wait for that callback to finish before it
/// touches the step (the teardown's outcome decides whether the step must
/// start again). The worker holds only the worker lock while the callback
/// runs, so the online blocking on an engine lock before it returns is the
/// wait.
#[test]
fn running_deferred_job_is_waited_for() {
    // A deferrable teardown that blocks until the test releases it.
    let table = [
        StepSpec::new("bp:pages", Section::Prepare, Class::Deferrable),
        StepSpec::new("ap:active", Section::Online, Class::Critical),
    ];
    let all = CpuSet::range(0, 2);
    let hp = Hotplug::<Observed, Mock>::new(Mock::new(all, false), &table, all, all, Engine::Bolt);
    let hp = Arc::new(hp.unwrap());
    let (entered_tx, entered_rx) = mpsc::channel::<()>();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let release_rx = Mutex::new(release_rx);
    let entered_tx = Mutex::new(entered_tx);
    let up = Arc::new(Mutex::new(false));
    let (up_a, up_b) = (up.clone(), up.clone());
    hp.setup(
        StepId(0),
        Callbacks::new()
            .startup(move |ctx| {
                if !ctx.cpus.contains(CpuId(1)) {
                    return Ok(());
                }
                let mut up = up_a.lock().unwrap();
                assert!(!*up);
                *up = true;
                Ok(())
            })
            .teardown(move |_| {
                entered_tx.lock().unwrap().send(()).unwrap();
                release_rx.lock().unwrap().recv().unwrap();
                let mut up = up_b.lock().unwrap();
                assert!(*up);
                *up = false;
                Ok(())
            }),
    )
    .unwrap();
    hp.offline(CpuId(1)).unwrap();
    let worker = {
        let hp = hp.clone();
        std::thread::spawn(move || hp.run_deferred())
    };
    entered_rx.recv().unwrap();
    // Nothing is queued, but the running job is still pending.
    assert_eq!(hp.pending_deferred(), 1);
    SEEN.lock().unwrap().clear();
    let online = {
        let hp = hp.clone();
        std::thread::spawn(move || {
            let report = hp.online(CpuId(1));
            note(Seen::OnlineReturned);
            report.unwrap()
        })
    };
    let first = CHANGED
        .wait_while(SEEN.lock().unwrap(), |seen| seen.is_empty())
        .unwrap()[0];
    assert_eq!(
        first,
        Seen::Blocked,
        "online must wait for the running teardown"
    );
    release_tx.send(()).unwrap();
    // The worker may also pick up the startup that the online deferred.
    assert!(worker.join().unwrap() >= 1);
    let report = online.join().unwrap();
    assert_eq!(report.cancelled, 0);
    assert_eq!(report.deferred, 1, "the startup is deferred again");
    hp.flush_deferred();
    assert!(*up.lock().unwrap());
}

/// A failed online puts the deferred teardowns it cancelled back. When the
/// worker has meanwhile taken one of the jobs they came from, the parts
/// cannot go back into place and must all go to the back of the queue, in
/// their order: putting one back into its old job, ahead of another that
/// went to the back, would tear down the CPU's `Prepare` step before its
/// `Online` step. Every step is driven by channels, so the worker takes the
/// job exactly between the online's cancelling and its failure.
#[test]
fn failed_online_keeps_cancelled_teardowns_in_order_when_the_worker_took_one() {
    type Calls = Arc<Mutex<Vec<(&'static str, CpuSet, bool)>>>;
    let table = [
        StepSpec::new("bp:pages", Section::Prepare, Class::Deferrable),
        StepSpec::new("ap:active", Section::Online, Class::Critical),
        StepSpec::new("ap:sysfs", Section::Online, Class::Deferrable),
    ];
    let all = CpuSet::range(0, 4);
    let hp = Arc::new(Hp::new(Mock::new(all, false), &table, all, all, Engine::Bolt).unwrap());
    let calls: Calls = Arc::default();
    let (settled_tx, settled_rx) = mpsc::channel::<()>();
    let (fail_tx, fail_rx) = mpsc::channel::<()>();
    let (taken_tx, taken_rx) = mpsc::channel::<()>();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    let (settled_tx, fail_rx) = (Mutex::new(settled_tx), Mutex::new(fail_rx));
    let (taken_tx, release_rx) = (Mutex::new(taken_tx), Mutex::new(release_rx));
    let record = |name: &'static str, calls: &Calls| {
        let (up, down) = (calls.clone(), calls.clone());
        Callbacks::new()
            .startup(move |ctx| {
                up.lock().unwrap().push((name, ctx.cpus, true));
                Ok(())
            })
            .teardown(move |ctx| {
                down.lock().unwrap().push((name, ctx.cpus, false));
                Ok(())
            })
    };
    hp.setup(StepId(0), record("bp:pages", &calls)).unwrap();
    let sysfs = calls.clone();
    hp.setup(
        StepId(2),
        Callbacks::new().teardown(move |ctx| {
            sysfs.lock().unwrap().push(("ap:sysfs", ctx.cpus, false));
            if ctx.cpu == CpuId(2) && ctx.deferred {
                taken_tx.lock().unwrap().send(()).unwrap();
                release_rx.lock().unwrap().recv().unwrap();
            }
            Ok(())
        }),
    )
    .unwrap();
    // Without calls: its startup would block on the online CPUs now.
    hp.setup_nocalls(
        StepId(1),
        Callbacks::new()
            .startup(move |ctx| {
                if ctx.cpu != CpuId(1) || ctx.rollback {
                    return Ok(());
                }
                settled_tx.lock().unwrap().send(()).unwrap();
                fail_rx.lock().unwrap().recv().unwrap();
                Err(hotkern_cpuhp::CallbackError::new("refused by test"))
            })
            .teardown(|_| Ok(())),
    )
    .unwrap();
    // One job per deferrable step for CPUs 1 and 2, then two for CPU 3, so
    // that the queue never runs dry of other jobs.
    hp.offline_many(CpuSet::range(1, 3)).unwrap();
    hp.offline(CpuId(3)).unwrap();
    assert_eq!(hp.pending_deferred(), 4);
    calls.lock().unwrap().clear();
    let online = {
        let hp = hp.clone();
        std::thread::spawn(move || hp.online(CpuId(1)))
    };
    // The online has cancelled CPU 1's teardowns and is in `ap:active`.
    settled_rx.recv().unwrap();
    let worker = {
        let hp = hp.clone();
        std::thread::spawn(move || hp.run_deferred())
    };
    // The worker took the `ap:sysfs` job and runs what is left of it.
    taken_rx.recv().unwrap();
    fail_tx.send(()).unwrap();
    assert!(matches!(
        online.join().unwrap(),
        Err(Error::StepFailed {
            name: "ap:active",
            ..
        })
    ));
    release_tx.send(()).unwrap();
    worker.join().unwrap();
    hp.flush_deferred();
    let teardowns: Vec<&'static str> = calls
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, cpus, up)| cpus.contains(CpuId(1)) && !up)
        .map(|(name, _, _)| *name)
        .collect();
    assert_eq!(teardowns, ["ap:sysfs", "bp:pages"]);
    for cpu in [CpuId(1), CpuId(2), CpuId(3)] {
        for index in 0..table.len() {
            assert_eq!(
                hp.step_status(cpu, StepId(index as u16)),
                Some(StepStatus::Down)
            );
        }
    }
}
