//! CPU hotplug engine: a step table in the style of Linux's hotplug state
//! machine, run by three engines over the same table and the same callbacks.
//!
//! * [`Engine::Classic`] — Linux as the Bolt paper (ATC 2015) describes it:
//!   synchronous, pessimistic, serial.
//! * [`Engine::Bolt`] — critical steps on the critical path only, deferrable
//!   ones on a deferred worker; optimistic reuse; bulk operations over a
//!   [`CpuSet`] with aggregated `Prepare` steps, one grace period and one
//!   stop-machine.
//! * [`Engine::BoltNoStop`] — bolt whose take-down stops no other CPU: the
//!   platform hides the dying CPUs from its atomic hotplug readers, waits
//!   for the readers that may have seen them, and has each dying CPU run
//!   its steps alone ([`Platform::run_dying`]; a platform without such a
//!   read side keeps the stop-machine there).
//!
//! The crate is `no_std` + `alloc`. The machine comes in through
//! [`Platform`]; locks through `lock_api` (the `R` parameter of [`Hotplug`]):
//! a user with no lock of its own uses [`RawSpinlock`], or names the engine
//! [`SpinHotplug`], which is `Hotplug<RawSpinlock, P>`.
//!
//! # How many CPUs
//!
//! CPU sets are [`CpuMask`]s of `WORDS` 64-bit words, and the engine, its
//! [`Platform`], [`Context`], [`Callbacks`] and [`Report`] all take the same
//! `WORDS`, which defaults to [`DEFAULT_WORDS`] (4: 256 CPUs, [`CpuSet`]).
//! A bigger machine names a bigger mask, `Hotplug<R, P, 16>` for 1024 CPUs;
//! a smaller one keeps the default or names `1`. The capacity is a type
//! parameter, like Linux's build-time `NR_CPUS`, rather than a run-time
//! limit, so that the sets the engine copies and intersects on every
//! operation stay fixed-size arrays with no allocation and no bound to load;
//! the CPUs the machine really has are the `possible` set given to
//! [`Hotplug::new`], and any other CPU is refused with [`Error::NoSuchCpu`].
//!
//! ```
//! use hotkern_cpuhp::{Class, CpuId, CpuMask, Engine, Hotplug, InlinePlatform, RawSpinlock, Section, StepSpec};
//! let table = [StepSpec::new("sched:migrate", Section::Online, Class::Critical)];
//! let possible = CpuMask::<16>::range(0, 1024);
//! let hotplug: Hotplug<RawSpinlock, InlinePlatform, 16> =
//!     Hotplug::new(InlinePlatform, &table, possible, CpuMask::single(CpuId(0)), Engine::Bolt).unwrap();
//! hotplug.online_many(possible.without(CpuId(0))).unwrap();
//! assert_eq!(hotplug.online_cpus().len(), 1024);
//! ```
//!
//! # Order and sections
//!
//! The table given to [`Hotplug::new`] is the one order of everything:
//! startups run in ascending order, teardowns in exact reverse. Each step
//! belongs to a [`Section`]:
//!
//! | section | startup (online) | teardown (offline) | may fail |
//! |---|---|---|---|
//! | `Prepare` | controlling CPU, before the target starts | controlling CPU, after it stopped | yes |
//! | `Starting` | target, inside stop-machine (or as it starts, see [`Platform::bring_up`]) | target, inside stop-machine (`bolt-nostop`: alone, see [`Platform::run_dying`]) | no |
//! | `Online` | target's hotplug thread | target's hotplug thread | yes |
//!
//! Going down, the engine waits for a grace period after the `Online`
//! teardowns and before the stop-machine. A failure rolls back every step
//! the operation had done, in reverse, so the CPU ends where it started;
//! the [`Error::StepFailed`] names the step.
//!
//! # Deferral (`bolt`)
//!
//! With `bolt`, callbacks of [`Class::Deferrable`] steps are queued and run
//! later by [`Hotplug::run_deferred`] (the platform's worker, woken through
//! [`Platform::kick_deferred`]); [`Hotplug::flush_deferred`] waits for them.
//! If a CPU comes back online while deferred teardowns are pending, they
//! are **cancelled** (the step stays up and its kept structures are reused
//! as they are, its startup skipped); if it goes offline while deferred
//! startups are pending, they are **completed** first (it ran meanwhile, so
//! the step must really be torn down). A deferred callback already running
//! for the CPU is waited for. Critical steps do not wait for deferred ones,
//! so a deferrable step must not be needed, in either direction, by a
//! critical step of the same CPU.
//!
//! # The API at a glance
//!
//! * Build: [`Hotplug::new`]`(platform, &[StepSpec], possible, online, Engine)`.
//! * Subscribe: [`Hotplug::setup`] / [`setup_nocalls`](Hotplug::setup_nocalls)
//!   with [`Callbacks`] (`Fn(&Context) -> Result<(), CallbackError>`),
//!   [`remove`](Hotplug::remove), [`add_instance`](Hotplug::add_instance) /
//!   [`remove_instance`](Hotplug::remove_instance) (and `_nocalls`).
//! * Reconfigure: [`online`](Hotplug::online), [`offline`](Hotplug::offline),
//!   [`online_many`](Hotplug::online_many), [`offline_many`](Hotplug::offline_many),
//!   each returning a [`Report`] with per-stage times, or a typed [`Error`].
//! * Deferred work: [`run_deferred`](Hotplug::run_deferred) (the worker),
//!   [`flush_deferred`](Hotplug::flush_deferred), [`pending_deferred`](Hotplug::pending_deferred),
//!   [`take_deferred_failures`](Hotplug::take_deferred_failures).
//! * Inspect: [`online_cpus`](Hotplug::online_cpus), [`step_status`](Hotplug::step_status),
//!   [`step_time`](Hotplug::step_time), [`warnings`](Hotplug::warnings).
//! * Test: [`inject_failure`](Hotplug::inject_failure) with a [`FailAt`].
//! * Switch: [`set_engine`](Hotplug::set_engine).
//!
//! # Example
//!
//! See [`Hotplug`] and [`Hotplug::inject_failure`].
#![no_std]
// Links from the other hotkern crates to this one point here when this
// crate's docs are not beside theirs (a fresh `cargo doc --no-deps`).
#![doc(html_root_url = "https://docs.rs/hotkern-cpuhp/0.1")]
#![forbid(unsafe_code)]
extern crate alloc;

mod cpu;
mod deferred;
mod error;
mod hotplug;
mod invoke;
mod lock;
mod operation;
mod platform;
mod register;
mod report;
mod states;
mod step;
mod walk;

pub use cpu::{CpuId, CpuMask, CpuSet, Iter as CpuSetIter, DEFAULT_WORDS, MAX_CPUS};
pub use error::Error;
pub use hotplug::{Engine, Hotplug, Warnings};
pub use invoke::{FailAt, PlatformFailAt};
pub use lock::{RawSpinlock, SpinHotplug};
pub use platform::{InlinePlatform, Platform, PlatformError, PlatformOperation};
pub use report::{Report, Stage, StepTime};
pub use states::StepStatus;
pub use step::{
    Callback, CallbackError, Callbacks, Class, Context, Direction, InstanceId, Reuse, Section,
    StepId, StepSpec,
};
