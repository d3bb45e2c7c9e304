//! Grace periods, written once for both platforms: when is a grace period
//! over, and how long it takes. After Linux's tree RCU (kernel/rcu/tree.c)
//! reduced to one node: a grace-period sequence (`rcu_gp_seq`), a mask of
//! the CPUs it still waits for (a leaf's `qsmask`), quiescent-state
//! reports that clear their CPU's bit, idle as an extended quiescent state
//! (Linux's dyntick-idle), and Linux's two kinds of grace period with
//! their timing.
//!
//! A CPU is in a read-side critical section whenever it runs something;
//! it passes a quiescent state at each turn of its loop (between task
//! slices, which never hold a reference across turns: Linux's context
//! switch), and an idle or offline CPU is quiescent throughout. A grace
//! period is over once every CPU that was online when it began, but the
//! driver's, has reported a quiescent state, been found idle or gone
//! offline since.
//!
//! # The two kinds
//!
//! - [`Kind::Normal`] (`synchronize_rcu`) keeps Linux's timing. A busy CPU
//!   *notices* the grace period at its scheduler tick ([`GracePeriods::tick`],
//!   Linux's `note_gp_changes`), passes a quiescent state at a later turn
//!   of its loop, and *reports* it at the tick after that
//!   (`rcu_check_quiescent_state` from the tick's `rcu_core`): one to two
//!   jiffies. An idle CPU's tick is stopped, so it reports nothing: the
//!   driver finds it idle when it *forces quiescent states*
//!   ([`GracePeriods::force_quiescent_states`], `rcu_gp_fqs`), which it
//!   does [`Hz::jiffies_till_fqs`] jiffies after the grace period began and
//!   as often again while it goes on (`jiffies_till_first_fqs`,
//!   `jiffies_till_next_fqs`). On an idle machine a grace period therefore
//!   lasts about three jiffies at HZ=1000, as Linux's does.
//! - [`Kind::Expedited`] (`synchronize_rcu_expedited`) skips the CPUs idle
//!   when it begins, and its driver interrupts the others
//!   ([`Cpus::wake`]); each reports at its next turn, or as it enters
//!   idle. Microseconds, at the price of disturbing every CPU.
//!
//! # The protocol
//!
//! One grace period at a time (its *driver* holds [`GracePeriod`], behind
//! `serial`):
//!
//! - the driver marks `gp_seq` in progress (release: a CPU that notices it
//!   at a tick acquires what the updater did before the grace period),
//!   names itself in `waiter`, sets `expedited`, then publishes `qsmask`,
//!   every CPU but itself (a swap, release); then it reads `online` (and,
//!   expedited, `idle`), RMWs so it reads the latest words, and clears the
//!   bits of the CPUs it finds offline (or idle). Reading before publishing
//!   would let the publish overwrite the report of a CPU that went offline
//!   in between (the loom model found that one). Forcing quiescent states
//!   later is the same read-then-clear, with `idle` for every kind;
//! - a *report* clears the CPU's bit with an RMW ([`GracePeriods::quiescent`]
//!   for an expedited grace period, [`GracePeriods::tick`] for a normal
//!   one, idle entry and going offline). A report straight from a turn of
//!   the loop is safe for any grace period: its RMW acquires the publish,
//!   so the sections after the turn see the updater's work. A report from
//!   the tick is not on its own (a section may be running under the tick),
//!   so it counts only a quiescent state passed after the CPU noticed that
//!   very grace period: the noticing read acquired the updater's work,
//!   and every section after the turn began after it. Whoever clears the
//!   last bit wakes the driver;
//! - entering idle sets the CPU's bit in `idle` (then, expedited, reports),
//!   both RMWs; leaving idle clears it with an RMW before the CPU reads
//!   anything. Against the driver's publish-then-read this is the
//!   store-buffering shape: with an RMW on each side, each orders before
//!   the other's, so either the driver sees the CPU idle or the CPU's
//!   report sees the bit, and a CPU leaving idle after the driver saw it
//!   idle acquires everything the driver did before (the updater's
//!   unpublishing);
//! - going offline clears the CPU's bit in `online`, then reports: the
//!   same pair, with `online` for `idle`;
//! - entering idle also counts the entry in the CPU's `idle_entries`
//!   (an RMW; Linux's dynticks counter). The driver snapshots the count of
//!   each CPU it waits for as the grace period begins (an RMW after the
//!   publish) and, forcing quiescent states, clears the bit of a CPU whose
//!   count moved since (Linux's `rcu_implicit_dynticks_qs`): that CPU
//!   idled after the grace period began, so its earlier sections ended;
//!   its entry's RMW comes after the snapshot's in the count's order, so
//!   it acquires the updater's work for the sections after it. This finds
//!   a CPU that idles between scans but is awake at each;
//! - the driver sleeps in [`Cpus::wait_until_deadline`] until `qsmask` is
//!   empty or it is time to force quiescent states, then ends the
//!   sequence; past the caller's deadline it names the CPUs left and the
//!   grace period is dropped, never counted.
//!
//! Who writes what: each CPU writes only its own bits of `idle` and
//! `qsmask` (and `online`, through whoever runs its hotplug steps) and its
//! own `noticed` and `idle_entries` slots; the driver alone writes
//! `gp_seq`, `waiter`, `expedited`, `idle_snapshot` and the whole of
//! `qsmask`.
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
//!
//! [`Hz::jiffies_till_fqs`]: crate::tick::Hz::jiffies_till_fqs

use hotkern_cpuhp::{CpuId, CpuSet};

use crate::cpuset::{bit, from_bits};
use crate::platform::Cpus;
use crate::sync::{AtomicBool, AtomicU64, Mutex, MutexGuard, Ordering};
use crate::tick::Hz;

pub mod callbacks;
pub mod caller_driven;
mod grace_period;
mod stall;

pub use crate::activity::{Activities, Activity};
pub use grace_period::GracePeriod;
pub use stall::{Stall, StalledCpu};

/// What kind of grace period a caller asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Linux's `synchronize_rcu`: waits for the CPUs' own quiescent points.
    Normal,
    /// Linux's `synchronize_rcu_expedited`: the CPUs are interrupted to
    /// report at once.
    Expedited,
}

/// A grace period that did not end by its deadline (or was given up):
/// the CPUs it was still waiting for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unfinished(pub CpuSet);

/// `waiter` when the driver is a thread that is no CPU.
const NO_CPU: u64 = u64::MAX;

/// CPUs with a `noticed` slot: every CPU, but few in a loom model, whose
/// every atomic is explored.
#[cfg(not(loom))]
const SLOTS: usize = crate::cpuset::MAX_CPUS;
#[cfg(loom)]
const SLOTS: usize = 4;

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
    /// Whether the grace period in progress is expedited.
    expedited: AtomicBool,
    /// An expedited caller found a normal grace period in progress and
    /// asks its driver to expedite it.
    expedite_requested: AtomicBool,
    /// Per CPU, written by that CPU only: twice the `gp_seq` it noticed at
    /// its last tick, plus one once it passed a quiescent state since.
    noticed: [AtomicU64; SLOTS],
    /// Per CPU, written by that CPU only: ticks since it noticed the grace
    /// period in progress (Linux's `ticks_this_gp`), for a stall report.
    ticks: [AtomicU64; SLOTS],
    /// Per CPU, written by that CPU only: how often it entered its
    /// extended quiescent state (Linux's dynticks counter, `ct->state`).
    idle_entries: [AtomicU64; SLOTS],
    /// Per CPU, written by the driver: `idle_entries` as the grace period
    /// in progress began (Linux's `rdp->dynticks_snap`).
    idle_snapshot: [AtomicU64; SLOTS],
    /// The tick rate that times normal grace periods.
    hz: AtomicU64,
    /// Forced quiescent-state scans so far.
    fqs_scans: AtomicU64,
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
            expedited: AtomicBool::new(false),
            expedite_requested: AtomicBool::new(false),
            noticed: per_cpu_new!(),
            ticks: per_cpu_new!(),
            idle_entries: per_cpu_new!(),
            idle_snapshot: per_cpu_new!(),
            hz: AtomicU64::new(Hz::DEFAULT.get() as u64),
            fqs_scans: AtomicU64::new(0),
        }
    };
}

#[cfg(not(loom))]
macro_rules! per_cpu_new {
    () => {
        [const { AtomicU64::new(0) }; SLOTS]
    };
}

#[cfg(loom)]
macro_rules! per_cpu_new {
    () => {
        core::array::from_fn(|_| AtomicU64::new(0))
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

    /// Sets the tick rate that times normal grace periods (at boot).
    pub fn set_hz(&self, hz: Hz) {
        self.hz.store(u64::from(hz.get()), Ordering::Relaxed);
    }

    /// The tick rate that times normal grace periods.
    pub fn hz(&self) -> Hz {
        Hz::new(self.hz.load(Ordering::Relaxed) as u32).unwrap_or_default()
    }

    /// `cpu` passed a quiescent state: it holds no reference from a
    /// read-side section (Linux's `rcu_qs`, at a context switch). An
    /// expedited grace period takes the report now; a normal one counts it
    /// if `cpu` noticed the grace period at a tick, and takes it at the
    /// next tick. Called by `cpu` itself, at a turn of its loop.
    pub fn quiescent<P: Cpus + ?Sized>(&self, cpus: &P, cpu: CpuId) {
        // Relaxed: a stale "not wanted" only puts the report off to the
        // next turn, tick or idle entry; a stale "expedited" only reports
        // early, which a report from a turn may always do (module doc).
        if self.qsmask.load(Ordering::Relaxed) & bit(cpu) == 0 {
            return;
        }
        if self.expedited.load(Ordering::Relaxed) {
            self.report(cpus, cpu);
            return;
        }
        let Some(slot) = self.noticed.get(cpu.index()) else {
            return;
        };
        let seq = self.gp_seq.load(Ordering::Relaxed);
        // Only for the grace period it noticed; an exchange, as the CPU's
        // own tick interrupt may notice a newer one meanwhile.
        if seq & 1 != 0 {
            let _ =
                slot.compare_exchange(seq << 1, seq << 1 | 1, Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    /// `cpu`'s scheduler tick, while it is not idle (Linux's
    /// `rcu_sched_clock_irq` and the `rcu_core` it raises): notices a new
    /// normal grace period, or reports the quiescent state passed since it
    /// noticed it. Called by `cpu` itself, from its tick.
    pub fn tick<P: Cpus + ?Sized>(&self, cpus: &P, cpu: CpuId) {
        // Acquire: pairs with the driver's release as it begins, so that
        // every section after this CPU's next turn sees the updater's work.
        let seq = self.gp_seq.load(Ordering::Acquire);
        let Some(slot) = self.noticed.get(cpu.index()) else {
            return;
        };
        if seq & 1 == 0 {
            return;
        }
        let noticed = slot.load(Ordering::Relaxed);
        let ticks = &self.ticks[cpu.index()];
        if noticed >> 1 != seq {
            slot.store(seq << 1, Ordering::Relaxed);
            ticks.store(1, Ordering::Relaxed);
            return;
        }
        ticks.fetch_add(1, Ordering::Relaxed);
        if noticed & 1 != 0 && self.qsmask.load(Ordering::Relaxed) & bit(cpu) != 0 {
            self.report(cpus, cpu);
        }
    }

    /// `cpu` is about to sleep: quiescent until [`GracePeriods::exit_idle`].
    /// An expedited grace period takes the report now; a normal one finds
    /// the CPU idle when it forces quiescent states. Returns whether it
    /// was idle already. Called by `cpu` itself (or, in user mode, by its
    /// thread as it blocks).
    pub fn enter_idle<P: Cpus + ?Sized>(&self, cpus: &P, cpu: CpuId) -> bool {
        // AcqRel, and the driver's RMW on `idle` after its publish: the
        // store-buffering pair of the module doc.
        let was = self.idle.fetch_or(bit(cpu), Ordering::AcqRel) & bit(cpu) != 0;
        // AcqRel, and the driver's RMWs as it snapshots and forces: a
        // driver that sees this entry sees every section before it ended,
        // and the sections after it see what the updater did before the
        // snapshot (module doc).
        if let Some(entries) = self.idle_entries.get(cpu.index()) {
            entries.fetch_add(1, Ordering::AcqRel);
        }
        if self.expedited.load(Ordering::Relaxed) {
            self.report(cpus, cpu);
        }
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

    /// Forced quiescent-state scans done so far.
    pub fn fqs_scans(&self) -> u64 {
        self.fqs_scans.load(Ordering::Relaxed)
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
    /// [`Cpus::now_ns`]; past it the grace period is dropped and described
    /// as Linux's stall warning does. A calling CPU is quiescent while it
    /// waits.
    pub fn synchronize<P: Cpus + ?Sized>(
        &self,
        cpus: &P,
        kind: Kind,
        deadline: Option<u64>,
    ) -> Result<(), Stall> {
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
    ) -> Result<(), Stall> {
        let driver = self.serial.lock();
        if self.completed() >= target {
            return Ok(());
        }
        let grace_period = self.begin_locked(cpus, kind, driver);
        if grace_period.wait(cpus, deadline, &|| false).is_err() {
            return Err(grace_period.stall(cpus));
        }
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
        let began_ns = cpus.now_ns();
        let fqs_before = self.fqs_scans();
        let seq = self.gp_seq.load(Ordering::Relaxed);
        // Release: a CPU's tick that notices it acquires the updater's work.
        self.gp_seq.store(seq | 1, Ordering::Release);
        self.waiter
            .store(me.map_or(NO_CPU, |cpu| u64::from(cpu.0)), Ordering::Relaxed);
        let expedited = kind == Kind::Expedited;
        // A request to expedite left by a caller that came between the
        // last grace period's end and this one's beginning stays for this.
        self.expedited.store(expedited, Ordering::Relaxed);
        // Every CPU but the driver's first, and only then the words that
        // say whom not to wait for: publishing after reading `online` would
        // overwrite the report of a CPU going offline in between.
        // Release: a reporter's RMW that finds its bit sees `waiter` and
        // `expedited`.
        self.qsmask.swap(!me.map_or(0, bit), Ordering::AcqRel);
        // A normal grace period waits for idle CPUs until it forces
        // quiescent states; an expedited one skips them now, and
        // interrupts the others so that each reports at its next turn.
        let waiting = self.release_quiet(expedited);
        for cpu in from_bits(waiting).iter() {
            if let (Some(entries), Some(snapshot)) = (
                self.idle_entries.get(cpu.index()),
                self.idle_snapshot.get(cpu.index()),
            ) {
                // An RMW, so it reads the latest count (module doc).
                snapshot.store(entries.fetch_add(0, Ordering::AcqRel), Ordering::Relaxed);
            }
        }
        if expedited {
            for cpu in from_bits(waiting).iter() {
                cpus.wake(cpu);
            }
        }
        GracePeriod {
            rcu: self,
            _driver: driver,
            kind,
            waiting: from_bits(waiting),
            began_ns,
            fqs_before,
        }
    }

    /// Asks the driver of a normal grace period in progress to expedite it,
    /// for a caller of an expedited one that would otherwise wait for it
    /// to end at normal speed before its own begins (Linux runs the two
    /// kinds side by side; here they share one sequence). The driver
    /// forces quiescent states at once and wakes the CPUs it still waits
    /// for, which then report at their next turn. Nothing if no normal
    /// grace period is in progress.
    pub fn expedite<P: Cpus + ?Sized>(&self, cpus: &P) {
        // Release: pairs with the driver's acquire as it wakes.
        self.expedite_requested.store(true, Ordering::Release);
        match self.waiter.load(Ordering::Relaxed) {
            NO_CPU => cpus.wake_threads(),
            waiter => cpus.wake(CpuId(waiter as u32)),
        }
    }

    /// The driver's scan (Linux's `rcu_gp_fqs`): reports every CPU the
    /// grace period in progress waits for that is idle or offline now, or
    /// that entered idle since it began. Returns the CPUs it still waits
    /// for.
    pub fn force_quiescent_states(&self) -> CpuSet {
        self.fqs_scans.fetch_add(1, Ordering::Relaxed);
        let busy = self.release_quiet(true);
        // A CPU awake at every scan may still have idled between them: a
        // CPU that halts after each turn takes its tick in the halt (so
        // it never notices the grace period), and under a scheduler that
        // runs the vCPUs in lock-step (QEMU's -icount round-robin) it is
        // awake whenever the driver looks. Linux's answer is
        // `rcu_implicit_dynticks_qs`: a CPU whose dynticks counter moved
        // since the snapshot (`rcu_dynticks_in_eqs_since`) passed through
        // an extended quiescent state, which ended every section it ran
        // before, so it is quiescent for this grace period.
        let mut passed = 0;
        for cpu in from_bits(busy).iter() {
            if let (Some(entries), Some(snapshot)) = (
                self.idle_entries.get(cpu.index()),
                self.idle_snapshot.get(cpu.index()),
            ) {
                // An RMW, so it reads the latest count (module doc).
                if entries.fetch_add(0, Ordering::AcqRel) != snapshot.load(Ordering::Relaxed) {
                    passed |= bit(cpu);
                }
            }
        }
        if passed == 0 {
            return from_bits(busy);
        }
        from_bits(self.qsmask.fetch_and(!passed, Ordering::AcqRel) & !passed)
    }

    /// Clears the bits of the CPUs found offline (and, with `idle`, idle)
    /// and returns the bits left.
    fn release_quiet(&self, idle: bool) -> u64 {
        // The driver's half of the store-buffering pairs (module doc). A
        // CPU coming online or waking after these RMWs acquires what the
        // updater did before the grace period.
        let online = self.online.fetch_or(0, Ordering::AcqRel);
        let quiet = if idle {
            !online | self.idle.fetch_or(0, Ordering::AcqRel)
        } else {
            !online
        };
        self.qsmask.fetch_and(!quiet, Ordering::AcqRel) & !quiet
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
