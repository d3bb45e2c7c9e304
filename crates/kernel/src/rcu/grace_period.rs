//! The driver's side of one grace period: waiting for the CPUs, forcing
//! quiescent states on Linux's schedule, expediting on request, ending
//! it or dropping it.

use hotkern_cpuhp::{CpuId, CpuSet};

use crate::cpuset::from_bits;
use crate::platform::Cpus;
use crate::sync::{AtomicU64, MutexGuard, Ordering};

use super::{GracePeriods, Kind, Stall, StalledCpu, Unfinished};

/// A grace period in progress, held by its driver.
pub struct GracePeriod<'a> {
    pub(super) rcu: &'a GracePeriods,
    pub(super) _driver: MutexGuard<'a, ()>,
    pub(super) kind: Kind,
    pub(super) waiting: CpuSet,
    /// [`Cpus::now_ns`] as it began.
    pub(super) began_ns: u64,
    /// [`GracePeriods::fqs_scans`] as it began.
    pub(super) fqs_before: u64,
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
        if self.kind == Kind::Expedited {
            match deadline {
                Some(deadline) => {
                    cpus.wait_until_deadline(&condition, deadline);
                }
                None => cpus.wait_until(&condition),
            }
        } else {
            self.wait_forcing(cpus, deadline, &condition);
        }
        if over() {
            Ok(())
        } else {
            Err(Unfinished(self.rcu.holding_up()))
        }
    }

    /// A normal grace period's wait: sleeps until it is over or it is time
    /// to force quiescent states, every [`Hz::jiffies_till_fqs`] jiffies,
    /// counted from the jiffy it began in (Linux's `rcu_gp_fqs_loop`). On
    /// a platform without a clock ([`Cpus::wait_until_deadline`]'s
    /// default) it never forces them, and waits for idle CPUs to wake.
    fn wait_forcing<P: Cpus + ?Sized>(
        &self,
        cpus: &P,
        deadline: Option<u64>,
        condition: &dyn Fn() -> bool,
    ) {
        let hz = self.rcu.hz();
        let fqs_after = |now| hz.at(hz.jiffies(now) + hz.jiffies_till_fqs());
        let mut fqs_at = fqs_after(cpus.now_ns());
        let asked = || self.rcu.expedite_requested.load(Ordering::Acquire);
        loop {
            let until = deadline.map_or(fqs_at, |deadline| deadline.min(fqs_at));
            cpus.wait_until_deadline(&|| condition() || asked(), until);
            if condition() {
                return;
            }
            if self.rcu.expedite_requested.swap(false, Ordering::AcqRel) {
                self.expedite_now(cpus);
                continue;
            }
            let now = cpus.now_ns();
            if deadline.is_some_and(|deadline| now >= deadline) {
                return;
            }
            if now >= fqs_at {
                self.rcu.force_quiescent_states();
                fqs_at = fqs_after(now);
            }
        }
    }

    /// Turns it into an expedited one: the CPUs report from their next turn
    /// or idle entry, the idle ones are reported now, and the busy ones
    /// are woken (the interrupt of Linux's `synchronize_rcu_expedited`).
    fn expedite_now<P: Cpus + ?Sized>(&self, cpus: &P) {
        // Relaxed: a CPU that reads the old value reports at its tick.
        self.rcu.expedited.store(true, Ordering::Relaxed);
        for cpu in from_bits(self.rcu.release_quiet(true)).iter() {
            cpus.wake(cpu);
        }
    }

    /// What holds it up, as Linux's RCU CPU stall warning says it: each
    /// CPU it still waits for, whether that CPU noticed it and ticked
    /// since, idled since it began, and what it runs
    /// ([`Cpus::activity`]); how long it has run and how often quiescent
    /// states were forced. Read while it is still in progress.
    pub fn stall<P: Cpus + ?Sized>(&self, cpus: &P) -> Stall {
        let rcu = self.rcu;
        let seq = rcu.gp_seq.load(Ordering::Acquire);
        let stalled = |cpu: CpuId| {
            let index = cpu.index();
            let noticed = rcu
                .noticed
                .get(index)
                .map_or(0, |slot| slot.load(Ordering::Relaxed));
            let count = |slots: &[AtomicU64]| {
                slots
                    .get(index)
                    .map_or(0, |slot| slot.load(Ordering::Relaxed))
            };
            // Linux's `rcu_seq_ctr(gp_seq - rdp->gp_seq)`, in this
            // sequence's steps of two.
            let behind = seq.saturating_sub(noticed >> 1).div_ceil(2);
            StalledCpu {
                cpu,
                behind,
                ticks: count(&rcu.ticks),
                quiescent_passed: behind == 0 && noticed & 1 != 0,
                idle_entries: count(&rcu.idle_entries).wrapping_sub(count(&rcu.idle_snapshot)),
                idle: rcu.is_idle(cpu),
                activity: cpus.activity(cpu),
            }
        };
        Stall {
            kind: self.kind,
            grace_period: (seq >> 1) + 1,
            detected_by: cpus.current(),
            elapsed_ns: cpus.now_ns().saturating_sub(self.began_ns),
            hz: rcu.hz(),
            fqs_scans: rcu.fqs_scans() - self.fqs_before,
            cpus: rcu.holding_up().iter().map(stalled).collect(),
        }
    }

    /// Ends it: [`GracePeriods::completed`] counts it.
    pub fn end(self) {
        self.rcu.expedite_requested.store(false, Ordering::Relaxed);
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
