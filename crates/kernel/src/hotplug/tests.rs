//! The engine's platform over CPUs that answer at once: a kick arrives, a
//! wake runs the posted work or leaves the loop, all on the caller's
//! thread, so each rule of [`EnginePlatform`] is seen without timing.

use alloc::vec;
use alloc::vec::Vec;
use std::sync::Mutex;

use hotkern_cpuhp::{
    Callbacks, Class, Context, CpuId, CpuSet, Engine, Hotplug, Platform, PlatformOperation,
    Section, StepId, StepSpec,
};

use super::{Control, EnginePlatform, Hardware};
use crate::activity::Activity;
use crate::hotplug_read::HotplugReadSide;
use crate::platform::Cpus;
use crate::power::{Lifecycle, Power};
use crate::rcu::{Kind, Stall, StalledCpu};
use crate::sync::{AtomicU64, Ordering};
use crate::tick::Hz;

/// CPUs that answer on the caller's thread; the controller is no CPU.
struct Answering {
    lives: Lifecycle,
    control: Control,
    /// CPUs that never arrive when kicked.
    late: CpuSet,
    /// CPUs kicked since the controller last waited: they arrive in that
    /// wait and take their first turn in the next.
    fresh: Mutex<CpuSet>,
    clock: AtomicU64,
}

impl Answering {
    /// What the CPUs do while the controller sleeps: one asked to leave
    /// leaves, one running runs what was posted to it.
    fn let_cpus_run(&self) {
        let fresh = core::mem::take(&mut *self.fresh.lock().unwrap());
        for cpu in (0..8).map(CpuId).filter(|cpu| !fresh.contains(*cpu)) {
            if self.lives.should_die(cpu.index()) {
                self.lives.die(self, cpu.index());
            } else if self.lives.is_alive(cpu.index()) {
                self.control.run_pending(self, cpu);
            }
        }
    }
}

impl Cpus for Answering {
    fn current(&self) -> Option<CpuId> {
        None
    }

    /// CPUs look at their work only while the controller waits.
    fn wake(&self, _cpu: CpuId) {}

    fn wake_threads(&self) {}

    fn wait_until(&self, condition: &dyn Fn() -> bool) {
        self.let_cpus_run();
        assert!(condition(), "would wait for good: nothing runs meanwhile");
    }

    fn now_ns(&self) -> u64 {
        self.clock.load(Ordering::SeqCst)
    }

    /// Time passes only here: the deadline comes.
    fn wait_until_deadline(&self, condition: &dyn Fn() -> bool, deadline_ns: u64) -> bool {
        self.let_cpus_run();
        if !condition() {
            self.clock.fetch_max(deadline_ns, Ordering::SeqCst);
        }
        condition()
    }
}

impl Power for Answering {
    /// A CPU that is not late arrives; it runs its first turn when the
    /// controller next waits.
    fn kick(&self, cpu: CpuId) {
        if !self.late.contains(cpu) {
            self.lives.arrive(self, cpu.index());
            self.fresh.lock().unwrap().insert(cpu);
        }
    }
}

struct Mock {
    cpus: Answering,
    /// The CPU a grace period stalls on, if any.
    stall: Option<CpuId>,
    refuse_gather: bool,
    /// A CPU the platform cannot start or stop.
    unpowerable: Option<CpuId>,
    kicks: AtomicU64,
    queued: Mutex<Vec<fn(&Mock)>>,
    stalls_reported: Mutex<Vec<PlatformOperation>>,
    /// The atomic read side, offered to the engine platform if `readers`.
    read_side: HotplugReadSide,
    readers: bool,
}

impl Mock {
    /// CPUs 0..`running` running; `late` never arrive.
    fn new(running: u32, late: CpuSet) -> EnginePlatform<Mock> {
        let mock = Mock {
            cpus: Answering {
                lives: Lifecycle::new(),
                control: Control::new(8),
                late,
                fresh: Mutex::new(CpuSet::EMPTY),
                clock: AtomicU64::new(0),
            },
            stall: None,
            refuse_gather: false,
            unpowerable: None,
            kicks: AtomicU64::new(0),
            queued: Mutex::new(Vec::new()),
            stalls_reported: Mutex::new(Vec::new()),
            read_side: HotplugReadSide::new(8),
            readers: true,
        };
        for cpu in 0..running as usize {
            mock.cpus.lives.boot_cpu(cpu);
        }
        EnginePlatform::new(mock)
    }

    /// Runs the callbacks queued so far; returns how many ran.
    fn run_callbacks(&self) -> usize {
        let ready: Vec<fn(&Mock)> = core::mem::take(&mut *self.queued.lock().unwrap());
        for callback in &ready {
            callback(self);
        }
        ready.len()
    }
}

impl Hardware for Mock {
    type Cpus = Answering;
    const CALL_TIMEOUT_NS: u64 = 1_000;
    const POWER_TIMEOUT_NS: u64 = 1_000;

    fn cpus(&self) -> &Answering {
        &self.cpus
    }

    fn control(&self) -> &Control {
        &self.cpus.control
    }

    fn lives(&self) -> &Lifecycle {
        &self.cpus.lives
    }

    fn check_power(&self, cpu: CpuId) -> Result<(), &'static str> {
        if self.unpowerable == Some(cpu) {
            Err("cannot be powered")
        } else {
            Ok(())
        }
    }

    fn gather(&self, _cpu: CpuId) -> Result<(), &'static str> {
        if self.refuse_gather {
            Err("refused the call")
        } else {
            Ok(())
        }
    }

    fn synchronize(&self, kind: Kind) -> Result<(), Stall> {
        let Some(cpu) = self.stall else {
            return Ok(());
        };
        Err(Stall {
            kind,
            grace_period: 1,
            detected_by: None,
            elapsed_ns: 5,
            hz: Hz::DEFAULT,
            fqs_scans: 0,
            cpus: vec![StalledCpu {
                cpu,
                behind: 0,
                ticks: 3,
                quiescent_passed: false,
                idle_entries: 0,
                idle: false,
                activity: Activity::Unknown,
            }],
        })
    }

    fn hotplug_read_side(&self) -> Option<&HotplugReadSide> {
        self.readers.then_some(&self.read_side)
    }

    fn call_rcu(&self, callback: fn(&Self)) {
        self.queued.lock().unwrap().push(callback);
    }

    fn report_stall(&self, operation: PlatformOperation, _stall: &Stall) {
        self.stalls_reported.lock().unwrap().push(operation);
    }

    fn kick_deferred(&self) {
        self.kicks.fetch_add(1, Ordering::SeqCst);
    }
}

fn set(cpus: &[u32]) -> CpuSet {
    cpus.iter().map(|&cpu| CpuId(cpu)).collect()
}

#[test]
fn power_on_is_all_or_nothing() {
    let platform = Mock::new(1, set(&[3]));
    let error = platform.power_on_many(set(&[1, 2, 3])).unwrap_err();
    assert_eq!(error.operation, PlatformOperation::PowerOn);
    assert_eq!(error.cpu, CpuId(3));
    let lives = platform.hardware().lives();
    for cpu in [1, 2] {
        assert!(!lives.is_alive(cpu), "cpu {cpu} came and was left running");
    }
    // It waited for the late CPU until the platform's deadline.
    assert!(platform.now_ns() >= Mock::POWER_TIMEOUT_NS);
    assert_eq!(platform.now_ns(), platform.hardware().cpus().now_ns());
    assert!(platform.power_on_many(set(&[1, 2])).is_ok());
    assert_eq!(platform.running(), set(&[0, 1, 2]));
    assert!(platform.power_off_many(set(&[2])).is_ok());
    assert_eq!(platform.running(), set(&[0, 1]));
    // Off twice: the CPU is not running.
    let error = platform.power_off_many(set(&[2])).unwrap_err();
    assert_eq!(
        (error.operation, error.cpu),
        (PlatformOperation::PowerOff, CpuId(2))
    );
}

#[test]
fn a_cpu_the_platform_cannot_power_is_refused_before_any_is_kicked() {
    let mut platform = Mock::new(1, CpuSet::EMPTY);
    platform.hardware.unpowerable = Some(CpuId(3));
    let error = platform.power_on_many(set(&[2, 3])).unwrap_err();
    assert_eq!((error.cpu, error.cause), (CpuId(3), "cannot be powered"));
    assert_eq!(platform.running(), set(&[0]));
    let error = platform
        .bring_up(set(&[3]), &|_| {}, &mut |_| {})
        .unwrap_err();
    assert_eq!(error.cpu, CpuId(3));
    let error = platform.power_off_many(set(&[3])).unwrap_err();
    assert_eq!(error.operation, PlatformOperation::PowerOff);
}

#[test]
fn grace_periods_that_stall_name_their_operation_and_cpu() {
    let mut platform = Mock::new(2, CpuSet::EMPTY);
    assert!(platform.synchronize_grace_period().is_ok());
    platform.hardware.stall = Some(CpuId(1));
    let normal = platform.synchronize_grace_period().unwrap_err();
    let expedited = platform.synchronize_grace_period_expedited().unwrap_err();
    assert_eq!(
        [
            (normal.operation, normal.cpu),
            (expedited.operation, expedited.cpu)
        ],
        [
            (PlatformOperation::GracePeriod, CpuId(1)),
            (PlatformOperation::ExpeditedGracePeriod, CpuId(1))
        ]
    );
}

#[test]
fn run_on_each_runs_on_running_cpus_and_names_one_that_is_not() {
    let platform = Mock::new(3, CpuSet::EMPTY);
    let ran = Mutex::new(Vec::new());
    let error = platform
        .run_on_each(set(&[1, 2, 5]), &|cpu| ran.lock().unwrap().push(cpu))
        .unwrap_err();
    assert_eq!(
        (error.operation, error.cpu, error.cause),
        (PlatformOperation::RunOn, CpuId(5), "is not running")
    );
    assert_eq!(*ran.lock().unwrap(), [CpuId(1), CpuId(2)]);
}

#[test]
fn bring_up_runs_the_steps_in_each_cpus_first_turn_and_takes_back_a_late_cpus() {
    let platform = Mock::new(1, set(&[2]));
    let ran = Mutex::new(Vec::new());
    let mut marks = Vec::new();
    let work = |cpu| ran.lock().unwrap().push(cpu);
    assert!(platform
        .bring_up(set(&[1]), &work, &mut |mark| marks.push(mark))
        .is_ok());
    assert_eq!(marks, ["power", "starting"]);
    let error = platform
        .bring_up(set(&[2]), &work, &mut |_| {})
        .unwrap_err();
    assert_eq!(error.cpu, CpuId(2));
    // Taken back: arriving now, it finds nothing to run.
    let lives = platform.hardware().lives();
    assert!(!lives.is_alive(2));
    assert!(!platform.hardware().control().has_pending(CpuId(2)));
    assert_eq!(*ran.lock().unwrap(), [CpuId(1)]);
}

#[test]
fn a_stalled_grace_period_gives_the_hotplug_lock_back_and_names_the_cpu() {
    let mut platform = Mock::new(2, CpuSet::EMPTY);
    platform.hardware.stall = Some(CpuId(1));
    let error = platform.hotplug_lock(false).unwrap_err();
    assert_eq!(
        (error.operation, error.cpu),
        (PlatformOperation::HotplugLock, CpuId(1))
    );
    let lock = platform.hardware().control().hotplug_lock();
    assert!(!lock.is_write_locked(), "kept the lock it failed to take");
    assert_eq!(
        *platform.hardware().stalls_reported.lock().unwrap(),
        [PlatformOperation::HotplugLock]
    );
}

#[test]
fn readers_go_fast_again_only_after_the_last_writers_grace_period() {
    let platform = Mock::new(2, CpuSet::EMPTY);
    let lock = platform.hardware().control().hotplug_lock();
    platform.hotplug_lock(false).unwrap();
    platform.hotplug_unlock();
    // A writer comes and goes before the first callback runs.
    platform.hotplug_lock(false).unwrap();
    platform.hotplug_unlock();
    assert!(lock.writer_near());
    assert_eq!(platform.hardware().run_callbacks(), 1);
    // That callback queued one more: the second writer left after it
    // was queued.
    assert!(lock.writer_near());
    assert_eq!(platform.hardware().run_callbacks(), 1);
    assert!(!lock.writer_near());
    assert_eq!(platform.hardware().run_callbacks(), 0);
}

#[test]
fn a_cpu_stop_machine_cannot_gather_is_named_and_nothing_runs() {
    let mut platform = Mock::new(2, CpuSet::EMPTY);
    platform.hardware.refuse_gather = true;
    let ran = Mutex::new(Vec::new());
    let error = platform
        .stop_machine(set(&[1]), &|cpu| ran.lock().unwrap().push(cpu))
        .unwrap_err();
    assert_eq!(error.operation, PlatformOperation::StopMachine);
    assert_eq!(error.cpu, CpuId(0));
    assert!(ran.lock().unwrap().is_empty());
}

/// A CPU that is asked nothing by a wake-up: what is posted to it waits
/// until its loop looks.
struct Asleep;

impl Cpus for Asleep {
    fn current(&self) -> Option<CpuId> {
        Some(CpuId(1))
    }
    fn wake(&self, _cpu: CpuId) {}
    fn wake_threads(&self) {}
    fn wait_until(&self, condition: &dyn Fn() -> bool) {
        assert!(condition(), "would wait for good");
    }
}

#[test]
fn posted_work_is_pending_until_its_cpu_runs_it_and_no_stop_is_joined_unasked() {
    let control = Control::new(4);
    let ran = Mutex::new(Vec::new());
    let work = |cpu| ran.lock().unwrap().push(cpu);
    let work: &(dyn Fn(CpuId) + Sync) = &work;
    let posted = control
        .mailboxes
        .post(&Asleep, CpuSet::single(CpuId(2)), &work);
    assert!(control.has_pending(CpuId(2)));
    assert!(!control.has_pending(CpuId(3)));
    assert!(!control.run_pending(&Asleep, CpuId(3)));
    assert!(control.run_pending(&Asleep, CpuId(2)));
    assert!(!control.has_pending(CpuId(2)));
    assert!(control.mailboxes.wait(&Asleep, &posted, u64::MAX).is_ok());
    assert_eq!(*ran.lock().unwrap(), [CpuId(2)]);
    // No stop-machine asked for this CPU: it goes on.
    assert!(!control.join_stop(&Asleep));
}

/// The engine over this platform: its step calls reach the platform's
/// tracepoint and, while recording, the recorder; deferred work kicks the
/// platform's worker. One `Prepare` step and a bring-up, so no CPU has
/// to join a stop-machine.
#[test]
fn the_engine_traces_records_and_kicks_through_the_platform() {
    let specs = [StepSpec::new(
        "test:prepare",
        Section::Prepare,
        Class::Deferrable,
    )];
    let engine: Hotplug<crate::sync::RawSpinlock, _> = Hotplug::new(
        Mock::new(1, CpuSet::EMPTY),
        &specs,
        CpuSet::range(0, 4),
        set(&[0]),
        Engine::Classic,
    )
    .unwrap();
    let ok: fn(&Context) -> Result<(), hotkern_cpuhp::CallbackError> = |_| Ok(());
    engine
        .setup(StepId(0), Callbacks::new().startup(ok).teardown(ok))
        .unwrap();
    let platform = engine.platform().hardware();
    // A run trace whose CPU 0 is this thread: the engine's own
    // `cpuhp_callback` events land on it, one per CPU a call covers.
    let tracing = crate::kernel_trace::tests::started(usize::MAX);
    let before = crate::kernel_trace::tests::events_named(tracing, "cpuhp_callback");
    platform.control().record_steps(true);
    engine.online(CpuId(2)).unwrap();
    let after = crate::kernel_trace::tests::events_named(tracing, "cpuhp_callback");
    assert_eq!(after - before, 1, "the online's one step call is traced");
    let recorded = platform.control().take_steps();
    assert_eq!(recorded.len(), 1, "{recorded:?}");
    assert_eq!(recorded[0].name, "test:prepare");
    assert!(platform.lives().is_alive(2));
    // Bolt defers the deferrable step: its worker is kicked.
    engine.set_engine(Engine::Bolt);
    engine.online(CpuId(3)).unwrap();
    assert!(platform.kicks.load(Ordering::SeqCst) > 0);
}

#[test]
fn run_dying_waits_for_readers_that_saw_the_cpu_and_hides_it_from_later_ones() {
    let platform = Mock::new(4, CpuSet::EMPTY);
    let side = &platform.hardware.read_side;
    let all = set(&[0, 1, 2, 3]);
    let log = Mutex::new(Vec::new());
    let entered = std::sync::Barrier::new(2);
    let mut marks = Vec::new();
    std::thread::scope(|scope| {
        scope.spawn(|| {
            let reader = side.enter(Some(CpuId(1)));
            assert!(reader.online(all).contains(CpuId(3)));
            entered.wait();
            std::thread::sleep(std::time::Duration::from_millis(20));
            log.lock().unwrap().push("reader left");
            drop(reader);
        });
        entered.wait();
        platform
            .run_dying(
                set(&[3]),
                &|cpu| {
                    assert_eq!(cpu, CpuId(3));
                    let later = side.enter(Some(CpuId(2)));
                    assert!(!later.online(all).contains(cpu), "a later reader saw it");
                    log.lock().unwrap().push("dying steps");
                },
                &mut |stage| marks.push(stage),
            )
            .unwrap();
    });
    assert_eq!(*log.lock().unwrap(), ["reader left", "dying steps"]);
    assert_eq!(marks, ["reader-drain", "dying"]);
    assert!(side.hidden().is_empty(), "shown again once its steps ran");
    assert_eq!(side.readers(), 0);
}

#[test]
fn run_dying_names_a_cpu_that_is_not_running_and_runs_nothing() {
    let platform = Mock::new(3, CpuSet::EMPTY);
    let ran = Mutex::new(Vec::new());
    let error = platform
        .run_dying(
            set(&[2, 5]),
            &|cpu| ran.lock().unwrap().push(cpu),
            &mut |_| {},
        )
        .unwrap_err();
    assert_eq!(error.operation, PlatformOperation::RunDying);
    assert_eq!(error.cpu, CpuId(5));
    assert!(ran.lock().unwrap().is_empty());
    assert!(platform.hardware.read_side.hidden().is_empty());
}

#[test]
fn without_a_read_side_run_dying_keeps_the_stop_machine() {
    let mut platform = Mock::new(3, CpuSet::EMPTY);
    platform.hardware.readers = false;
    // A refused gather shows the rendezvous was asked for (these CPUs
    // answer posted work, not a stop-machine).
    platform.hardware.refuse_gather = true;
    let ran = Mutex::new(Vec::new());
    let mut marks = Vec::new();
    let error = platform
        .run_dying(
            set(&[2]),
            &|cpu| ran.lock().unwrap().push(cpu),
            &mut |stage| marks.push(stage),
        )
        .unwrap_err();
    assert_eq!(error.operation, PlatformOperation::StopMachine);
    assert!(ran.lock().unwrap().is_empty());
    assert_eq!(marks, ["stop-machine"]);
}
