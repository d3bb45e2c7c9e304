//! A user-mode machine that hosts every hotkern subsystem, in the spirit of
//! NetBSD's user-space uvm_hotplug tests: kernel mechanisms run for real on
//! threads, and CPU hotplug drives them through the `hotkern-cpuhp` engine.
//!
//! * **vCPUs** are OS threads (1 to 64), each running a scheduler loop over
//!   its own run queue of [tasks](Machine::submit) sliced by
//!   [`TaskStatus::Again`]. A powered-off vCPU's thread sleeps.
//! * **Stop-machine**: every online vCPU meets the others and runs the
//!   dying/starting steps of the CPUs being reconfigured.
//! * **RCU-like grace periods**: a grace-period thread waits until every
//!   online vCPU has passed a quiescent state (a turn of its loop) or is
//!   idle; `call_rcu` callbacks run on the CPU's `rcuc` thread afterwards.
//! * **Per-CPU kernel threads** (`ksoftirqd`, `kworker`, `rcuc`) are real
//!   OS threads that only run when their vCPU hands them the CPU; classic
//!   creates and destroys them, Bolt parks and reuses them.
//! * **Per-CPU timers, workqueues, page caches** (frames from memory plugged
//!   into `hotkern-physmem`), **statistics** read under RCU, **sysfs-like
//!   nodes**, **trace buffers** (`hotkern-trace` ring buffers), and the
//!   **scheduling domains** load balancing reads.
//!
//! Each subsystem registers its own startup and teardown with the engine
//! ([`Machine::steps`] lists the 16 steps, each with its class and the
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
//! use hotkern_machine::{CpuMask, Engine, Machine, TaskStatus};
//!
//! let machine = Machine::builder().cpus(4).engine(Engine::Bolt).build()?;
//! machine.submit(|ctx| {
//!     let page = ctx.alloc_page().expect("memory");
//!     ctx.free_page(page);
//!     TaskStatus::Done
//! });
//! let report = machine.offline_many(CpuMask::from_bits(0b1100))?;
//! for stage in &report.stages {
//!     println!("{:<18} {:>8} ns", stage.name, stage.nanos);
//! }
//! machine.online_many(CpuMask::from_bits(0b1100))?;
//! assert!(machine.check_invariants().is_empty());
//! assert!(machine.shutdown().is_clean());
//! # Ok::<(), hotkern_machine::MachineError>(())
//! ```

mod audit;
mod cpumask;
mod eventlog;
mod frames;
mod invariants;
mod kernel;
mod kthread;
mod ledger;
mod machine;
mod pagecache;
mod placement;
mod platform;
mod rcu;
mod sched;
mod signal;
mod steps;
mod stop_machine;
mod sysfs;
mod task;
mod timer;
mod vmstat;
mod workqueue;

pub use audit::{Counts, Resource, Violation};
pub use cpumask::{CpuMask, MAX_CPUS};
pub use eventlog::{Event, EventKind};
pub use hotkern_cpuhp::{
    Class, Direction, Engine, Error as HotplugError, Report, Section, Stage, StepTime,
};
pub use invariants::{CpuState, MachineState};
pub use kthread::Role;
pub use ledger::{Item, Tally};
pub use machine::{Machine, MachineBuilder, MachineError, ShutdownReport, StepInfo};
pub use sysfs::SysfsError;
pub use task::{Context, TaskBody, TaskStatus};
pub use vmstat::Totals;
