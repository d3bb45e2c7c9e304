//! The mock platform: records what the engine asks of it (power, stop
//! machine, run-on) and runs each request where the engine says it runs.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{Condvar, Mutex};

use hotkern_cpuhp::{
    CallbackError, Context, CpuId, CpuSet, Direction, Platform, PlatformError, PlatformOperation,
};

/// Where code is running, as the mock platform arranged it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Place {
    Controller,
    Target(CpuId),
    StopMachine(CpuId),
}

thread_local! {
    pub static PLACE: Cell<Place> = const { Cell::new(Place::Controller) };
}

pub fn at<T>(place: Place, f: impl FnOnce() -> T) -> T {
    let before = PLACE.with(|p| p.replace(place));
    let out = f();
    PLACE.with(|p| p.set(before));
    out
}

/// What the engine asked of the platform.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    RunOn(CpuId),
    RunOnEach(CpuSet),
    StopMachine(CpuSet),
    /// The dying steps without a stop-machine (`bolt-nostop`).
    RunDying(CpuSet),
    GracePeriod,
    ExpeditedGracePeriod,
    /// The hotplug lock's write side taken; whether expedited.
    HotplugLock(bool),
    HotplugUnlock,
    PowerOn(CpuId),
    PowerOff(CpuId),
    Kick,
}

pub struct Mock {
    clock: AtomicU64,
    /// How far the clock moves during each platform operation: 0 (every
    /// read moves it 10 ns), or more for a platform whose operations cost.
    pub op_nanos: AtomicU64,
    /// Run `run_on_each` and `stop_machine` targets on real threads.
    pub parallel: bool,
    pub events: Mutex<Vec<Event>>,
    pub powered: Mutex<CpuSet>,
    /// Stop-machines running now; more than one means two reconfigurations overlapped.
    stopping: AtomicU64,
    pub overlaps: AtomicU64,
    /// Calls a real machine could not have made: a stop-machine over a CPU
    /// that is off, powering on a CPU that runs or off one that does not.
    pub misuses: Mutex<Vec<String>>,
    /// Kicks of the deferred worker so far, and whether it must stop: a
    /// worker thread sleeps on `kicked` until there is work, as a real one
    /// does, instead of polling.
    kicks: Mutex<(u64, bool)>,
    kicked: Condvar,
    /// A one-shot failure of the platform itself (not the engine's
    /// injection): the next call of the operation that concerns the CPU
    /// fails as the trait documents a real failure.
    pub fails: Mutex<Option<(PlatformOperation, CpuId)>>,
    /// Calls of that operation that succeed before it fails.
    pub fails_after: AtomicU64,
    /// Every step call the engine traced: entered, or returned (`Some`).
    pub traced: Mutex<Vec<Traced>>,
}

/// A traced step call: its step, direction, CPUs and whether it is the
/// return (with the result) or the entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Traced {
    pub name: &'static str,
    pub direction: Direction,
    pub cpus: CpuSet,
    pub rollback: bool,
    pub returned: Option<Result<(), CallbackError>>,
}

impl Mock {
    pub fn new(online: CpuSet, parallel: bool) -> Self {
        Mock {
            clock: AtomicU64::new(0),
            op_nanos: AtomicU64::new(0),
            parallel,
            events: Mutex::new(Vec::new()),
            powered: Mutex::new(online),
            stopping: AtomicU64::new(0),
            overlaps: AtomicU64::new(0),
            misuses: Mutex::new(Vec::new()),
            kicks: Mutex::new((0, false)),
            kicked: Condvar::new(),
            fails: Mutex::new(None),
            fails_after: AtomicU64::new(0),
            traced: Mutex::new(Vec::new()),
        }
    }

    /// The CPU of `cpus` for which `operation` fails now (once).
    fn failing(&self, operation: PlatformOperation, cpus: CpuSet) -> Option<CpuId> {
        let mut fails = self.fails.lock().unwrap();
        match *fails {
            Some((failing, cpu)) if failing == operation && cpus.contains(cpu) => {
                if self.fails_after.load(SeqCst) > 0 {
                    self.fails_after.fetch_sub(1, SeqCst);
                    return None;
                }
                *fails = None;
                Some(cpu)
            }
            _ => None,
        }
    }

    /// Blocks until the engine kicked the worker more than `seen` times in
    /// all; returns the new count, or `None` once `stop_worker` was called.
    pub fn wait_for_kick(&self, seen: u64) -> Option<u64> {
        let kicks = self
            .kicked
            .wait_while(self.kicks.lock().unwrap(), |(count, stop)| {
                *count <= seen && !*stop
            })
            .unwrap();
        (!kicks.1).then_some(kicks.0)
    }

    pub fn stop_worker(&self) {
        self.kicks.lock().unwrap().1 = true;
        self.kicked.notify_all();
    }

    fn record(&self, event: Event) {
        self.clock.fetch_add(self.op_nanos.load(SeqCst), SeqCst);
        self.events.lock().unwrap().push(event);
    }

    pub fn take_events(&self) -> Vec<Event> {
        std::mem::take(&mut *self.events.lock().unwrap())
    }

    fn each(&self, cpus: CpuSet, place: fn(CpuId) -> Place, work: &(dyn Fn(CpuId) + Sync)) {
        if self.parallel {
            std::thread::scope(|scope| {
                for cpu in cpus {
                    scope.spawn(move || at(place(cpu), || work(cpu)));
                }
            });
        } else {
            for cpu in cpus {
                at(place(cpu), || work(cpu));
            }
        }
    }
}

impl Platform for Mock {
    fn now_ns(&self) -> u64 {
        // Every clock read is 10 ns later: timings are deterministic.
        self.clock.fetch_add(10, SeqCst)
    }

    fn run_on(&self, cpu: CpuId, work: &(dyn Fn(CpuId) + Sync)) -> Result<(), PlatformError> {
        self.record(Event::RunOn(cpu));
        if let Some(cpu) = self.failing(PlatformOperation::RunOn, CpuSet::single(cpu)) {
            return Err(PlatformError::new(
                PlatformOperation::RunOn,
                cpu,
                "no hotplug thread",
            ));
        }
        at(Place::Target(cpu), || work(cpu));
        Ok(())
    }

    fn run_on_each(
        &self,
        cpus: CpuSet,
        work: &(dyn Fn(CpuId) + Sync),
    ) -> Result<(), PlatformError> {
        self.record(Event::RunOnEach(cpus));
        let failing = self.failing(PlatformOperation::RunOn, cpus);
        let reached = failing.map_or(cpus, |cpu| cpus.difference(&CpuSet::single(cpu)));
        self.each(reached, Place::Target, work);
        match failing {
            Some(cpu) => Err(PlatformError::new(
                PlatformOperation::RunOn,
                cpu,
                "no hotplug thread",
            )),
            None => Ok(()),
        }
    }

    fn stop_machine(
        &self,
        cpus: CpuSet,
        work: &(dyn Fn(CpuId) + Sync),
    ) -> Result<(), PlatformError> {
        self.record(Event::StopMachine(cpus));
        if let Some(cpu) = self.failing(PlatformOperation::StopMachine, cpus) {
            return Err(PlatformError::new(
                PlatformOperation::StopMachine,
                cpu,
                "did not come",
            ));
        }
        let off = cpus.difference(&self.powered.lock().unwrap());
        if !off.is_empty() {
            self.misuses
                .lock()
                .unwrap()
                .push(format!("stop-machine over {off}, which is off"));
        }
        if self.stopping.fetch_add(1, SeqCst) > 0 {
            self.overlaps.fetch_add(1, SeqCst);
        }
        self.each(cpus, Place::StopMachine, work);
        self.stopping.fetch_sub(1, SeqCst);
        Ok(())
    }

    /// The dying steps on the dying CPUs alone: the mock has no readers
    /// to drain, so it only marks the stages and checks the CPUs are on.
    fn run_dying(
        &self,
        cpus: CpuSet,
        work: &(dyn Fn(CpuId) + Sync),
        mark: &mut dyn FnMut(&'static str),
    ) -> Result<(), PlatformError> {
        self.record(Event::RunDying(cpus));
        mark("reader-drain");
        if let Some(cpu) = self.failing(PlatformOperation::RunDying, cpus) {
            mark("dying");
            return Err(PlatformError::new(
                PlatformOperation::RunDying,
                cpu,
                "did not run its steps",
            ));
        }
        let off = cpus.difference(&self.powered.lock().unwrap());
        if !off.is_empty() {
            self.misuses
                .lock()
                .unwrap()
                .push(format!("dying steps over {off}, which is off"));
        }
        self.each(cpus, Place::StopMachine, work);
        mark("dying");
        Ok(())
    }

    fn synchronize_grace_period(&self) -> Result<(), PlatformError> {
        self.record(Event::GracePeriod);
        match self.failing(PlatformOperation::GracePeriod, CpuSet::range(0, 64)) {
            Some(cpu) => Err(PlatformError::new(
                PlatformOperation::GracePeriod,
                cpu,
                "stalled",
            )),
            None => Ok(()),
        }
    }

    fn synchronize_grace_period_expedited(&self) -> Result<(), PlatformError> {
        self.record(Event::ExpeditedGracePeriod);
        let operation = PlatformOperation::ExpeditedGracePeriod;
        match self.failing(operation, CpuSet::range(0, 64)) {
            Some(cpu) => Err(PlatformError::new(operation, cpu, "stalled")),
            None => Ok(()),
        }
    }

    fn hotplug_lock(&self, expedited: bool) -> Result<(), PlatformError> {
        let operation = PlatformOperation::HotplugLock;
        if let Some(cpu) = self.failing(operation, CpuSet::range(0, 64)) {
            return Err(PlatformError::new(operation, cpu, "stalled"));
        }
        self.record(Event::HotplugLock(expedited));
        Ok(())
    }

    fn hotplug_unlock(&self) {
        self.record(Event::HotplugUnlock);
    }

    /// All or nothing: a CPU that fails leaves every CPU of the set off.
    fn power_on_many(&self, cpus: CpuSet) -> Result<(), PlatformError> {
        if let Some(cpu) = self.failing(PlatformOperation::PowerOn, cpus) {
            return Err(PlatformError::new(
                PlatformOperation::PowerOn,
                cpu,
                "did not start",
            ));
        }
        for cpu in cpus {
            self.record(Event::PowerOn(cpu));
            let mut powered = self.powered.lock().unwrap();
            let running = powered.contains(cpu);
            powered.insert(cpu);
            drop(powered);
            if running {
                self.misuses
                    .lock()
                    .unwrap()
                    .push(format!("{cpu} powered on while running"));
            }
        }
        Ok(())
    }

    /// A CPU that fails stays powered.
    fn power_off_many(&self, cpus: CpuSet) -> Result<(), PlatformError> {
        let failing = self.failing(PlatformOperation::PowerOff, cpus);
        for cpu in cpus {
            if Some(cpu) != failing {
                self.record(Event::PowerOff(cpu));
                let mut powered = self.powered.lock().unwrap();
                let running = powered.contains(cpu);
                powered.remove(cpu);
                drop(powered);
                if !running {
                    self.misuses
                        .lock()
                        .unwrap()
                        .push(format!("{cpu} powered off while off"));
                }
            }
        }
        match failing {
            Some(cpu) => Err(PlatformError::new(
                PlatformOperation::PowerOff,
                cpu,
                "did not stop",
            )),
            None => Ok(()),
        }
    }

    fn kick_deferred(&self) {
        self.record(Event::Kick);
        self.kicks.lock().unwrap().0 += 1;
        self.kicked.notify_all();
    }

    fn step_entered(&self, context: &Context) {
        self.traced.lock().unwrap().push(Traced {
            name: context.name,
            direction: context.direction,
            cpus: context.cpus,
            rollback: context.rollback,
            returned: None,
        });
    }

    fn step_exited(&self, context: &Context, result: Result<(), CallbackError>) {
        self.traced.lock().unwrap().push(Traced {
            name: context.name,
            direction: context.direction,
            cpus: context.cpus,
            rollback: context.rollback,
            returned: Some(result),
        });
    }
}
