//! A user-mode machine that hosts every hotkern subsystem, in the spirit of
//! NetBSD's user-space uvm_hotplug tests: kernel mechanisms run for real on
//! threads, and CPU hotplug drives them through the `hotkern-cpuhp` engine.
//!
//! * **vCPUs** are OS threads (1 to 64), each running a scheduler loop over
//!   its own run queue of [tasks](Machine::submit) sliced by
//!   [`TaskStatus::Again`]. A powered-off vCPU's thread sleeps.
//! * **Stop-machine**: every online vCPU meets the others and runs the
//!   dying/starting steps of the CPUs being reconfigured.
//! * **RCU-like grace periods**, after Linux's RCU: a grace-period thread
//!   waits until every online vCPU has passed a quiescent state (a turn of
//!   its loop) or is idle; `call_rcu` callbacks run on the CPU's `rcuc`
//!   thread afterwards.
//! * **Per-CPU kernel threads** (`ksoftirqd`, `kworker`, `rcuc`) are real
//!   OS threads that only run when their vCPU hands them the CPU; classic
//!   (Linux's kernel/cpu.c) creates and destroys them, Bolt (ATC 2015)
//!   parks and reuses them.
//! * **Per-CPU timers, workqueues, page caches** (frames from memory plugged
//!   into `hotkern-physmem`), **statistics** read under RCU, **sysfs-like
//!   nodes**, **trace buffers** (`hotkern-trace` ring buffers), and the
//!   **scheduling domains** load balancing reads.
//!
//! Each subsystem has its startup and teardown in the step table, which
//! the machine shares with the bare-metal kernel (`hotkern_kernel::steps`;
//! [`Machine::steps`] lists the 16 steps, each with its class and the
//! reason for it). Both engines run the same callbacks; every microsecond
//! they spend is the machine's real work (thread creation and joins, grace
//! periods, stop-machine, freeing and rebuilding structures, migrating
//! tasks, work, timers and callbacks).
//!
//! The machine checks itself: a [ledger](Machine::tally) of every task, work
//! item, timer and RCU callback (lost or run twice), the CPU on which each
//! ran (never an offline one), the masks against each vCPU's state, and
//! every per-CPU resource's creations and destructions
//! ([`Machine::check_invariants`], [`Machine::shutdown`]).
//!
//! ```
//! use hotkern_machine::{CpuSet, Engine, Machine, TaskStatus};
//!
//! let machine = Machine::builder().cpus(4).engine(Engine::Bolt).build()?;
//! machine.submit(|ctx| {
//!     let page = ctx.alloc_page().expect("memory");
//!     ctx.free_page(page);
//!     TaskStatus::Done
//! });
//! let report = machine.offline_many(CpuSet::range(2, 4))?;
//! for stage in &report.stages {
//!     println!("{:<18} {:>8} ns", stage.name, stage.nanos);
//! }
//! machine.online_many(CpuSet::range(2, 4))?;
//! assert!(machine.check_invariants().is_empty());
//! assert!(machine.shutdown().is_clean());
//! # Ok::<(), hotkern_machine::MachineError>(())
//! ```

mod error;
mod eventlog;
mod invariants;
mod kernel;
mod kthread;
mod ledger;
mod machine;
mod mechanism;
mod memdev;
mod placement;
mod platform;
mod rcu;
mod scenario;
mod services;
mod signal;
mod steplog;
mod steps;
mod sysfs;
mod task;

/// The grace-period handshake with loom's primitives, for `tests/loom.rs`.
#[cfg(loom)]
#[doc(hidden)]
pub mod loom_model {
    use std::sync::Arc;

    use hotkern_kernel::rcu::callbacks::Lists;

    use crate::rcu::Rcu;
    use crate::signal::Doorbells;

    /// Grace periods over `cpus` vCPUs whose loops the model plays.
    pub struct GracePeriods {
        rcu: Arc<Rcu>,
        bells: Arc<Doorbells>,
    }

    impl GracePeriods {
        /// No CPU tracked, none idle.
        pub fn new(cpus: usize) -> Self {
            let bells = Arc::new(Doorbells::new(cpus));
            GracePeriods {
                rcu: Rcu::unstarted(Arc::new(Lists::new(cpus)), Arc::clone(&bells)),
                bells,
            }
        }

        /// `cpu` comes online for RCU (its starting step).
        pub fn track(&self, cpu: usize) {
            self.rcu.set_tracked(cpu, true);
        }

        /// `cpu` goes offline for RCU (its dying step).
        pub fn untrack(&self, cpu: usize) {
            self.rcu.set_tracked(cpu, false);
        }

        /// `cpu` passes a quiescent state (a turn of its loop).
        pub fn quiescent(&self, cpu: usize) {
            self.rcu.quiescent(cpu);
        }

        /// `cpu` finds nothing to do: the vCPU loop's own idle path, which
        /// sleeps on its doorbell until [`GracePeriods::wake`] or the
        /// grace-period thread rings it.
        pub fn idle(&self, cpu: usize) {
            self.rcu.idle(cpu, None);
        }

        /// Rings `cpu`'s doorbell, as anyone giving it work does.
        pub fn wake(&self, cpu: usize) {
            self.bells.ring(cpu);
        }

        /// Waits for a grace period: an expedited one, as a model has no
        /// clock to force quiescent states by (the normal kind's timing is
        /// modelled in `hotkern-kernel`'s `tests/rcu_loom.rs`).
        pub fn synchronize(&self) {
            self.rcu.synchronize_expedited();
        }

        /// The grace-period thread: returns after [`GracePeriods::stop`].
        pub fn run_thread(&self) {
            self.rcu.run_grace_period_thread();
        }

        /// Tells the grace-period thread to return.
        pub fn stop(&self) {
            self.rcu.stop();
        }
    }
}

pub use error::MachineError;
pub use eventlog::{Event, EventKind, Trace};
pub use hotkern_cpuhp::{
    Class, CpuId, CpuSet, Direction, Engine, Error as HotplugError, Report, Section, Stage,
    StepTime,
};
pub use hotkern_kernel::audit::{Counts, Resource, Violation};
pub use hotkern_kernel::cpuset::MAX_CPUS as MAX_VCPUS;
pub use hotkern_kernel::frames::FrameCounts;
pub use hotkern_kernel::kthread::Role;
pub use hotkern_kernel::ledger::{Item, Tally};
pub use hotkern_kernel::migrate::ShrinkError;
pub use hotkern_kernel::movable::Slot;
pub use hotkern_kernel::steps::differential;
pub use hotkern_kernel::tick::{Hz, UnsupportedHz};
pub use hotkern_kernel::vmstat::Totals;
pub use hotkern_physmem::{PageCount, Pfn};
pub use invariants::{CpuState, MachineState};
pub use machine::{Machine, MachineBuilder, ShutdownReport, StepInfo};
pub use mechanism::Mechanism;
pub use memdev::{
    frame_pattern, DeviceRequest, MemoryDevice, MemoryDeviceConfig, MemoryError, MemoryFailure,
    MemoryViolation, ResizeOutcome, ResizeReport, RollbackCause,
};
#[doc(hidden)]
pub use steplog::StepCall;
pub use sysfs::SysfsError;
pub use task::{Context, TaskBody, TaskStatus};
