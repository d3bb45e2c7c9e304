//! A user-mode machine that hosts every hotkern subsystem: vCPUs are OS
//! threads running a scheduler loop, and the kernel's subsystems subscribe
//! to CPU hotplug through the `hotkern-cpuhp` engine.

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
pub use hotkern_cpuhp::{Class, Direction, Engine, Error as HotplugError, Report, Section, Stage};
pub use invariants::{CpuState, MachineState};
pub use kthread::Role;
pub use ledger::{Item, Tally};
pub use machine::{Machine, MachineBuilder, MachineError, ShutdownReport, StepInfo};
pub use sysfs::SysfsError;
pub use task::{Context, TaskBody, TaskStatus};
pub use vmstat::Totals;
