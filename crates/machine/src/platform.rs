//! The machine's hardware under the shared engine platform
//! ([`hotkern_kernel::hotplug`]): its vCPUs are threads woken by
//! doorbells, a stop-machine gathers them by ringing (each vCPU's loop
//! joins at its next turn), its grace periods are [`crate::rcu`]'s thread,
//! and Bolt's deferred callbacks run on a worker thread of their own.

use std::sync::Arc;
use std::thread::JoinHandle;

use hotkern_cpuhp::{CpuId, Hotplug};
use hotkern_kernel::hotplug::{Control, EnginePlatform, Hardware};
use hotkern_kernel::hotplug_read::HotplugReadSide;
use hotkern_kernel::power::Lifecycle;
use hotkern_kernel::rcu::{Kind, Stall};
use hotkern_kernel::steps::StepKernel;
use parking_lot::{Condvar, Mutex};

use crate::kernel::Kernel;
use crate::signal::Doorbells;

/// The engine as the machine instantiates it.
pub(crate) type MachineHotplug = Hotplug<parking_lot::RawMutex, EnginePlatform<MachineHardware>>;

/// The machine under the engine's platform.
pub(crate) struct MachineHardware {
    pub(crate) kernel: Arc<Kernel>,
    pub(crate) worker: Arc<WorkerBell>,
}

impl Hardware for MachineHardware {
    type Cpus = Doorbells;
    /// Every vCPU thread answers its doorbell: no deadlines.
    const CALL_TIMEOUT_NS: u64 = u64::MAX;
    const POWER_TIMEOUT_NS: u64 = u64::MAX;

    fn cpus(&self) -> &Doorbells {
        &self.kernel.doorbells
    }

    fn control(&self) -> &Control {
        &self.kernel.control
    }

    fn lives(&self) -> &Lifecycle {
        &self.kernel.lives
    }

    fn check_power(&self, cpu: CpuId) -> Result<(), &'static str> {
        if cpu.index() < self.kernel.cpus {
            Ok(())
        } else {
            Err("no such CPU")
        }
    }

    /// Rings the vCPU: its loop joins at its next turn.
    fn gather(&self, cpu: CpuId) -> Result<(), &'static str> {
        self.kernel.doorbells.ring(cpu.index());
        Ok(())
    }

    /// Every reader of the online mask that places something on a CPU
    /// goes through the shared kernel's `queue_work`, `arm_timer` and
    /// `call_rcu`, which enter it: `bolt-nostop` runs without a
    /// stop-machine here.
    fn hotplug_read_side(&self) -> Option<&HotplugReadSide> {
        Some(&self.kernel.subsystems.hotplug_read)
    }

    /// Never stalls: the grace-period thread waits as long as it takes.
    fn synchronize(&self, kind: Kind) -> Result<(), Stall> {
        match kind {
            Kind::Normal => self.kernel.rcu.synchronize(),
            Kind::Expedited => self.kernel.rcu.synchronize_expedited(),
        }
        Ok(())
    }

    /// The callback holds the kernel weakly: one still queued when the
    /// machine stops keeps nothing alive.
    fn call_rcu(&self, callback: fn(&Self)) {
        let kernel = Arc::downgrade(&self.kernel);
        let worker = Arc::clone(&self.worker);
        StepKernel::defer_free(
            &*self.kernel,
            Box::new(move || {
                if let Some(kernel) = kernel.upgrade() {
                    callback(&MachineHardware { kernel, worker });
                }
            }),
        );
    }

    fn kick_deferred(&self) {
        self.worker.kick();
    }
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
