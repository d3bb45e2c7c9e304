//! The public face of the machine: build it, give it tasks, take CPUs
//! offline and online (one or many), check its invariants, shut it down.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use hotkern_cpuhp::{Class, CpuId, CpuSet, Direction, Engine, FailAt, Report, Section, StepTime};
use hotkern_kernel::audit::{Counts, Resource, Violation};
use hotkern_kernel::cpuset::MAX_CPUS as MAX_VCPUS;
use hotkern_kernel::frames::{FrameCounts, FramePool};
use hotkern_kernel::hotplug::EnginePlatform;
use hotkern_kernel::kthread::Role;
use hotkern_kernel::ledger::{Item, Tally};
use hotkern_kernel::steps::{self as step_table, StepKernel};
use hotkern_kernel::tick::Hz;
use hotkern_physmem::{PageCount, Pfn};

use crate::error::MachineError;
use crate::eventlog::Trace;
use crate::invariants::{self, MachineState};
use crate::kernel::Kernel;
use crate::memdev::driver;
use crate::platform::{DeferredWorker, MachineHardware, MachineHotplug, WorkerBell};
use crate::steplog::{self, StepCall};
use crate::steps::STEPS;
use crate::sysfs::SysfsError;
use crate::task::{Context, Task, TaskStatus};
use hotkern_kernel::vmstat::Totals;

mod builder;
mod shutdown;

pub use builder::MachineBuilder;
use shutdown::release_everything;
pub use shutdown::ShutdownReport;

fn spawn_error(error: std::io::Error) -> MachineError {
    MachineError::Spawn(error.to_string())
}

/// One of the machine's hotplug steps, as registered with the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepInfo {
    /// `subsystem:what`.
    pub name: &'static str,
    /// Where its callbacks run.
    pub section: Section,
    /// Critical or deferrable.
    pub class: Class,
    /// Why it has that class.
    pub reason: &'static str,
}

impl MachineBuilder {
    /// Starts the machine: vCPU threads, the grace-period thread, the
    /// deferred worker, and every subsystem's steps on the online vCPUs.
    pub fn build(self) -> Result<Machine, MachineError> {
        if self.cpus == 0 || self.cpus > MAX_VCPUS {
            return Err(MachineError::Config("cpus must be between 1 and 64"));
        }
        let online = self.online.unwrap_or(self.cpus);
        if online == 0 || online > self.cpus {
            return Err(MachineError::Config(
                "online must be between 1 and the number of cpus",
            ));
        }
        if self.frames.0 == 0 {
            return Err(MachineError::Config("memory must hold at least one frame"));
        }
        if let Some(config) = &self.memory_device {
            config.validate().map_err(MachineError::Config)?;
        }
        let machine = Machine::start(
            self.cpus,
            online,
            self.engine,
            self.frames,
            self.hz,
            self.record_step_calls,
        )?;
        if let Some(config) = self.memory_device {
            driver::attach(&machine.kernel, config, self.frames)?;
        }
        Ok(machine)
    }
}

/// A running user-mode machine.
///
/// ```
/// use hotkern_machine::{CpuId, Engine, Machine, TaskStatus};
///
/// let machine = Machine::builder().cpus(4).engine(Engine::Bolt).build().unwrap();
/// for _ in 0..100 {
///     machine.submit(|ctx| {
///         let page = ctx.alloc_page().expect("memory");
///         ctx.free_page(page);
///         TaskStatus::Done
///     });
/// }
/// let report = machine.offline(CpuId(3)).unwrap();
/// println!("offline took {} µs", report.nanos / 1000);
/// machine.online(CpuId(3)).unwrap();
/// assert!(machine.wait_idle(std::time::Duration::from_secs(10)));
/// assert!(machine.check_invariants().is_empty());
/// let done = machine.shutdown();
/// assert!(done.is_clean(), "{done:?}");
/// ```
pub struct Machine {
    pub(crate) kernel: Arc<Kernel>,
    pub(crate) engine: Arc<MachineHotplug>,
    vcpu_threads: Vec<JoinHandle<()>>,
    worker: Option<DeferredWorker>,
    ever_kept: AtomicBool,
    down: bool,
    /// Whether the engine's step calls are recorded.
    pub(crate) records_steps: bool,
}

impl Machine {
    /// A builder with the defaults: 4 vCPUs, all online, classic engine.
    pub fn builder() -> MachineBuilder {
        MachineBuilder {
            cpus: 4,
            online: None,
            engine: Engine::Classic,
            frames: PageCount(16 * 1024),
            hz: Hz::DEFAULT,
            record_step_calls: false,
            memory_device: None,
        }
    }

    /// Every hotplug step the machine's subsystems register, in table order.
    pub fn steps() -> Vec<StepInfo> {
        STEPS
            .iter()
            .map(|def| StepInfo {
                name: def.spec.name,
                section: def.spec.section,
                class: def.spec.class,
                reason: def.reason,
            })
            .collect()
    }

    fn start(
        cpus: usize,
        online: usize,
        engine: Engine,
        frames: PageCount,
        hz: Hz,
        records_steps: bool,
    ) -> Result<Machine, MachineError> {
        // Frames start above the first MiB, as on a PC.
        let memory = FramePool::new(Pfn(256), frames).map_err(MachineError::Memory)?;
        let kernel = Kernel::new(cpus, memory, hz).map_err(spawn_error)?;
        let mut machine = Machine {
            kernel: Arc::clone(&kernel),
            engine: Arc::new(
                step_table::engine::<_, _, Kernel>(
                    EnginePlatform::new(MachineHardware {
                        kernel: Arc::clone(&kernel),
                        worker: Arc::new(WorkerBell::default()),
                    }),
                    CpuSet::range(0, cpus as u32),
                    CpuSet::range(0, online as u32),
                    engine,
                )
                .map_err(MachineError::Hotplug)?,
            ),
            vcpu_threads: Vec::new(),
            worker: None,
            ever_kept: AtomicBool::new(engine.is_bolt()),
            down: false,
            records_steps,
        };
        kernel.control.record_steps(records_steps);
        for cpu in 0..cpus {
            let theirs = Arc::clone(&kernel);
            let handle = std::thread::Builder::new()
                .name(format!("vcpu/{cpu}"))
                .spawn(move || theirs.vcpu_main(cpu))
                .map_err(spawn_error)?;
            machine.vcpu_threads.push(handle);
        }
        for cpu in 0..online {
            kernel.boot(cpu);
        }
        // Boot: every step's startup on the online vCPUs, in table order.
        step_table::register(&machine.engine, &kernel)?;
        let bell = Arc::clone(&machine.engine.platform().hardware().worker);
        machine.worker =
            Some(DeferredWorker::spawn(bell, Arc::clone(&machine.engine)).map_err(spawn_error)?);
        Ok(machine)
    }

    /// Number of vCPUs.
    pub fn cpus(&self) -> usize {
        self.kernel.cpus
    }

    /// The engine running operations.
    pub fn engine(&self) -> Engine {
        self.engine.engine()
    }

    /// Switches engine (waits for deferred work first).
    pub fn set_engine(&self, engine: Engine) {
        self.engine.set_engine(engine);
        if engine.is_bolt() {
            // Bolt may keep structures of offline CPUs from now on.
            self.ever_kept.store(true, Ordering::Relaxed);
        }
    }

    /// vCPUs online now.
    pub fn online_cpus(&self) -> CpuSet {
        self.kernel.online_mask()
    }

    /// vCPUs the scheduler places tasks on now.
    pub fn active_cpus(&self) -> CpuSet {
        self.kernel.active_mask()
    }

    /// Submits a task; it runs slice by slice until it returns
    /// [`TaskStatus::Done`]. Returns its id.
    pub fn submit(&self, body: impl FnMut(&mut Context<'_>) -> TaskStatus + Send + 'static) -> u64 {
        let id = self.kernel.ledger.issue(Item::Task);
        let cpu = self.kernel.next_submit_cpu();
        self.kernel.push_task(
            cpu,
            Task {
                id,
                body: Box::new(body),
            },
        );
        id
    }

    fn check_cpu(&self, cpu: CpuId) -> Result<(), MachineError> {
        if cpu.index() < self.kernel.cpus {
            Ok(())
        } else {
            Err(MachineError::NoSuchCpu(cpu))
        }
    }

    fn check_set(&self, cpus: CpuSet) -> Result<CpuSet, MachineError> {
        match cpus.difference(&self.all_cpus()).first() {
            Some(cpu) => Err(MachineError::NoSuchCpu(cpu)),
            None => Ok(cpus),
        }
    }

    fn all_cpus(&self) -> CpuSet {
        CpuSet::range(0, self.kernel.cpus as u32)
    }

    /// Takes `cpu` offline. On failure it is online again, as before.
    pub fn offline(&self, cpu: CpuId) -> Result<Report, MachineError> {
        self.check_cpu(cpu)?;
        Ok(self.engine.offline(cpu)?)
    }

    /// Brings `cpu` online. On failure it is offline again, as before.
    pub fn online(&self, cpu: CpuId) -> Result<Report, MachineError> {
        self.check_cpu(cpu)?;
        Ok(self.engine.online(cpu)?)
    }

    /// Takes every vCPU of `cpus` offline: one by one with classic, in one
    /// bulk operation with Bolt. All or nothing.
    pub fn offline_many(&self, cpus: CpuSet) -> Result<Report, MachineError> {
        Ok(self.engine.offline_many(self.check_set(cpus)?)?)
    }

    /// Brings every vCPU of `cpus` online (see [`Machine::offline_many`]).
    pub fn online_many(&self, cpus: CpuSet) -> Result<Report, MachineError> {
        Ok(self.engine.online_many(self.check_set(cpus)?)?)
    }

    /// Waits until every deferred callback has run.
    pub fn wait_deferred(&self) {
        self.engine.flush_deferred();
    }

    /// The engine's timing of each step's last startup and teardown (on
    /// the critical path or deferred), in table order.
    pub fn step_times(&self) -> Vec<(&'static str, StepTime)> {
        STEPS
            .iter()
            .enumerate()
            .map(|(index, def)| {
                let step = hotkern_cpuhp::StepId(index as u16);
                (
                    def.spec.name,
                    self.engine.step_time(step).unwrap_or_default(),
                )
            })
            .collect()
    }

    /// Deferred callbacks still pending.
    pub fn pending_deferred(&self) -> usize {
        self.engine.pending_deferred()
    }

    /// Waits until every task, work item, timer and RCU callback handed to
    /// the machine has completed, or `timeout` passes; returns whether all did.
    pub fn wait_idle(&self, timeout: Duration) -> bool {
        self.kernel.ledger.wait_drained(timeout)
    }

    /// Waits until every RCU callback queued before the call has run
    /// (Linux's `rcu_barrier`); call it from a thread that is no vCPU.
    pub fn rcu_barrier(&self) {
        self.kernel.rcu.barrier();
    }

    /// Counts for one kind of item.
    pub fn tally(&self, item: Item) -> Tally {
        self.kernel.ledger.tally(item)
    }

    /// Arms a one-shot failure of step `name` in `direction` (for `cpu`, or
    /// any CPU), as Linux's `hotplug/fail`.
    pub fn inject_failure(
        &self,
        name: &str,
        direction: Direction,
        cpu: Option<CpuId>,
    ) -> Result<(), MachineError> {
        if let Some(cpu) = cpu {
            self.check_cpu(cpu)?;
        }
        let step = self
            .engine
            .step_id(name)
            .ok_or_else(|| MachineError::NoSuchStep(name.to_owned()))?;
        self.engine.inject_failure(FailAt {
            step,
            direction,
            cpu,
        })?;
        Ok(())
    }

    /// The step callbacks the engine made since the last call, in order;
    /// empty unless built with [`MachineBuilder::record_step_calls`].
    #[doc(hidden)]
    pub fn take_step_calls(&self) -> Vec<StepCall> {
        steplog::take_calls(&self.kernel.control)
    }

    /// Disarms an injected failure that has not fired.
    pub fn clear_failure(&self) {
        self.engine.clear_failure();
    }

    /// Reads a sysfs node, e.g. `devices/system/cpu/cpu1/online`.
    pub fn sysfs_read(&self, path: &str) -> Result<String, SysfsError> {
        self.kernel.sysfs.read(path, self.kernel.online_mask())
    }

    /// Every visible sysfs node.
    pub fn sysfs_list(&self) -> Vec<String> {
        self.kernel.sysfs.list(self.kernel.online_mask())
    }

    /// The trace: every event the per-CPU buffers hold, and how many they overwrote.
    pub fn trace(&self) -> Trace {
        self.kernel.events.snapshot()
    }

    /// Machine-wide counters (task slices, page frames allocated and
    /// freed): every CPU's, plus those folded from CPUs that went away.
    pub fn counters(&self) -> Totals {
        self.kernel.vmstat().sum()
    }

    /// Creations and destructions per kind of per-CPU resource so far.
    pub fn resource_counts(&self) -> BTreeMap<Resource, Counts> {
        self.kernel.audit().counts()
    }

    /// Live kernel threads (OS threads) of every vCPU.
    pub fn kernel_threads(&self) -> usize {
        let mut count = 0;
        for cpu in 0..self.kernel.cpus {
            for role in Role::ALL {
                count += usize::from(self.kernel.kthreads().exists(cpu, role));
            }
        }
        count
    }

    /// Hot-adds memory: plugs frames `first..first + frames` into physmem
    /// and frees them into the pool. Refused, changing nothing, if the range
    /// is empty or overlaps plugged memory.
    pub fn plug_memory(&self, first: Pfn, frames: PageCount) -> Result<(), MachineError> {
        self.kernel
            .pages
            .pool()
            .plug(first, frames)
            .map_err(MachineError::Memory)
    }

    /// Memory segments plugged (one at start, one per hot-add).
    pub fn memory_segments(&self) -> usize {
        self.kernel.pages.pool().segments()
    }

    /// Free page frames in the shared pool, and the pool's size.
    pub fn frames(&self) -> FrameCounts {
        self.kernel.pages.pool().counts()
    }

    /// Waits for deferred work, then takes a snapshot of every vCPU's
    /// hotplug-relevant state and resources.
    pub fn state(&self) -> MachineState {
        self.wait_deferred();
        invariants::snapshot(&self.kernel)
    }

    /// Waits for deferred work, then checks every invariant: the masks
    /// against each vCPU's state, the per-CPU resources against the online
    /// set, page frame accounting, and every violation seen while running.
    /// Empty when all hold.
    pub fn check_invariants(&self) -> Vec<Violation> {
        self.wait_deferred();
        let engine_online = self.engine.online_cpus();
        let frees_everything =
            !self.ever_kept.load(Ordering::Relaxed) && self.engine.engine() == Engine::Classic;
        let mut found = invariants::check(&self.kernel, engine_online, frees_everything);
        // The memory device's findings, in the shared vocabulary.
        found.extend(
            self.check_memory()
                .into_iter()
                .map(|violation| Violation::PageAccounting {
                    detail: violation.to_string(),
                }),
        );
        found
    }
}

impl Machine {
    /// Waits until readers of the hotplug lock are back on their fast path:
    /// the grace period the last hotplug operation queued has ended, so the
    /// next operation starts from a quiet machine and its first wait is a
    /// whole grace period (as a lone `echo 1 > online` pays in Linux).
    /// Returns false if that took longer than `timeout`.
    pub fn wait_hotplug_lock_quiet(&self, timeout: std::time::Duration) -> bool {
        let start = std::time::Instant::now();
        while self.kernel.control.hotplug_lock().writer_near() {
            if start.elapsed() > timeout {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_micros(200));
        }
        true
    }
}

impl Machine {
    /// Stops the machine: waits for deferred work, stops and joins the
    /// worker, every vCPU thread, every kernel thread and the grace-period
    /// thread, frees every per-CPU resource, and reports what it found.
    /// Items still pending are counted as outstanding.
    pub fn shutdown(mut self) -> ShutdownReport {
        self.stop()
    }

    fn stop(&mut self) -> ShutdownReport {
        if !self.down {
            self.down = true;
            if let Some(memory) = self.kernel.memory.get() {
                memory.stop();
            }
            self.engine.flush_deferred();
            if let Some(mut worker) = self.worker.take() {
                worker.stop();
            }
            self.kernel.stop_vcpus();
            for handle in self.vcpu_threads.drain(..) {
                let _ = handle.join();
            }
            release_everything(&self.kernel);
            self.kernel.rcu.stop();
        }
        let mut violations = self.kernel.audit().violations();
        for (resource, cpu) in self.kernel.audit().live() {
            violations.push(Violation::Leak { resource, cpu });
        }
        ShutdownReport {
            tallies: self.kernel.ledger.tallies(),
            violations,
            counts: self.kernel.audit().counts(),
        }
    }
}

impl Drop for Machine {
    fn drop(&mut self) {
        // Never leak a thread, even when the owner forgot to shut down.
        let _ = self.stop();
    }
}
