//! The platform layer: this kernel as the shared core's platform — the
//! `Cpus`, `CpuLoop`, `Power`, `Thread`-side and cpuhp `Platform` impls,
//! the step table's kernel, grace periods, the hotplug lock, the
//! scheduler's tasks, stop-machine, the page pools and the tracer.
//!
//! It uses arch and drivers, never `runs`: a run drives the platform, the
//! platform does not know which run is on.

pub mod cpu_loop;
pub mod cpus;
pub mod failures;
pub mod hotplug;
pub mod hotplug_lock;
pub mod hotplug_thread;
pub mod pages;
pub mod power;
pub mod rcu;
pub mod sched;
pub mod steps;
pub mod subsystems;
pub mod task;
pub mod thread;
pub mod trace;
