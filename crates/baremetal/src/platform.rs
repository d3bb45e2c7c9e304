//! The platform layer: this kernel as the shared core's platform — the
//! `Cpus`, `CpuLoop`, `Power`, `Thread`-side and cpuhp `Platform` impls,
//! the step table's kernel, grace periods, the hotplug lock, the
//! scheduler's tasks, stop-machine, the page pools and the tracer.
//!
//! It uses arch and drivers, never `runs`: a run drives the platform, the
//! platform does not know which run is on.

pub mod hardware;
pub mod pages;
pub mod trace;

pub use hardware::{Kernel, KernelPlatform};
