//! What the engine needs from the machine it runs on.

use crate::cpu::{CpuId, CpuSet};

/// Services the machine provides to the engine.
///
/// The engine is pure: every cross-CPU action, every wait and every clock
/// read goes through this trait. Every method that takes `work` runs it and
/// returns only when all of it has finished. Work given to the platform never
/// blocks on the engine, so the platform may run it on any thread it likes.
///
/// ```
/// use hotkern_cpuhp::{CpuId, CpuSet, Platform};
/// /// Runs everything on the calling thread; enough for single-threaded tests.
/// struct Inline;
/// impl Platform for Inline {
///     fn now_ns(&self) -> u64 { 0 }
///     fn run_on(&self, cpu: CpuId, work: &(dyn Fn(CpuId) + Sync)) { work(cpu) }
///     fn stop_machine(&self, cpus: CpuSet, work: &(dyn Fn(CpuId) + Sync)) {
///         cpus.iter().for_each(|cpu| work(cpu))
///     }
///     fn synchronize_grace_period(&self) {}
/// }
/// ```
pub trait Platform: Sync {
    /// Monotonic time in nanoseconds (for per-step timing).
    fn now_ns(&self) -> u64;

    /// Runs `work(cpu)` on `cpu`'s hotplug thread and waits for it.
    /// Used for `Online` steps, while `cpu` is online.
    fn run_on(&self, cpu: CpuId, work: &(dyn Fn(CpuId) + Sync));

    /// Runs `work(cpu)` on the hotplug thread of every CPU in `cpus`, in
    /// parallel if the platform can, and waits for all. The default runs them
    /// one after the other with [`run_on`](Platform::run_on).
    fn run_on_each(&self, cpus: CpuSet, work: &(dyn Fn(CpuId) + Sync)) {
        for cpu in cpus {
            self.run_on(cpu, work);
        }
    }

    /// Stops every running CPU, runs `work(cpu)` on each CPU of `cpus` in
    /// parallel while the others wait with interrupts off, then resumes them.
    /// On the way up the targets are powered on but not yet in the online
    /// mask; on the way down they are still online.
    fn stop_machine(&self, cpus: CpuSet, work: &(dyn Fn(CpuId) + Sync));

    /// Brings every CPU of `cpus` up: powers it on and has it run its
    /// `Starting` steps, `work(cpu)` on that CPU with interrupts off before
    /// it is in the online mask; returns once every CPU ran them. Each
    /// `mark(stage)` ends a timed stage (begun by the previous mark or the
    /// call): `"power"` once the CPUs execute, then one for the steps.
    ///
    /// Linux's incoming CPU runs them from its own start-up path
    /// (`notify_cpu_starting` in `start_secondary`) before it reports
    /// alive, and stops no other CPU: only the way down needs a
    /// stop-machine (`take_cpu_down`). A platform whose CPUs can run work
    /// as they come up overrides this; the default powers them on with
    /// [`power_on_many`](Platform::power_on_many), then runs the steps in a
    /// [`stop_machine`](Platform::stop_machine) (`"stop-machine"`).
    fn bring_up(
        &self,
        cpus: CpuSet,
        work: &(dyn Fn(CpuId) + Sync),
        mark: &mut dyn FnMut(&'static str),
    ) {
        self.power_on_many(cpus);
        mark("power");
        self.stop_machine(cpus, work);
        mark("stop-machine");
    }

    /// Waits for a grace period: every CPU has passed a quiescent state
    /// (Linux's `synchronize_rcu`). The classic engine's wait.
    fn synchronize_grace_period(&self);

    /// Waits for a grace period that interrupts the CPUs rather than
    /// waiting for their ticks (Linux's `synchronize_rcu_expedited`): the
    /// same guarantee, sooner. Bolt's wait. Default: a normal one.
    fn synchronize_grace_period_expedited(&self) {
        self.synchronize_grace_period();
    }

    /// Starts `cpu` executing (between the `Prepare` and `Starting` steps of
    /// a bring-up). Default: nothing.
    fn power_on(&self, cpu: CpuId) {
        let _ = cpu;
    }

    /// Stops `cpu` for good (after its `Starting` steps were torn down).
    /// Default: nothing.
    fn power_off(&self, cpu: CpuId) {
        let _ = cpu;
    }

    /// Starts every CPU of `cpus` and returns once all are executing: what
    /// the engine calls. A platform that can start CPUs in parallel (as
    /// Linux's parallel bring-up kicks every AP before waiting for any)
    /// overrides it; the default starts them one after the other with
    /// [`power_on`](Platform::power_on).
    fn power_on_many(&self, cpus: CpuSet) {
        cpus.iter().for_each(|cpu| self.power_on(cpu));
    }

    /// Stops every CPU of `cpus` and returns once all have stopped: what
    /// the engine calls. The default stops them one after the other with
    /// [`power_off`](Platform::power_off).
    fn power_off_many(&self, cpus: CpuSet) {
        cpus.iter().for_each(|cpu| self.power_off(cpu));
    }

    /// Takes the hotplug lock for writing, around one transition (Linux's
    /// `cpus_write_lock` in `_cpu_up` and `_cpu_down`): code that holds it
    /// for reading (`cpus_read_lock`) sees no CPU come or go meanwhile.
    /// With Linux's `percpu_rw_semaphore` the first writer after a quiet
    /// spell waits for a grace period; `expedited` asks for an expedited
    /// one (bolt), as under Linux's `rcu_expedite_gp()`. Default: nothing.
    fn hotplug_lock(&self, expedited: bool) {
        let _ = expedited;
    }

    /// Gives back what [`hotplug_lock`](Platform::hotplug_lock) took.
    /// Default: nothing.
    fn hotplug_unlock(&self) {}

    /// Deferred work is pending: arrange for
    /// [`Hotplug::run_deferred`](crate::Hotplug::run_deferred) to be called
    /// soon on a worker thread. Called with no engine lock held. Default:
    /// nothing, so work waits for [`Hotplug::flush_deferred`](crate::Hotplug::flush_deferred).
    fn kick_deferred(&self) {}
}
