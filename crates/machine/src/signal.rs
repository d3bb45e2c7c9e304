//! Waking a vCPU: the machine's inter-processor interrupt, and the
//! machine's CPUs as the shared kernel's mechanisms see them ([`Cpus`]).

use std::time::Instant;

use hotkern_cpuhp::CpuId;
use hotkern_kernel::cpuset::cpu_id;
use hotkern_kernel::platform::Cpus;
use hotkern_kernel::power::Power;
use hotkern_kernel::sync::{Condvar, Mutex};

/// One vCPU's doorbell. Whoever gives a vCPU something to do rings it; the
/// vCPU sleeps on it only when it has found nothing to do since the last ring.
#[derive(Default)]
pub(crate) struct Doorbell {
    rung: Mutex<bool>,
    wake: Condvar,
}

impl Doorbell {
    /// Wakes the vCPU (or makes its next idle check return at once).
    pub(crate) fn ring(&self) {
        let mut rung = self.rung.lock();
        *rung = true;
        self.wake.notify_one();
    }

    /// Sleeps until rung or until `until`; `on_idle` runs before it sleeps
    /// and `on_wake` once it woke, both under the doorbell's lock.
    pub(crate) fn idle_wait(
        &self,
        until: Option<Instant>,
        on_idle: impl FnOnce(),
        on_wake: impl FnOnce(),
    ) {
        let mut rung = self.rung.lock();
        if !*rung {
            on_idle();
            match until {
                Some(deadline) => {
                    let _ = self.wake.wait_until(&mut rung, deadline);
                }
                None => self.wake.wait(&mut rung),
            }
            on_wake();
        }
        *rung = false;
    }

    /// Sleeps until `condition` holds, checking it under the doorbell's
    /// lock, which every ring takes: a ring after the condition became
    /// true finds this thread either before its check or asleep. Leaves
    /// `rung` as it is, for the vCPU loop's next idle check.
    fn wait_until(&self, condition: &dyn Fn() -> bool) {
        let mut rung = self.rung.lock();
        while !condition() {
            self.wake.wait(&mut rung);
        }
    }

    /// [`Doorbell::wait_until`], giving up at `deadline`; returns whether
    /// `condition` held.
    fn wait_until_deadline(&self, condition: &dyn Fn() -> bool, deadline: Instant) -> bool {
        let mut rung = self.rung.lock();
        while !condition() {
            if Instant::now() >= deadline {
                return false;
            }
            // Under loom the wait never times out: its model has no clock.
            let _ = self.wake.wait_until(&mut rung, deadline);
        }
        true
    }
}

/// The doorbells of every vCPU, and one for threads that are no vCPU.
pub(crate) struct Doorbells {
    vcpus: Box<[Doorbell]>,
    /// Where threads that are no vCPU (the hotplug engine's) wait in
    /// [`Cpus::wait_until`].
    threads: Doorbell,
    /// The machine's clock starts here: [`Cpus::now_ns`] counts from it.
    epoch: Instant,
}

impl Doorbells {
    pub(crate) fn new(cpus: usize) -> Self {
        Doorbells {
            vcpus: (0..cpus).map(|_| Doorbell::default()).collect(),
            threads: Doorbell::default(),
            epoch: Instant::now(),
        }
    }

    /// The `Instant` the machine's clock reads `ns`.
    pub(crate) fn instant_at(&self, ns: u64) -> Instant {
        self.epoch + std::time::Duration::from_nanos(ns)
    }

    pub(crate) fn ring(&self, cpu: usize) {
        if let Some(bell) = self.vcpus.get(cpu) {
            bell.ring();
        }
    }

    pub(crate) fn get(&self, cpu: usize) -> &Doorbell {
        &self.vcpus[cpu]
    }
}

/// vCPUs are threads: the current one is the thread's mark, a wake-up is a
/// ring of its doorbell, and a wait sleeps on the caller's doorbell (the
/// threads' one for a thread that is no vCPU).
impl Cpus for Doorbells {
    fn current(&self) -> Option<CpuId> {
        current_cpu().map(cpu_id)
    }

    fn wake(&self, cpu: CpuId) {
        self.ring(cpu.index());
    }

    fn wake_threads(&self) {
        let _held = self.threads.rung.lock();
        // Every one: several threads may wait, each for its own condition.
        self.threads.wake.notify_all();
    }

    fn wait_until(&self, condition: &dyn Fn() -> bool) {
        let bell = current_cpu().and_then(|cpu| self.vcpus.get(cpu));
        bell.unwrap_or(&self.threads).wait_until(condition);
    }

    fn now_ns(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }

    fn wait_until_deadline(&self, condition: &dyn Fn() -> bool, deadline_ns: u64) -> bool {
        let bell = current_cpu().and_then(|cpu| self.vcpus.get(cpu));
        bell.unwrap_or(&self.threads)
            .wait_until_deadline(condition, self.instant_at(deadline_ns))
    }
}

/// A vCPU is powered on by ringing its doorbell: its thread sleeps on it
/// while the vCPU is dead ([`hotkern_kernel::power::Lifecycle`]).
impl Power for Doorbells {
    fn kick(&self, cpu: CpuId) {
        self.ring(cpu.index());
    }
}

thread_local! {
    static CURRENT_CPU: core::cell::Cell<Option<usize>> = const { core::cell::Cell::new(None) };
}

/// The vCPU the calling thread is, if it is a vCPU thread.
pub(crate) fn current_cpu() -> Option<usize> {
    CURRENT_CPU.with(core::cell::Cell::get)
}

/// Marks the calling thread as vCPU `cpu`.
pub(crate) fn set_current_cpu(cpu: Option<usize>) {
    CURRENT_CPU.with(|current| current.set(cpu));
}
