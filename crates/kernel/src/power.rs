//! Starting and stopping CPUs, written once: the handshake between the
//! CPU that powers another on or off and the CPU itself, after Linux's
//! hotplug core sync (`cpuhp_ap_sync`'s states in kernel/cpu.c). What only
//! a platform can do is [`Power::kick`]: send a dead CPU into its loop
//! (INIT-SIPI-SIPI on x86-64; the user-mode machine rings its vCPU
//! thread's doorbell).
//!
//! Who writes what, per CPU, one word:
//!
//! | from | to | written by | when |
//! |---|---|---|---|
//! | [`Life::Dead`] | [`Life::Kicked`] | the controller | [`Lifecycle::start_many`], before the kick |
//! | [`Life::Kicked`] | [`Life::Alive`] | the CPU | [`Lifecycle::arrive`], first thing in its loop |
//! | [`Life::Alive`] | [`Life::ShouldDie`] | the controller | [`Lifecycle::stop_many`], after its dying steps ran |
//! | [`Life::ShouldDie`] | [`Life::Dead`] | the CPU | [`Lifecycle::die`], at the top of its loop, never inside a thread |
//!
//! The controller sleeps while it waits ([`Cpus::wait_until_deadline`]),
//! as Linux's control CPU sleeps in `cpuhp_bp_sync_alive`, rather than
//! spinning: a spinning virtual CPU holds a host core the CPU it waits
//! for may need. So the CPU's two writes wake the controller, which
//! [`Lifecycle::start_many`] and [`Lifecycle::stop_many`] record before
//! they change anything (release, before the state word's release store;
//! the CPU's compare-and-swap of the state word acquires that store, so
//! it then reads the waiter). A wake-up is never lost by the platform's
//! rule ([`Cpus::wait_until`]): the waiter checks the state word and
//! sleeps as one step with respect to wake-ups.
//!
//! ```
//! use hotkern_cpuhp::{CpuId, CpuSet, PlatformError, PlatformOperation};
//! use hotkern_kernel::platform::Cpus;
//! use hotkern_kernel::power::{Life, Lifecycle, Power};
//!
//! /// A platform whose CPUs arrive and leave as soon as asked (a real one
//! /// starts a CPU that calls `arrive` from its own loop).
//! struct Eager<'a>(&'a Lifecycle);
//!
//! impl Cpus for Eager<'_> {
//!     fn current(&self) -> Option<CpuId> { None }
//!     fn wake(&self, cpu: CpuId) {
//!         if self.0.should_die(cpu.index()) {
//!             self.0.die(self, cpu.index());
//!         }
//!     }
//!     fn wake_threads(&self) {}
//!     fn wait_until(&self, condition: &dyn Fn() -> bool) {
//!         assert!(condition(), "an eager CPU has already answered");
//!     }
//! }
//!
//! impl Power for Eager<'_> {
//!     fn kick(&self, cpu: CpuId) {
//!         self.0.arrive(self, cpu.index());
//!     }
//! }
//!
//! let lives = Lifecycle::new();
//! lives.boot_cpu(0);
//! let platform = Eager(&lives);
//! lives.start_many(&platform, CpuSet::single(CpuId(1)), u64::MAX).unwrap();
//! assert_eq!(lives.life(1), Life::Alive);
//! lives.stop_many(&platform, CpuSet::single(CpuId(1)), u64::MAX).unwrap();
//! assert_eq!(lives.life(1), Life::Dead);
//! ```

use core::fmt;

use hotkern_cpuhp::{CpuId, CpuSet, PlatformError, PlatformOperation};

use crate::cpuset::MAX_CPUS;
use crate::platform::Cpus;
use crate::sync::{AtomicU64, AtomicUsize, Ordering};

/// Where a CPU is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Life {
    /// Powered off: it runs nothing (parked with interrupts off; a vCPU
    /// thread asleep).
    Dead,
    /// Asked to start; it has not arrived in its loop yet.
    Kicked,
    /// Running its loop.
    Alive,
    /// Its dying steps ran; it leaves its loop at the next turn.
    ShouldDie,
}

impl Life {
    const fn word(self) -> usize {
        match self {
            Life::Dead => 0,
            Life::Kicked => 1,
            Life::Alive => 2,
            Life::ShouldDie => 3,
        }
    }

    const fn from_word(word: usize) -> Life {
        match word {
            1 => Life::Kicked,
            2 => Life::Alive,
            3 => Life::ShouldDie,
            _ => Life::Dead,
        }
    }
}

/// What the platform does to start a CPU, on top of [`Cpus`] (whose
/// [`Cpus::wake`] the stop uses to make a halted CPU look at its state).
pub trait Power: Cpus {
    /// Sends dead CPU `cpu` into its loop, where it calls
    /// [`Lifecycle::arrive`].
    fn kick(&self, cpu: CpuId);

    /// Kicks `cpu` once more because it is late (see
    /// [`Power::kick_again_after_ns`]); the default kicks it as the first
    /// time.
    fn kick_again(&self, cpu: CpuId) {
        self.kick(cpu);
    }

    /// How long a start waits before kicking the CPUs that have not
    /// arrived once more (the second SIPI of the x86-64 start-up
    /// sequence); `None` kicks once.
    fn kick_again_after_ns(&self) -> Option<u64> {
        None
    }
}

/// Why a CPU could not be started or stopped; nothing was asked of any
/// CPU when the error is [`PowerError::WrongState`] or
/// [`PowerError::NoSuchCpu`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PowerError {
    /// The CPU is not one of the platform's.
    NoSuchCpu(CpuId),
    /// The CPU was not dead (to start) or alive (to stop).
    WrongState(CpuId, Life),
    /// The CPU did not arrive, or leave, before the deadline.
    Timeout(CpuId),
}

impl fmt::Display for PowerError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PowerError::NoSuchCpu(cpu) => write!(f, "there is no cpu {}", cpu.0),
            PowerError::WrongState(cpu, life) => write!(f, "cpu {} is {life:?}", cpu.0),
            PowerError::Timeout(cpu) => write!(f, "cpu {} did not answer in time", cpu.0),
        }
    }
}

impl core::error::Error for PowerError {}

impl PowerError {
    /// The CPU it names.
    pub fn cpu(&self) -> CpuId {
        match *self {
            PowerError::NoSuchCpu(cpu)
            | PowerError::WrongState(cpu, _)
            | PowerError::Timeout(cpu) => cpu,
        }
    }

    /// What the hotplug engine is told when starting (`PowerOn`) or
    /// stopping (`PowerOff`) CPUs fails this way.
    ///
    /// ```
    /// use hotkern_cpuhp::{CpuId, PlatformOperation};
    /// use hotkern_kernel::power::PowerError;
    /// let error = PowerError::Timeout(CpuId(2)).platform_error(PlatformOperation::PowerOn);
    /// assert_eq!(error.to_string(), "power-on failed for cpu2: did not answer in time");
    /// ```
    pub fn platform_error(&self, operation: PlatformOperation) -> PlatformError {
        let cause = match self {
            PowerError::NoSuchCpu(_) => "no such CPU",
            PowerError::WrongState(_, Life::Dead) => "was off",
            PowerError::WrongState(_, Life::Kicked) => "was still starting",
            PowerError::WrongState(_, Life::Alive) => "was running",
            PowerError::WrongState(_, Life::ShouldDie) => "was already stopping",
            PowerError::Timeout(_) => "did not answer in time",
        };
        PlatformError::new(operation, self.cpu(), cause)
    }
}

/// No CPU waits: wake the threads that are no CPU.
const NO_CPU: u64 = u64::MAX;

/// Every CPU's [`Life`], and who waits for them. It needs no allocation
/// (a kernel starts its CPUs before it has a heap): a word for each of
/// [`MAX_CPUS`].
pub struct Lifecycle {
    lives: [AtomicUsize; MAX_CPUS],
    /// The CPU (or [`NO_CPU`]) that waits in a start or a stop.
    waiter: AtomicU64,
}

impl Default for Lifecycle {
    fn default() -> Self {
        Self::new()
    }
}

impl Lifecycle {
    /// Every CPU dead ([`Life::Dead`] is the zero word).
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        Lifecycle {
            lives: [const { AtomicUsize::new(0) }; MAX_CPUS],
            waiter: AtomicU64::new(NO_CPU),
        }
    }

    /// Every CPU dead (loom's atomics are made at run time).
    #[cfg(loom)]
    pub fn new() -> Self {
        Lifecycle {
            lives: core::array::from_fn(|_| AtomicUsize::new(Life::Dead.word())),
            waiter: AtomicU64::new(NO_CPU),
        }
    }

    /// `cpu`'s life; [`Life::Dead`] for a CPU that does not exist.
    pub fn life(&self, cpu: usize) -> Life {
        self.lives.get(cpu).map_or(Life::Dead, |word| {
            Life::from_word(word.load(Ordering::Acquire))
        })
    }

    /// Whether `cpu` runs its loop and answers calls ([`Life::Alive`]).
    pub fn is_alive(&self, cpu: usize) -> bool {
        self.life(cpu) == Life::Alive
    }

    /// The CPU that boots the machine is alive from the start.
    pub fn boot_cpu(&self, cpu: usize) {
        if let Some(word) = self.lives.get(cpu) {
            word.store(Life::Alive.word(), Ordering::Release);
        }
    }

    /// Starts every CPU of `cpus` — each is kicked before any is waited
    /// for, as Linux's parallel bring-up kicks every AP first — and
    /// returns once all are alive, or at `deadline_ns` of the platform's
    /// clock (`u64::MAX`: no deadline). On a timeout the CPUs that did
    /// arrive stay alive, and the error names the first that did not.
    /// One controller at a time (the hotplug engine's operations are).
    pub fn start_many(
        &self,
        power: &impl Power,
        cpus: CpuSet,
        deadline_ns: u64,
    ) -> Result<(), PowerError> {
        self.check(cpus, Life::Dead)?;
        self.await_from(power);
        for cpu in cpus {
            self.lives[cpu.index()].store(Life::Kicked.word(), Ordering::Release);
            power.kick(cpu);
        }
        let arrived = || cpus.iter().all(|cpu| self.is_alive(cpu.index()));
        if let Some(after) = power.kick_again_after_ns() {
            let again = power.now_ns().saturating_add(after).min(deadline_ns);
            if !power.wait_until_deadline(&arrived, again) {
                for cpu in cpus.iter().filter(|cpu| !self.is_alive(cpu.index())) {
                    power.kick_again(cpu);
                }
            }
        }
        self.finish(power, cpus, &arrived, deadline_ns, Life::Alive)
    }

    /// Asks every CPU of `cpus` to leave its loop, wakes each, and returns
    /// once all are dead (or at `deadline_ns`, as
    /// [`Lifecycle::start_many`]): they leave in parallel. Called after
    /// their dying steps ran.
    pub fn stop_many(
        &self,
        power: &impl Power,
        cpus: CpuSet,
        deadline_ns: u64,
    ) -> Result<(), PowerError> {
        self.check(cpus, Life::Alive)?;
        self.await_from(power);
        for cpu in cpus {
            self.lives[cpu.index()].store(Life::ShouldDie.word(), Ordering::Release);
            power.wake(cpu);
        }
        let left = || cpus.iter().all(|cpu| self.life(cpu.index()) == Life::Dead);
        self.finish(power, cpus, &left, deadline_ns, Life::Dead)
    }

    /// `cpu` arrived in its loop: alive from now on, if it was kicked
    /// (false, and nothing changes, if it was not). Called by `cpu`
    /// itself, before anyone may give it work.
    pub fn arrive(&self, power: &impl Cpus, cpu: usize) -> bool {
        self.answer(power, cpu, Life::Kicked, Life::Alive)
    }

    /// Whether `cpu` was asked to leave its loop.
    pub fn should_die(&self, cpu: usize) -> bool {
        self.life(cpu) == Life::ShouldDie
    }

    /// `cpu` left its loop: dead from now on, if it was asked to (false,
    /// and nothing changes, if it was not). Called by `cpu` itself, as
    /// the last thing it does before it sleeps for good.
    pub fn die(&self, power: &impl Cpus, cpu: usize) -> bool {
        self.answer(power, cpu, Life::ShouldDie, Life::Dead)
    }

    fn check(&self, cpus: CpuSet, want: Life) -> Result<(), PowerError> {
        for cpu in cpus {
            if cpu.index() >= self.lives.len() {
                return Err(PowerError::NoSuchCpu(cpu));
            }
            let life = self.life(cpu.index());
            if life != want {
                return Err(PowerError::WrongState(cpu, life));
            }
        }
        Ok(())
    }

    /// Records who is about to wait, before any CPU is asked anything.
    fn await_from(&self, power: &impl Cpus) {
        let me = power.current().map_or(NO_CPU, |cpu| u64::from(cpu.0));
        // Release: pairs with the acquire in `answer`.
        self.waiter.store(me, Ordering::Release);
    }

    fn finish(
        &self,
        power: &impl Power,
        cpus: CpuSet,
        done: &dyn Fn() -> bool,
        deadline_ns: u64,
        want: Life,
    ) -> Result<(), PowerError> {
        let in_time = if deadline_ns == u64::MAX {
            power.wait_until(done);
            true
        } else {
            power.wait_until_deadline(done, deadline_ns)
        };
        if in_time {
            return Ok(());
        }
        let late = cpus.iter().find(|cpu| self.life(cpu.index()) != want);
        late.map_or(Ok(()), |cpu| Err(PowerError::Timeout(cpu)))
    }

    fn answer(&self, power: &impl Cpus, cpu: usize, from: Life, to: Life) -> bool {
        let Some(word) = self.lives.get(cpu) else {
            return false;
        };
        // RMW, acquire-release: pairs with the controller's store of
        // `from`, and orders this write before the waiter's next check.
        if word
            .compare_exchange(from.word(), to.word(), Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            return false;
        }
        match self.waiter.load(Ordering::Acquire) {
            NO_CPU => power.wake_threads(),
            waiter => power.wake(CpuId(waiter as u32)),
        }
        true
    }
}

#[cfg(test)]
mod tests;
