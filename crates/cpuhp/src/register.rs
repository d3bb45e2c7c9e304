//! Registration: installing and removing a step's callbacks and
//! instances, which runs them on every CPU where the step is up.

use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;

use lock_api::{Mutex, RawMutex};

use crate::cpu::{CpuId, CpuMask};
use crate::error::Error;
use crate::hotplug::Hotplug;
use crate::invoke::{invoke, Call, Registered};
use crate::platform::Platform;
use crate::states::StepStatus;
use crate::step::{Callbacks, Direction, InstanceId, Section, StepId};

impl<R: RawMutex + Sync, P: Platform<WORDS>, const WORDS: usize> Hotplug<R, P, WORDS> {
    /// Installs `step`'s callbacks and runs its startup on every CPU where
    /// the step is up (each instance, for a multi-instance step). If one
    /// fails, the startups done are torn down and nothing is installed.
    pub fn setup(&self, step: StepId, callbacks: Callbacks<WORDS>) -> Result<(), Error> {
        self.install(step, callbacks, true)
    }

    /// Installs `step`'s callbacks without calling them.
    pub fn setup_nocalls(&self, step: StepId, callbacks: Callbacks<WORDS>) -> Result<(), Error> {
        self.install(step, callbacks, false)
    }

    /// Runs `step`'s teardown on every CPU where it is up, then removes its
    /// callbacks. Refused while a multi-instance step has instances.
    pub fn remove(&self, step: StepId) -> Result<(), Error> {
        self.uninstall(step, true)
    }

    /// Removes `step`'s callbacks without calling them.
    pub fn remove_nocalls(&self, step: StepId) -> Result<(), Error> {
        self.uninstall(step, false)
    }

    /// Adds an instance to a multi-instance step and runs its startup on
    /// every CPU where the step is up; on failure undoes them and adds nothing.
    pub fn add_instance(&self, step: StepId, instance: InstanceId) -> Result<(), Error> {
        self.change_instance(step, instance, Direction::Up, true)
    }

    /// Adds an instance without calling anything.
    pub fn add_instance_nocalls(&self, step: StepId, instance: InstanceId) -> Result<(), Error> {
        self.change_instance(step, instance, Direction::Up, false)
    }

    /// Runs the instance's teardown on every CPU where the step is up, then
    /// removes it.
    pub fn remove_instance(&self, step: StepId, instance: InstanceId) -> Result<(), Error> {
        self.change_instance(step, instance, Direction::Down, true)
    }

    /// Removes an instance without calling anything.
    pub fn remove_instance_nocalls(&self, step: StepId, instance: InstanceId) -> Result<(), Error> {
        self.change_instance(step, instance, Direction::Down, false)
    }

    fn install(&self, step: StepId, callbacks: Callbacks<WORDS>, calls: bool) -> Result<(), Error> {
        let _ops = self.ops.lock();
        let entry = self.entry(step)?;
        if entry.callbacks.is_some() {
            return Err(Error::AlreadySetUp(step));
        }
        // Deferred work uses the table as it was; finish it first.
        self.flush_deferred();
        let updated = Registered {
            callbacks: Some(callbacks),
            ..entry
        };
        if calls {
            self.call_everywhere(step, &updated, Direction::Up)?;
        }
        self.replace(step, updated);
        Ok(())
    }

    fn uninstall(&self, step: StepId, calls: bool) -> Result<(), Error> {
        let _ops = self.ops.lock();
        let entry = self.entry(step)?;
        if entry.callbacks.is_none() {
            return Err(Error::NotSetUp(step));
        }
        if !entry.instances.is_empty() {
            return Err(Error::HasInstances(step));
        }
        // Pending teardowns of this step must run before it loses its callbacks.
        self.flush_deferred();
        if calls {
            // Teardowns cannot be refused; failures are counted in `warnings`.
            let _ = self.call_everywhere(step, &entry, Direction::Down);
        }
        {
            // An empty slot is up exactly on the online CPUs.
            let mut inner = self.inner.lock();
            let online = inner.online;
            for cpu in (0..inner.states.rows()).map(|cpu| CpuId(cpu as u32)) {
                if !online.contains(cpu) {
                    inner.states.set(cpu, step, StepStatus::Down);
                }
            }
        }
        self.replace(
            step,
            Registered {
                callbacks: None,
                ..entry
            },
        );
        Ok(())
    }

    fn change_instance(
        &self,
        step: StepId,
        instance: InstanceId,
        direction: Direction,
        calls: bool,
    ) -> Result<(), Error> {
        let _ops = self.ops.lock();
        let entry = self.entry(step)?;
        if !entry.spec.multi {
            return Err(Error::NotMultiInstance(step));
        }
        let present = entry.instances.contains(&instance);
        let mut instances = entry.instances.clone();
        match direction {
            Direction::Up if present => return Err(Error::DuplicateInstance(step, instance)),
            Direction::Down if !present => return Err(Error::NoSuchInstance(step, instance)),
            Direction::Up => instances.push(instance),
            Direction::Down => instances.retain(|i| *i != instance),
        }
        // Pending callbacks call every instance the step had; finish them
        // before the set changes.
        self.flush_deferred();
        if calls {
            // Call only the one instance: a view of the entry holding just it.
            let single = Registered {
                instances: vec![instance],
                ..entry.clone()
            };
            // Going down never fails (failures are counted in `warnings`).
            self.call_everywhere(step, &single, direction)?;
        }
        self.replace(step, Registered { instances, ..entry });
        Ok(())
    }

    fn entry(&self, step: StepId) -> Result<Registered<WORDS>, Error> {
        let inner = self.inner.lock();
        inner
            .table
            .get(step.index())
            .cloned()
            .ok_or(Error::NoSuchStep(step))
    }

    fn replace(&self, step: StepId, entry: Registered<WORDS>) {
        let mut inner = self.inner.lock();
        let mut table: Vec<Registered<WORDS>> = inner.table.as_ref().clone();
        table[step.index()] = entry;
        inner.table = Arc::new(table);
    }

    /// Calls `entry`'s callback in `direction` on every CPU where `step` is
    /// up, each in its section's context. On a failure going up, the CPUs
    /// already done are torn down again.
    fn call_everywhere(
        &self,
        step: StepId,
        entry: &Registered<WORDS>,
        direction: Direction,
    ) -> Result<(), Error> {
        let (cpus, engine) = {
            let inner = self.inner.lock();
            let cpus: CpuMask<WORDS> = (0..inner.states.rows())
                .map(|cpu| CpuId(cpu as u32))
                .filter(|cpu| inner.states.at(*cpu, step) == StepStatus::Up)
                .collect();
            (cpus, inner.engine)
        };
        let call = Call {
            direction,
            reuse: engine.reuse(),
            deferred: false,
            rollback: false,
        };
        let mut done = CpuMask::<WORDS>::EMPTY;
        for cpu in cpus {
            let result = self.call_in_context(entry, step, cpu, call);
            match result {
                Ok(()) => {
                    done.insert(cpu);
                }
                // A CPU the platform could not reach never ran the call,
                // even for a step that must not fail.
                Err(Error::PlatformFailed(_)) if direction == Direction::Down => {
                    self.inner.lock().warnings.rollback_failures += 1;
                }
                Err(_)
                    if entry.spec.section == Section::Starting
                        && !matches!(result, Err(Error::PlatformFailed(_))) =>
                {
                    self.inner.lock().warnings.atomic_failures += 1;
                    done.insert(cpu);
                }
                Err(_) if direction == Direction::Down => {
                    // Going away cannot be refused: count it and go on.
                    self.inner.lock().warnings.rollback_failures += 1;
                }
                Err(error) => {
                    let undo = Call {
                        direction: Direction::Down,
                        rollback: true,
                        ..call
                    };
                    for cpu in done.iter().collect::<Vec<_>>().into_iter().rev() {
                        if self.call_in_context(entry, step, cpu, undo).is_err() {
                            self.inner.lock().warnings.rollback_failures += 1;
                        }
                    }
                    return Err(error);
                }
            }
        }
        Ok(())
    }

    fn call_in_context(
        &self,
        entry: &Registered<WORDS>,
        step: StepId,
        cpu: CpuId,
        call: Call,
    ) -> Result<(), Error> {
        let cpus = CpuMask::single(cpu);
        let running = self.inner.lock().online.contains(cpu);
        match entry.spec.section {
            // A step can be up on an offline CPU only if its deferred teardown
            // failed; that CPU runs nothing, so the caller makes the call.
            Section::Starting | Section::Online if running => {
                let result: Mutex<R, Option<Result<(), Error>>> = Mutex::new(None);
                self.platform.run_on(cpu, &|_| {
                    *result.lock() = Some(invoke(&self.platform, entry, step, cpus, call).0);
                })?;
                result.into_inner().unwrap_or(Ok(()))
            }
            _ => invoke(&self.platform, entry, step, cpus, call).0,
        }
    }
}
