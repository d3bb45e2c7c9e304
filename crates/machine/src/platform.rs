//! What the machine gives the hotplug engine: running a function on a vCPU,
//! stop-machine, grace periods, powering vCPUs on and off, the clock, and
//! the deferred worker thread that completes Bolt's deferred callbacks.

use std::sync::Arc;
use std::thread::JoinHandle;

use hotkern_cpuhp::{
    CallbackError, Context, CpuId, CpuSet, Hotplug, Platform, PlatformError, PlatformOperation,
};
use parking_lot::{Condvar, Mutex};

use crate::kernel::Kernel;
use crate::steplog::StepLog;

/// The engine as the machine instantiates it.
pub(crate) type MachineHotplug = Hotplug<parking_lot::RawMutex, MachinePlatform>;

/// The machine as a [`Platform`].
pub(crate) struct MachinePlatform {
    pub(crate) kernel: Arc<Kernel>,
    pub(crate) worker: Arc<WorkerBell>,
    /// Where the engine's trace of step calls goes, if anywhere.
    pub(crate) step_log: Option<Arc<StepLog>>,
}

impl Platform for MachinePlatform {
    fn now_ns(&self) -> u64 {
        self.kernel.now_ns()
    }

    /// Never fails: a vCPU that is not running has its share run on the
    /// calling thread.
    fn run_on_each(
        &self,
        cpus: CpuSet,
        work: &(dyn Fn(CpuId) + Sync),
    ) -> Result<(), PlatformError> {
        self.kernel.run_on_each(cpus, work);
        Ok(())
    }

    /// Never fails: every vCPU thread answers its doorbell.
    fn stop_machine(
        &self,
        cpus: CpuSet,
        work: &(dyn Fn(CpuId) + Sync),
    ) -> Result<(), PlatformError> {
        self.kernel.stop_machine(cpus, work);
        Ok(())
    }

    /// Never fails: the grace-period thread waits as long as it takes.
    fn synchronize_grace_period(&self) -> Result<(), PlatformError> {
        self.kernel.rcu.synchronize();
        Ok(())
    }

    fn synchronize_grace_period_expedited(&self) -> Result<(), PlatformError> {
        self.kernel.rcu.synchronize_expedited();
        Ok(())
    }

    fn hotplug_lock(&self, expedited: bool) -> Result<(), PlatformError> {
        let rcu = &self.kernel.rcu;
        self.kernel
            .hotplug_lock
            .write_lock(&*self.kernel.doorbells, || {
                if expedited {
                    rcu.synchronize_expedited();
                } else {
                    rcu.synchronize();
                }
            });
        Ok(())
    }

    fn hotplug_unlock(&self) {
        if self
            .kernel
            .hotplug_lock
            .write_unlock(&*self.kernel.doorbells)
        {
            queue_lock_grace_period(&self.kernel);
        }
    }

    fn power_on_many(&self, cpus: CpuSet) -> Result<(), PlatformError> {
        self.kernel
            .power_on(self.kernel.vcpu_set(cpus))
            .map_err(|error| error.platform_error(PlatformOperation::PowerOn))
    }

    fn power_off_many(&self, cpus: CpuSet) -> Result<(), PlatformError> {
        self.kernel
            .power_off(self.kernel.vcpu_set(cpus))
            .map_err(|error| error.platform_error(PlatformOperation::PowerOff))
    }

    fn kick_deferred(&self) {
        self.worker.kick();
    }

    fn step_exited(&self, context: &Context, result: Result<(), CallbackError>) {
        if let Some(log) = &self.step_log {
            log.record(context, result);
        }
    }
}

/// Runs the hotplug lock's `rcu_sync` callback after a grace period, as
/// Linux's `rcu_sync_exit` queues it with `call_rcu`: readers go back to
/// their fast path only then, and it queues itself once more when a writer
/// came and went meanwhile.
fn queue_lock_grace_period(kernel: &Arc<Kernel>) {
    let me = Arc::downgrade(kernel);
    kernel.defer_free(Box::new(move || {
        if let Some(kernel) = me.upgrade() {
            if kernel.hotplug_lock.grace_period_ended() {
                queue_lock_grace_period(&kernel);
            }
        }
    }));
}

#[derive(Default)]
struct BellState {
    kicked: bool,
    stop: bool,
}

/// Wakes the deferred worker.
#[derive(Default)]
pub(crate) struct WorkerBell {
    state: Mutex<BellState>,
    wake: Condvar,
}

impl WorkerBell {
    fn kick(&self) {
        self.state.lock().kicked = true;
        self.wake.notify_all();
    }
}

/// The thread that runs Bolt's deferred callbacks (the "master thread" of
/// Bolt (ATC 2015)): it sleeps until the engine kicks it.
pub(crate) struct DeferredWorker {
    bell: Arc<WorkerBell>,
    handle: Option<JoinHandle<()>>,
}

impl DeferredWorker {
    pub(crate) fn spawn(
        bell: Arc<WorkerBell>,
        engine: Arc<MachineHotplug>,
    ) -> std::io::Result<DeferredWorker> {
        let theirs = Arc::clone(&bell);
        let handle = std::thread::Builder::new()
            .name("cpuhp-deferred".into())
            .spawn(move || loop {
                {
                    let mut state = theirs.state.lock();
                    while !state.kicked && !state.stop {
                        theirs.wake.wait(&mut state);
                    }
                    if state.stop {
                        return;
                    }
                    state.kicked = false;
                }
                engine.run_deferred();
            })?;
        Ok(DeferredWorker {
            bell,
            handle: Some(handle),
        })
    }

    /// Stops the worker (after its current job) and joins it.
    pub(crate) fn stop(&mut self) {
        self.bell.state.lock().stop = true;
        self.bell.wake.notify_all();
        if let Some(handle) = self.handle.take() {
            let _ = handle.join();
        }
    }
}

impl Drop for DeferredWorker {
    fn drop(&mut self) {
        self.stop();
    }
}
