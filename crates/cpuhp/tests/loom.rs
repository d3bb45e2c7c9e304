//! Model check of the deferred-work race with `loom`: a real (loom) thread
//! runs the deferred worker while the controlling thread reconfigures the
//! same CPU again. Every interleaving of the engine's lock operations is
//! explored; in each, callbacks must never start a step twice or tear down
//! a step that is not up, and the end state must be exact.
//!
//! Run with `RUSTFLAGS="--cfg loom" cargo test --release -p hotkern-cpuhp --test loom`.
#![cfg(loom)]

use std::collections::BTreeSet;
use std::sync::OnceLock;

use hotkern_cpuhp::{
    Callbacks, Class, CpuId, CpuSet, Direction, Engine, FailAt, Hotplug, Platform, Section, StepId,
    StepSpec, StepStatus,
};
use loom::sync::atomic::{AtomicBool, Ordering};
use loom::sync::Arc;
use loom::thread;

/// A `lock_api` mutex over a loom atomic, so loom sees every lock and
/// unlock as a scheduling point. The atomic is created on first use because
/// `lock_api` wants a `const` initial value and loom objects must be
/// created inside the model.
struct LoomRawMutex {
    locked: OnceLock<AtomicBool>,
}

impl LoomRawMutex {
    fn flag(&self) -> &AtomicBool {
        self.locked.get_or_init(|| AtomicBool::new(false))
    }
}

// SAFETY: `try_lock` succeeds only by swapping the flag from false to true
// (Acquire), and `unlock` clears it (Release), so one holder at a time, and
// the holder's writes are visible to the next.
unsafe impl lock_api::RawMutex for LoomRawMutex {
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = LoomRawMutex {
        locked: OnceLock::new(),
    };
    type GuardMarker = lock_api::GuardSend;

    fn lock(&self) {
        while !self.try_lock() {
            thread::yield_now();
        }
    }

    fn try_lock(&self) -> bool {
        self.flag()
            .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    unsafe fn unlock(&self) {
        self.flag().store(false, Ordering::Release);
    }
}

/// Everything runs on the calling thread; the worker is the loom thread.
use hotkern_cpuhp::InlinePlatform as Inline;

const TABLE: &[StepSpec] = &[
    StepSpec::new("bp:pages", Section::Prepare, Class::Deferrable),
    StepSpec::new("ap:active", Section::Online, Class::Critical),
    StepSpec::new("ap:sysfs", Section::Online, Class::Deferrable),
];

type Hp = Hotplug<LoomRawMutex, Inline>;

/// Physical state of each step on CPUs 1 and 2 (CPU 0 is never touched),
/// kept by the callbacks.
struct Physical {
    up: Vec<AtomicBool>,
}

impl Physical {
    fn flag(&self, cpu: CpuId, step: usize) -> &AtomicBool {
        &self.up[(cpu.index() - 1) * TABLE.len() + step]
    }
}

fn machine(cpus: u32) -> (Arc<Hp>, Arc<Physical>) {
    let all = CpuSet::range(0, cpus);
    let hp = Arc::new(Hp::new(Inline, TABLE, all, all, Engine::Bolt).unwrap());
    let physical = Arc::new(Physical {
        up: (0..2 * TABLE.len())
            .map(|_| AtomicBool::new(false))
            .collect(),
    });
    for index in 0..TABLE.len() {
        let (a, b) = (physical.clone(), physical.clone());
        let callbacks = Callbacks::new()
            .startup(move |ctx| {
                for cpu in ctx.cpus.iter().filter(|cpu| cpu.0 > 0) {
                    let was = a.flag(cpu, index).swap(true, Ordering::AcqRel);
                    assert!(!was, "started twice");
                }
                Ok(())
            })
            .teardown(move |ctx| {
                for cpu in ctx.cpus.iter().filter(|cpu| cpu.0 > 0) {
                    let was = b.flag(cpu, index).swap(false, Ordering::AcqRel);
                    assert!(was, "torn down while down");
                }
                Ok(())
            });
        hp.setup(StepId(index as u16), callbacks).unwrap();
    }
    (hp, physical)
}

fn assert_cpu(hp: &Hp, physical: &Physical, cpu: CpuId, up: bool) {
    assert_eq!(hp.is_online(cpu), up);
    assert_eq!(hp.pending_deferred(), 0);
    for index in 0..TABLE.len() {
        let expected = if up { StepStatus::Up } else { StepStatus::Down };
        assert_eq!(hp.step_status(cpu, StepId(index as u16)), Some(expected));
        assert_eq!(physical.flag(cpu, index).load(Ordering::Acquire), up);
    }
}

/// Explores every interleaving of `model` (preemption bound 3); returns
/// how many there were and the distinct outcomes the interleavings gave.
fn explore(
    model: impl Fn() -> (usize, usize) + Sync + Send + 'static,
) -> (usize, BTreeSet<(usize, usize)>) {
    // Plain std types: these count across loom's executions, outside the model.
    let seen = std::sync::Arc::new(std::sync::Mutex::new((0, BTreeSet::new())));
    let record = seen.clone();
    let mut builder = loom::model::Builder::new();
    builder.preemption_bound = Some(3);
    builder.check(move || {
        let outcome = model();
        let mut seen = record.lock().unwrap();
        seen.0 += 1;
        seen.1.insert(outcome);
    });
    let seen = std::mem::take(&mut *seen.lock().unwrap());
    eprintln!("explored {} interleavings, outcomes {:?}", seen.0, seen.1);
    seen
}

/// Each model explores a few hundred interleavings (357 to 608 with loom
/// 0.7 and a preemption bound of 3); far fewer means the threads no longer
/// race on the engine's locks, and that the outcomes each test requires
/// came up by luck.
fn assert_explored(explored: usize) {
    assert!(explored >= 100, "only {explored} interleavings");
}

/// CPU 1 goes offline (its deferrable teardowns are deferred) and comes
/// back while the worker runs them: each pending teardown is either run
/// before the online (which then starts the step again) or cancelled (the
/// step stays up), and a running one is waited for.
#[test]
fn online_races_deferred_teardown() {
    let (explored, outcomes) = explore(|| {
        let (hp, physical) = machine(2);
        hp.offline(CpuId(1)).unwrap();
        assert_eq!(hp.pending_deferred(), 2);
        let worker = {
            let hp = hp.clone();
            thread::spawn(move || hp.run_deferred())
        };
        let report = hp.online(CpuId(1)).unwrap();
        let ran = worker.join().unwrap();
        hp.flush_deferred();
        assert_cpu(&hp, &physical, CpuId(1), true);
        (ran, report.cancelled)
    });
    // Every race outcome must come up: the online cancels both teardowns
    // (the worker had not started), one (the worker ran or was running the
    // other), or none (the worker ran both, then the startups the online
    // deferred again).
    for cancelled in 0..=2 {
        assert!(
            outcomes.iter().any(|o| o.1 == cancelled),
            "no interleaving cancelled {cancelled}: {outcomes:?}"
        );
    }
    assert!(outcomes.contains(&(4, 0)), "{outcomes:?}");
    assert_explored(explored);
}

/// The mirror race: CPU 1 comes online (deferrable startups deferred) and
/// goes offline again while the worker runs them. Each pending startup is
/// run by the worker or completed by the offline first, and then torn down
/// exactly once.
#[test]
fn offline_races_deferred_startup() {
    let (explored, outcomes) = explore(|| {
        let (hp, physical) = machine(2);
        hp.offline(CpuId(1)).unwrap();
        hp.flush_deferred();
        hp.online(CpuId(1)).unwrap();
        assert_eq!(hp.pending_deferred(), 2);
        let worker = {
            let hp = hp.clone();
            thread::spawn(move || hp.run_deferred())
        };
        let report = hp.offline(CpuId(1)).unwrap();
        let ran = worker.join().unwrap();
        hp.flush_deferred();
        assert_cpu(&hp, &physical, CpuId(1), false);
        let finished = report.stages.iter().any(|s| s.name == "finish-deferred");
        (ran, usize::from(finished))
    });
    // The offline completed both startups before the worker ran anything,
    // and the worker ran both startups (then the teardowns the offline
    // deferred) before the offline looked.
    assert!(outcomes.contains(&(0, 1)), "{outcomes:?}");
    assert!(outcomes.contains(&(4, 0)), "{outcomes:?}");
    assert!(outcomes.iter().any(|o| o.0 > 0 && o.1 == 1), "{outcomes:?}");
    assert_explored(explored);
}

/// A bulk offline leaves one aggregated deferred teardown for CPUs 1 and 2.
/// CPU 1 then tries to come back but fails (injected), so the part of the
/// job it cancelled must be put back, while the worker may be running the
/// rest. Both CPUs must end offline with every step torn down exactly once.
#[test]
fn failed_online_puts_cancelled_work_back_while_the_worker_runs() {
    let (explored, outcomes) = explore(|| {
        let (hp, physical) = machine(3);
        hp.offline_many(CpuSet::range(1, 3)).unwrap();
        assert_eq!(hp.pending_deferred(), 2);
        let active = hp.step_id("ap:active").unwrap();
        let point = FailAt {
            step: active,
            direction: Direction::Up,
            cpu: None,
        };
        hp.inject_failure(point).unwrap();
        let worker = {
            let hp = hp.clone();
            thread::spawn(move || hp.run_deferred())
        };
        assert!(hp.online(CpuId(1)).is_err());
        let ran = worker.join().unwrap();
        let flushed = hp.flush_deferred();
        assert_cpu(&hp, &physical, CpuId(1), false);
        assert_cpu(&hp, &physical, CpuId(2), false);
        (ran, flushed)
    });
    // Two jobs in all: the cancelled parts went back into their jobs (or
    // nothing was cancelled). More: the worker had started on a job, so
    // the parts went to the back of the queue as jobs of their own.
    assert!(outcomes.iter().any(|o| o.0 + o.1 == 2), "{outcomes:?}");
    assert!(outcomes.iter().any(|o| o.0 + o.1 > 2), "{outcomes:?}");
    assert_explored(explored);
}
