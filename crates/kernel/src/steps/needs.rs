//! What each step of the table needs from the CPUs that keep running
//! while it runs: the column that says which of stop-machine's guarantees
//! `bolt-nostop` replaces, and with what.

/// What a step's callback needs from the CPUs that keep running while it
/// runs, beyond the hotplug lock's write side every step is under. It
/// says which of stop-machine's guarantees `bolt-nostop` must replace,
/// and how (docs/ARCHITECTURE.md, "Taking a CPU down without a
/// rendezvous").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protection {
    /// The structures it touches have locks of their own, and refuse the
    /// CPU once it is closed: other CPUs may run meanwhile.
    OwnLocks,
    /// Readers that found the CPU (or the old structure) finish within a
    /// grace period the engine or the step waits for.
    GracePeriod,
    /// No CPU may be between reading the online mask and touching the
    /// dying CPU's state: a stop-machine, or the atomic read side's drain
    /// ([`HotplugReadSide`](crate::hotplug_read::HotplugReadSide)).
    Readers,
    /// State only the CPU itself touches (its tick, its quiescent
    /// states): it runs on that CPU with interrupts off, alone or not.
    DyingCpu,
}

/// A row's [`Protection`] and why it needs it.
///
/// ```
/// use hotkern_kernel::steps::{Needs, Protection};
/// let needs = Needs::new(Protection::OwnLocks, "the pool's lock");
/// assert_eq!(needs.protection, Protection::OwnLocks);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Needs {
    /// What it needs.
    pub protection: Protection,
    /// Why.
    pub reason: &'static str,
}

impl Needs {
    /// `protection`, because of `reason`.
    pub const fn new(protection: Protection, reason: &'static str) -> Needs {
        Needs { protection, reason }
    }
}
