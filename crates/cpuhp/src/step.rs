//! Steps of the hotplug state table and what their callbacks are told.

use alloc::sync::Arc;
use core::fmt;

use crate::cpu::{CpuId, CpuMask, DEFAULT_WORDS};

/// Where and how a step's callbacks run (Linux's sections of the state table).
///
/// A table lists every `Prepare` step first, then every `Starting` step, then
/// every `Online` step.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Section {
    /// Runs on the controlling CPU before the target starts (startup, "prepare")
    /// and after it has stopped (teardown, "dead"). May fail.
    Prepare,
    /// Runs on the target inside a stop-machine (startup "starting", teardown
    /// "dying"). Must not fail: see [`Hotplug::inject_failure`](crate::Hotplug::inject_failure).
    Starting,
    /// Runs on the target's hotplug thread while it is online. May fail.
    Online,
}

/// Whether a step must finish before the operation returns.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Class {
    /// Needed for correctness at once (migrating tasks, updating masks).
    Critical,
    /// May finish later (freeing memory, tearing down per-CPU nodes). The
    /// `bolt` engine hands these to the deferred worker, which runs them on
    /// its own thread (not on the target, not inside a stop-machine) with
    /// [`Context::deferred`] set, in the table's order among themselves but
    /// after the operation's critical steps. Such a step must therefore not
    /// be needed by a critical step of the same CPU, and its callbacks must
    /// not assume they run on the target. `classic` runs them like any other.
    Deferrable,
}

/// Which way an operation or a callback goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// Bringing a CPU online: startup callbacks, ascending.
    Up,
    /// Taking a CPU offline: teardown callbacks, descending.
    Down,
}

impl Direction {
    /// The other direction.
    pub const fn reverse(self) -> Direction {
        match self {
            Direction::Up => Direction::Down,
            Direction::Down => Direction::Up,
        }
    }
}

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Direction::Up => "startup",
            Direction::Down => "teardown",
        })
    }
}

/// The engine's hint about per-CPU structures and threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reuse {
    /// Pessimistic (`classic`): a teardown frees the CPU's structures and
    /// destroys its threads; a startup builds them from scratch.
    No,
    /// Optimistic (`bolt`): a teardown may keep structures and park threads;
    /// a startup should reuse whatever was kept.
    Yes,
}

/// One entry of the state table, given to [`Hotplug::new`](crate::Hotplug::new).
///
/// ```
/// use hotkern_cpuhp::{Class, Section, StepSpec};
/// const TABLE: &[StepSpec] = &[
///     StepSpec::new("mm:percpu-pages", Section::Prepare, Class::Deferrable),
///     StepSpec::new("sched:starting", Section::Starting, Class::Critical),
///     StepSpec::new("net:queues", Section::Online, Class::Deferrable).multi_instance(),
/// ];
/// assert!(TABLE[2].multi);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StepSpec {
    /// Unique name, `subsystem:what` by convention.
    pub name: &'static str,
    /// Where the callbacks run.
    pub section: Section,
    /// Critical or deferrable.
    pub class: Class,
    /// Whether the step has instances, each called separately.
    pub multi: bool,
}

impl StepSpec {
    /// A single-instance step.
    pub const fn new(name: &'static str, section: Section, class: Class) -> Self {
        StepSpec {
            name,
            section,
            class,
            multi: false,
        }
    }

    /// The same step, made multi-instance.
    pub const fn multi_instance(mut self) -> Self {
        self.multi = true;
        self
    }
}

/// A step's position in the table: lower steps start up first and tear down last.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct StepId(pub u16);

impl StepId {
    /// The position as an index.
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

/// Names one instance of a multi-instance step (chosen by the subscriber).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct InstanceId(pub u64);

/// Why a callback refused; carried in [`Error::StepFailed`](crate::Error::StepFailed).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CallbackError {
    /// A short static reason, e.g. `"out of memory"`.
    pub reason: &'static str,
}

impl CallbackError {
    /// The error produced by [`Hotplug::inject_failure`](crate::Hotplug::inject_failure).
    pub const INJECTED: CallbackError = CallbackError {
        reason: "injected failure",
    };

    /// An error with a reason.
    pub const fn new(reason: &'static str) -> Self {
        CallbackError { reason }
    }
}

impl fmt::Display for CallbackError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.reason)
    }
}

impl core::error::Error for CallbackError {}

/// What a callback is told about the call.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct Context<const WORDS: usize = DEFAULT_WORDS> {
    /// The CPU this call is for; for an aggregated call, the lowest of `cpus`.
    pub cpu: CpuId,
    /// Every CPU this call covers: `{cpu}`, except for `Prepare` steps in a
    /// `bolt` bulk operation, which are called once with the whole set and
    /// must act on every CPU in it.
    pub cpus: CpuMask<WORDS>,
    /// The step being run.
    pub step: StepId,
    /// The step's name.
    pub name: &'static str,
    /// Startup (`Up`) or teardown (`Down`).
    pub direction: Direction,
    /// The instance, for a multi-instance step.
    pub instance: Option<InstanceId>,
    /// Whether structures and threads are kept and reused.
    pub reuse: Reuse,
    /// True when run by the deferred worker after the operation returned.
    pub deferred: bool,
    /// True when undoing a failed operation (errors are then ignored).
    pub rollback: bool,
}

/// A startup or teardown callback.
pub type Callback<const WORDS: usize = DEFAULT_WORDS> =
    Arc<dyn Fn(&Context<WORDS>) -> Result<(), CallbackError> + Send + Sync>;

/// A step's callbacks; a missing one is a no-op that always succeeds.
///
/// A callback that fails must leave things as they were for its own call: the
/// engine only undoes the calls that succeeded.
///
/// ```
/// use hotkern_cpuhp::Callbacks;
/// let callbacks = Callbacks::new()
///     .startup(|ctx| { let _ = ctx.cpus; Ok(()) })
///     .teardown(|_| Ok(()));
/// assert!(callbacks.has_startup() && callbacks.has_teardown());
/// ```
#[derive(Clone, Default)]
pub struct Callbacks<const WORDS: usize = DEFAULT_WORDS> {
    pub(crate) startup: Option<Callback<WORDS>>,
    pub(crate) teardown: Option<Callback<WORDS>>,
}

impl Callbacks {
    /// No callbacks, for an engine of the default capacity. (Like
    /// `HashMap::new`, it is defined for the default only, so that a
    /// `Callbacks::new()` nothing else constrains still has a type; for a
    /// larger [`CpuMask`], `Callbacks::<WORDS>::default()`.)
    pub fn new() -> Self {
        Self::default()
    }
}

impl<const WORDS: usize> Callbacks<WORDS> {
    /// Sets the startup callback.
    pub fn startup<F>(mut self, f: F) -> Self
    where
        F: Fn(&Context<WORDS>) -> Result<(), CallbackError> + Send + Sync + 'static,
    {
        self.startup = Some(Arc::new(f));
        self
    }

    /// Sets the teardown callback.
    pub fn teardown<F>(mut self, f: F) -> Self
    where
        F: Fn(&Context<WORDS>) -> Result<(), CallbackError> + Send + Sync + 'static,
    {
        self.teardown = Some(Arc::new(f));
        self
    }

    /// Whether a startup callback is set.
    pub fn has_startup(&self) -> bool {
        self.startup.is_some()
    }

    /// Whether a teardown callback is set.
    pub fn has_teardown(&self) -> bool {
        self.teardown.is_some()
    }

    pub(crate) fn get(&self, direction: Direction) -> Option<&Callback<WORDS>> {
        match direction {
            Direction::Up => self.startup.as_ref(),
            Direction::Down => self.teardown.as_ref(),
        }
    }
}

impl<const WORDS: usize> fmt::Debug for Callbacks<WORDS> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Callbacks")
            .field("startup", &self.startup.is_some())
            .field("teardown", &self.teardown.is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use alloc::string::ToString;

    use super::*;

    #[test]
    fn callbacks_say_which_directions_they_have() {
        let none = Callbacks::new();
        let up = Callbacks::new().startup(|_| Ok(()));
        let down = Callbacks::new().teardown(|_| Ok(()));
        let seen = |c: &Callbacks| (c.has_startup(), c.has_teardown());
        assert_eq!(
            [seen(&none), seen(&up), seen(&down)],
            [(false, false), (true, false), (false, true)]
        );
        assert_eq!(
            alloc::format!("{up:?}"),
            "Callbacks { startup: true, teardown: false }"
        );
    }

    #[test]
    fn a_callback_error_reads_as_its_reason() {
        let error: &dyn core::error::Error = &CallbackError::INJECTED;
        assert_eq!(error.to_string(), "injected failure");
    }
}
