//! Grace-period detection, written once for both platforms: when is a
//! grace period over. After Linux's tree RCU (kernel/rcu/tree.c) reduced
//! to one node: a grace-period sequence (`rcu_gp_seq`), a mask of the CPUs
//! it still waits for (a leaf's `qsmask`), quiescent-state reports that
//! clear their CPU's bit, and idle as an extended quiescent state (Linux's
//! dyntick-idle).
//!
//! A CPU is in a read-side critical section whenever it runs something;
//! it passes a quiescent state at each turn of its loop (between task
//! slices, which never hold a reference across turns), and an idle or
//! offline CPU is quiescent throughout. A grace period is over once every
//! CPU that was online, awake and not the waiter when it began has
//! reported a quiescent state, gone idle or gone offline since.
//!
//! The protocol, one grace period at a time (its *driver* holds
//! [`GracePeriod`], behind `serial`):
//!
//! - the driver marks `gp_seq` in progress, names itself in `waiter`, then
//!   publishes `qsmask`, every CPU but itself (a swap, release); then it
//!   reads `online` and `idle` (RMWs, so it reads the latest words) and
//!   clears the bits of the CPUs it finds offline or idle. Reading before
//!   publishing would let the publish overwrite the report of a CPU that
//!   went offline in between (the loom model found that one);
//! - a CPU *reports* at a quiescent point by clearing its bit with an RMW
//!   ([`GracePeriods::quiescent`]): the one RMW is both the quiescent state
//!   and the report, so a report can never be one from before the grace
//!   period began (the lost wake-up a separate counter and "wanted" flag
//!   invite). Whoever clears the last bit wakes the driver;
//! - entering idle sets the CPU's bit in `idle`, then reports, both RMWs;
//!   leaving idle clears it with an RMW before the CPU reads anything.
//!   Against the driver's publish-then-read this is the store-buffering
//!   shape: with an RMW on each side, each orders before the other's, so
//!   either the driver sees the CPU idle or the CPU's report sees the bit,
//!   and a CPU leaving idle after the driver saw it idle acquires
//!   everything the driver did before (the updater's unpublishing);
//! - going offline clears the CPU's bit in `online`, then reports: the
//!   same pair, with `online` for `idle`;
//! - the driver sleeps in [`Cpus::wait_until`] (or
//!   [`Cpus::wait_until_deadline`], given a deadline) until `qsmask` is
//!   empty, then ends the sequence; past the deadline it names the CPUs
//!   left and the grace period is dropped, never counted.
//!
//! Who writes what: each CPU writes only its own bits of `idle` and
//! `qsmask` (and `online`, through whoever runs its hotplug steps); the
//! driver alone writes `gp_seq`, `waiter` and the whole of `qsmask`.
//!
//! Two kinds are named, [`Kind::Normal`] and [`Kind::Expedited`]; today
//! they wait alike. Linux's timing (scheduler ticks, forcing quiescent
//! states by scanning, IPIs for expedited grace periods) is for later and
//! goes in the driver; the reports stay as they are.
//!
//! ```
//! use hotkern_cpuhp::CpuId;
//! use hotkern_kernel::platform::Cpus;
//! use hotkern_kernel::rcu::{GracePeriods, Kind};
//!
//! /// A single-CPU platform that never sleeps.
//! struct One;
//! impl Cpus for One {
//!     fn current(&self) -> Option<CpuId> { Some(CpuId(0)) }
//!     fn wake(&self, _: CpuId) {}
//!     fn wake_threads(&self) {}
//!     fn wait_until(&self, condition: &dyn Fn() -> bool) {
//!         while !condition() {}
//!     }
//! }
//!
//! let rcu = GracePeriods::new();
//! rcu.set_online(&One, CpuId(0), true);
//! // The caller is the only CPU: nobody to wait for.
//! assert_eq!(rcu.synchronize(&One, Kind::Normal, None), Ok(()));
//! assert_eq!(rcu.completed(), 1);
//! ```

use hotkern_cpuhp::{CpuId, CpuSet};

use crate::cpuset::{bit, from_bits};
use crate::platform::Cpus;
use crate::sync::{AtomicU64, Mutex, MutexGuard, Ordering};

/// What kind of grace period a caller asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Linux's `synchronize_rcu`: waits for the CPUs' own quiescent points.
    Normal,
    /// Linux's `synchronize_rcu_expedited`: meant to make the CPUs pass a
    /// quiescent state at once; today it waits as [`Kind::Normal`] does.
    Expedited,
}

/// A grace period that did not end by its deadline (or was given up):
/// the CPUs it was still waiting for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unfinished(pub CpuSet);

/// `waiter` when the driver is a thread that is no CPU.
const NO_CPU: u64 = u64::MAX;

/// The grace periods of one kernel.
pub struct GracePeriods {
    /// One driver at a time.
    serial: Mutex<()>,
    /// Twice the grace periods ended, plus one while one is in progress
    /// (Linux's `rcu_seq`). Written by the driver only.
    gp_seq: AtomicU64,
    /// The driver's CPU number, or [`NO_CPU`]; written before `qsmask`.
    waiter: AtomicU64,
    /// CPUs grace periods wait for (online for RCU).
    online: AtomicU64,
    /// CPUs in an extended quiescent state (idle).
    idle: AtomicU64,
    /// CPUs the grace period in progress still waits for.
    qsmask: AtomicU64,
}

/// The fields of grace periods none has run; a macro so that the `const`
/// constructor and loom's (whose atomics are not `const`) share it.
macro_rules! grace_periods_new {
    () => {
        GracePeriods {
            serial: Mutex::new(()),
            gp_seq: AtomicU64::new(0),
            waiter: AtomicU64::new(NO_CPU),
            online: AtomicU64::new(0),
            idle: AtomicU64::new(0),
            qsmask: AtomicU64::new(0),
        }
    };
}

impl GracePeriods {
    /// No CPU online, none idle, no grace period yet; a `static` on bare
    /// metal.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        grace_periods_new!()
    }

    /// No CPU online, none idle, no grace period yet.
    #[cfg(loom)]
    pub fn new() -> Self {
        grace_periods_new!()
    }

    /// `cpu` passed a quiescent state: it holds no reference from a
    /// read-side section. Called by `cpu` itself, at a turn of its loop.
    pub fn quiescent<P: Cpus + ?Sized>(&self, cpus: &P, cpu: CpuId) {
        // Relaxed: a stale "not wanted" only puts the report off to the
        // next turn or the next idle entry, whose report is an RMW.
        if self.qsmask.load(Ordering::Relaxed) & bit(cpu) != 0 {
            self.report(cpus, cpu);
        }
    }

    /// `cpu` is about to sleep: quiescent until [`GracePeriods::exit_idle`].
    /// Returns whether it was idle already. Called by `cpu` itself (or, in
    /// user mode, by its thread as it blocks).
    pub fn enter_idle<P: Cpus + ?Sized>(&self, cpus: &P, cpu: CpuId) -> bool {
        // AcqRel, and an RMW on `qsmask` below whatever it holds: the
        // store-buffering pair of the module doc.
        let was = self.idle.fetch_or(bit(cpu), Ordering::AcqRel) & bit(cpu) != 0;
        self.report(cpus, cpu);
        was
    }

    /// `cpu` woke: it may read again, so grace periods that start from
    /// now wait for it. Called by `cpu` itself before it runs anything.
    pub fn exit_idle(&self, cpu: CpuId) {
        // AcqRel: acquires a driver's read of `idle` that saw this CPU
        // idle, and with it what the updater did before that grace period.
        self.idle.fetch_and(!bit(cpu), Ordering::AcqRel);
    }

    /// Starts or stops waiting for `cpu` (its online state, for RCU): a
    /// grace period waiting for a CPU that goes offline ends without it.
    pub fn set_online<P: Cpus + ?Sized>(&self, cpus: &P, cpu: CpuId, online: bool) {
        if online {
            self.online.fetch_or(bit(cpu), Ordering::AcqRel);
        } else {
            self.online.fetch_and(!bit(cpu), Ordering::AcqRel);
            self.report(cpus, cpu);
        }
    }

    /// Whether grace periods wait for `cpu`.
    pub fn is_online(&self, cpu: CpuId) -> bool {
        self.online.load(Ordering::Acquire) & bit(cpu) != 0
    }

    /// Whether `cpu` is in its extended quiescent state.
    pub fn is_idle(&self, cpu: CpuId) -> bool {
        self.idle.load(Ordering::Acquire) & bit(cpu) != 0
    }

    /// The CPUs the grace period in progress still waits for.
    pub fn holding_up(&self) -> CpuSet {
        from_bits(self.qsmask.load(Ordering::Acquire))
    }

    /// Grace periods ended so far.
    pub fn completed(&self) -> u64 {
        self.gp_seq.load(Ordering::Acquire) >> 1
    }

    /// The value [`GracePeriods::completed`] reaches once a full grace
    /// period has run that started after this call (Linux's
    /// `rcu_seq_snap`): one more if none is in progress, two if one is.
    pub fn snapshot(&self) -> u64 {
        (self.gp_seq.load(Ordering::Acquire) + 3) >> 1
    }

    /// Waits for a full grace period (Linux's `synchronize_rcu`), driving
    /// it unless a grace period that started after the call ended first;
    /// callers take turns. `deadline` is in nanoseconds of
    /// [`Cpus::now_ns`]. A calling CPU is quiescent while it waits.
    pub fn synchronize<P: Cpus + ?Sized>(
        &self,
        cpus: &P,
        kind: Kind,
        deadline: Option<u64>,
    ) -> Result<(), Unfinished> {
        let target = self.snapshot();
        // Quiescent while it waits, for another driver's grace period too.
        let me = cpus.current();
        let was_idle = me.map(|cpu| self.enter_idle(cpus, cpu));
        let waited = self.drive_to(cpus, kind, deadline, target);
        if let (Some(cpu), Some(false)) = (me, was_idle) {
            self.exit_idle(cpu);
        }
        waited
    }

    /// Drives grace periods until `completed` reaches `target`.
    fn drive_to<P: Cpus + ?Sized>(
        &self,
        cpus: &P,
        kind: Kind,
        deadline: Option<u64>,
        target: u64,
    ) -> Result<(), Unfinished> {
        let driver = self.serial.lock();
        if self.completed() >= target {
            return Ok(());
        }
        let grace_period = self.begin_locked(cpus, kind, driver);
        grace_period.wait(cpus, deadline, &|| false)?;
        grace_period.end();
        Ok(())
    }

    /// Starts a grace period, as its driver; waits while another driver
    /// runs one. The platform's grace-period thread calls this.
    pub fn begin<P: Cpus + ?Sized>(&self, cpus: &P, kind: Kind) -> GracePeriod<'_> {
        let driver = self.serial.lock();
        self.begin_locked(cpus, kind, driver)
    }

    fn begin_locked<'a, P: Cpus + ?Sized>(
        &'a self,
        cpus: &P,
        kind: Kind,
        driver: MutexGuard<'a, ()>,
    ) -> GracePeriod<'a> {
        let me = cpus.current();
        let seq = self.gp_seq.load(Ordering::Relaxed);
        self.gp_seq.store(seq | 1, Ordering::Relaxed);
        self.waiter
            .store(me.map_or(NO_CPU, |cpu| u64::from(cpu.0)), Ordering::Relaxed);
        // Every CPU but the driver's first, and only then the words that
        // say whom not to wait for: publishing after reading `online` would
        // overwrite the report of a CPU going offline in between.
        // Release: a reporter's RMW that finds its bit sees `waiter`.
        self.qsmask.swap(!me.map_or(0, bit), Ordering::AcqRel);
        // The driver's half of the store-buffering pairs (module doc). A
        // CPU coming online or waking after these RMWs acquires what the
        // updater did before the grace period.
        let online = self.online.fetch_or(0, Ordering::AcqRel);
        let idle = self.idle.fetch_or(0, Ordering::AcqRel);
        let quiet = !online | idle;
        let waiting = self.qsmask.fetch_and(!quiet, Ordering::AcqRel) & !quiet;
        GracePeriod {
            rcu: self,
            _driver: driver,
            kind,
            waiting: from_bits(waiting),
        }
    }

    /// Clears `cpu`'s bit in `qsmask`; the last one wakes the driver.
    fn report<P: Cpus + ?Sized>(&self, cpus: &P, cpu: CpuId) {
        // AcqRel: releases this CPU's finished sections to the driver,
        // acquires the driver's `waiter`.
        if self.qsmask.fetch_and(!bit(cpu), Ordering::AcqRel) == bit(cpu) {
            match self.waiter.load(Ordering::Relaxed) {
                NO_CPU => cpus.wake_threads(),
                waiter => cpus.wake(CpuId(waiter as u32)),
            }
        }
    }
}

impl Default for GracePeriods {
    fn default() -> Self {
        Self::new()
    }
}

/// A grace period in progress, held by its driver.
pub struct GracePeriod<'a> {
    rcu: &'a GracePeriods,
    _driver: MutexGuard<'a, ()>,
    kind: Kind,
    waiting: CpuSet,
}

impl GracePeriod<'_> {
    /// The CPUs it waited for when it began (awake and online): the ones a
    /// driver may nudge towards a quiescent state.
    pub fn waiting(&self) -> CpuSet {
        self.waiting
    }

    /// Its kind.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// Waits until every CPU it waits for has reported, gone idle or gone
    /// offline; or until `deadline` (nanoseconds of [`Cpus::now_ns`]) or
    /// until `give_up()` holds (whoever makes it hold wakes the driver),
    /// and then names the CPUs still holding it up.
    pub fn wait<P: Cpus + ?Sized>(
        &self,
        cpus: &P,
        deadline: Option<u64>,
        give_up: &dyn Fn() -> bool,
    ) -> Result<(), Unfinished> {
        // Acquire: pairs with each report's release.
        let over = || self.rcu.qsmask.load(Ordering::Acquire) == 0;
        let condition = || over() || give_up();
        match deadline {
            Some(deadline) => {
                cpus.wait_until_deadline(&condition, deadline);
            }
            None => cpus.wait_until(&condition),
        }
        if over() {
            Ok(())
        } else {
            Err(Unfinished(self.rcu.holding_up()))
        }
    }

    /// Ends it: [`GracePeriods::completed`] counts it.
    pub fn end(self) {
        let seq = self.rcu.gp_seq.load(Ordering::Relaxed);
        // Release: a caller that sees the count sees the wait's acquire.
        self.rcu.gp_seq.store((seq | 1) + 1, Ordering::Release);
    }
}

/// A grace period dropped without [`GracePeriod::end`] (it stalled or was
/// given up) is no longer in progress and never counted, so a later
/// [`GracePeriods::snapshot`] does not wait for it to end.
impl Drop for GracePeriod<'_> {
    fn drop(&mut self) {
        let seq = self.rcu.gp_seq.load(Ordering::Relaxed);
        if seq & 1 != 0 {
            self.rcu.gp_seq.store(seq & !1, Ordering::Relaxed);
        }
    }
}
