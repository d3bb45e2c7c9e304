//! The lock a `no_std` user gets when it brings none of its own.

use crate::cpu::DEFAULT_WORDS;
use crate::hotplug::Hotplug;

/// A test-and-test-and-set spin lock implementing [`lock_api::RawMutex`]: the
/// lock for [`Hotplug`]'s `R` parameter when nothing better is at hand (a
/// `no_std` kernel without a lock of its own, an example).
///
/// It is the `spin` crate's `SpinMutex`, named here so that a user needs no
/// dependency of its own. It never sleeps, so a user-space program holding
/// the hotplug lock for a long operation burns the waiting threads' CPU time;
/// one that has threads passes `parking_lot::RawMutex` instead, and a kernel
/// with its own spin lock (one that also masks interrupts or preemption)
/// passes that.
///
/// ```
/// use hotkern_cpuhp::RawSpinlock;
/// let counter = lock_api::Mutex::<RawSpinlock, u32>::new(0);
/// *counter.lock() += 1;
/// assert_eq!(*counter.lock(), 1);
/// ```
pub type RawSpinlock = spin::mutex::SpinMutex<()>;

/// A [`Hotplug`] engine locked with [`RawSpinlock`]: what a `no_std` user
/// names when it has no lock to pass.
///
/// ```
/// use hotkern_cpuhp::{Class, CpuId, CpuSet, Engine, InlinePlatform, Section, SpinHotplug, StepSpec};
/// let table = [StepSpec::new("sched:migrate", Section::Online, Class::Critical)];
/// let all = CpuSet::range(0, 4);
/// let hotplug = SpinHotplug::new(InlinePlatform, &table, all, CpuSet::single(CpuId(0)), Engine::Bolt)
///     .unwrap();
/// hotplug.online_many(all.without(CpuId(0))).unwrap();
/// assert_eq!(hotplug.online_cpus(), all);
/// ```
pub type SpinHotplug<P, const WORDS: usize = DEFAULT_WORDS> = Hotplug<RawSpinlock, P, WORDS>;
