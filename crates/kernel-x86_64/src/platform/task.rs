//! What a run queue holds on this kernel ([`crate::platform::sched`] runs
//! it). A type of its own, below the scheduler and the shared mechanisms
//! alike: the limbo of [`crate::platform::subsystems`] keeps tasks no CPU
//! could take, and the scheduler reads the masks kept there.

use hotkern_cpuhp::CpuSet;

/// A task: its ledger number and its state.
pub struct Task {
    /// Its number in the scheduler's ledger.
    pub(crate) id: u64,
    /// What its slices hash.
    pub(crate) state: u64,
    /// A reader's hold of the hotplug lock: the online mask it saw, and
    /// the slices left.
    pub(crate) hold: Option<(CpuSet, u32)>,
}
