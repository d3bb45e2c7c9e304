//! The scheduler tick, written once for both platforms: HZ and jiffies,
//! and each CPU's periodic tick that stops while the CPU idles with
//! nothing to wake it for (Linux's dyntick-idle, `CONFIG_NO_HZ_IDLE`).
//!
//! Jiffies are the platform's clock divided into ticks of `1/HZ` seconds,
//! as Linux's `jiffies` count them (one CPU advances them from its tick;
//! with ticks stopped on idle CPUs Linux catches up from the clock, which
//! is what reading them from the clock amounts to). A CPU's tick is due
//! at each jiffy boundary; whoever runs the CPU's loop (the machine's
//! vCPU thread, or the bare-metal kernel's local APIC timer interrupt)
//! asks [`Ticks::due`] and, when it says so, runs the tick's work: RCU's
//! [`GracePeriods::tick`](crate::rcu::GracePeriods::tick) and the timers
//! whose expiry ([`Hz::expiry`]) has come.
//!
//! Who writes what: a CPU's slot is written only by that CPU (its loop or
//! its own interrupt), so plain loads and stores do; other CPUs only read
//! it, for statistics.
//!
//! ```
//! use hotkern_kernel::tick::{Hz, Ticks};
//!
//! let hz = Hz::new(1000).unwrap();
//! assert_eq!(hz.nanos_per_jiffy(), 1_000_000);
//! // Linux's RCU_JIFFIES_TILL_FORCE_QS at HZ=1000.
//! assert_eq!(hz.jiffies_till_fqs(), 3);
//!
//! let ticks = Ticks::new(hz);
//! ticks.start(0, 2_500_000);
//! assert!(!ticks.due(0, 2_900_000));
//! assert!(ticks.due(0, 3_000_000)); // the jiffy boundary
//! assert!(!ticks.due(0, 3_100_000)); // once per jiffy
//! ticks.stop(0); // idle, nothing pending: dyntick-idle
//! assert_eq!(ticks.next(0), None);
//! ```

use crate::cpuset::MAX_CPUS;
use crate::sync::{AtomicU64, Ordering};

/// Ticks per second: one of the values Linux offers (`CONFIG_HZ_100`,
/// `_250`, `_300`, `_1000`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hz(u32);

/// A tick rate Linux does not offer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnsupportedHz(pub u32);

impl core::fmt::Display for UnsupportedHz {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "HZ={} is not one of 100, 250, 300 or 1000", self.0)
    }
}

impl Hz {
    /// Linux's default on x86-64 distributions' desktop kernels, and ours.
    pub const DEFAULT: Hz = Hz(1000);

    /// `hz` if Linux offers it.
    pub const fn new(hz: u32) -> Result<Hz, UnsupportedHz> {
        match hz {
            100 | 250 | 300 | 1000 => Ok(Hz(hz)),
            other => Err(UnsupportedHz(other)),
        }
    }

    /// Ticks per second.
    pub const fn get(self) -> u32 {
        self.0
    }

    /// The length of a jiffy in nanoseconds.
    pub const fn nanos_per_jiffy(self) -> u64 {
        1_000_000_000 / self.0 as u64
    }

    /// Jiffies at clock reading `now_ns`.
    pub const fn jiffies(self, now_ns: u64) -> u64 {
        now_ns / self.nanos_per_jiffy()
    }

    /// When jiffy `jiffy` begins, in nanoseconds of the clock.
    pub const fn at(self, jiffy: u64) -> u64 {
        jiffy.saturating_mul(self.nanos_per_jiffy())
    }

    /// When a timer whose deadline is `deadline_ns` fires: at the first
    /// tick at or after it, as timers expire from the tick's softirq.
    pub const fn expiry(self, deadline_ns: u64) -> u64 {
        self.at(deadline_ns.div_ceil(self.nanos_per_jiffy()))
    }

    /// When the jiffy of clock reading `now_ns` began: the last tick. A
    /// timer is due once its deadline is at or before it, so that it
    /// fires at its [`expiry`](Hz::expiry), whenever its CPU looks.
    pub const fn last_tick(self, now_ns: u64) -> u64 {
        self.at(self.jiffies(now_ns))
    }

    /// Jiffies a grace period waits before it forces quiescent states, the
    /// first time and each time after (Linux's
    /// `RCU_JIFFIES_TILL_FORCE_QS` in kernel/rcu/tree.h, the default of
    /// `jiffies_till_first_fqs` and `jiffies_till_next_fqs`; the
    /// `nr_cpu_ids / 256` it adds is 0 for up to 64 CPUs).
    pub const fn jiffies_till_fqs(self) -> u64 {
        1 + (self.0 > 250) as u64 + (self.0 > 500) as u64
    }
}

impl Default for Hz {
    fn default() -> Self {
        Hz::DEFAULT
    }
}

/// The tick rate of one kernel and when each CPU's next tick is due.
pub struct Ticks {
    /// The rate: set at boot, before any tick starts.
    hz: AtomicU64,
    /// Per CPU: the clock reading of its next tick, or [`STOPPED`].
    next: [AtomicU64; MAX_CPUS],
}

/// A slot's value while its CPU's tick is stopped (or never started).
const STOPPED: u64 = u64::MAX;

impl Ticks {
    /// Ticks at `hz`, every CPU's stopped; a `static` on bare metal.
    #[cfg(not(loom))]
    pub const fn new(hz: Hz) -> Ticks {
        Ticks {
            hz: AtomicU64::new(hz.0 as u64),
            next: [const { AtomicU64::new(STOPPED) }; MAX_CPUS],
        }
    }

    /// Ticks at `hz`, every CPU's stopped.
    #[cfg(loom)]
    pub fn new(hz: Hz) -> Ticks {
        Ticks {
            hz: AtomicU64::new(hz.0 as u64),
            next: core::array::from_fn(|_| AtomicU64::new(STOPPED)),
        }
    }

    /// The tick rate.
    pub fn hz(&self) -> Hz {
        Hz(self.hz.load(Ordering::Relaxed) as u32)
    }

    /// Changes the rate: at boot, before any CPU's tick starts (a kernel
    /// whose rate is a boot parameter starts from a `static`).
    pub fn set_hz(&self, hz: Hz) {
        self.hz.store(u64::from(hz.0), Ordering::Relaxed);
    }

    /// Starts (or restarts, leaving idle) `cpu`'s tick: due at the next
    /// jiffy boundary after `now_ns`. Called by `cpu`.
    pub fn start(&self, cpu: usize, now_ns: u64) {
        if let Some(slot) = self.next.get(cpu) {
            if slot.load(Ordering::Relaxed) == STOPPED {
                let hz = self.hz();
                let next = hz.at(hz.jiffies(now_ns) + 1);
                slot.store(next, Ordering::Relaxed);
            }
        }
    }

    /// Stops `cpu`'s tick: it idles with no timer and no RCU work that
    /// needs it (Linux's `tick_nohz_idle_stop_tick`). Called by `cpu`.
    pub fn stop(&self, cpu: usize) {
        if let Some(slot) = self.next.get(cpu) {
            slot.store(STOPPED, Ordering::Relaxed);
        }
    }

    /// Whether `cpu`'s tick is due at `now_ns`; if so, the next one is
    /// due at the following jiffy boundary (ticks missed while the CPU was
    /// busy are not made up, as a late tick interrupt is not). Called by
    /// `cpu`, at each turn of its loop or from its timer interrupt.
    pub fn due(&self, cpu: usize, now_ns: u64) -> bool {
        let Some(slot) = self.next.get(cpu) else {
            return false;
        };
        let next = slot.load(Ordering::Relaxed);
        if next == STOPPED || now_ns < next {
            return false;
        }
        let hz = self.hz();
        slot.store(hz.at(hz.jiffies(now_ns) + 1), Ordering::Relaxed);
        true
    }

    /// When `cpu`'s next tick is due, or `None` while it is stopped.
    pub fn next(&self, cpu: usize) -> Option<u64> {
        let next = self.next.get(cpu)?.load(Ordering::Relaxed);
        (next != STOPPED).then_some(next)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::string::ToString;

    #[test]
    fn only_linux_tick_rates_are_accepted() {
        for hz in [100, 250, 300, 1000] {
            assert_eq!(Hz::new(hz).map(Hz::get), Ok(hz));
        }
        assert_eq!(Hz::new(0), Err(UnsupportedHz(0)));
        assert_eq!(Hz::new(500), Err(UnsupportedHz(500)));
        assert_eq!(
            UnsupportedHz(500).to_string(),
            "HZ=500 is not one of 100, 250, 300 or 1000"
        );
    }

    #[test]
    fn fqs_delays_follow_linux_for_each_hz() {
        // 1 + (HZ > 250) + (HZ > 500), kernel/rcu/tree.h.
        let delays = [100, 250, 300, 1000].map(|hz| Hz::new(hz).unwrap().jiffies_till_fqs());
        assert_eq!(delays, [1, 1, 2, 3]);
    }

    #[test]
    fn timers_expire_at_the_next_tick() {
        let hz = Hz::new(250).unwrap(); // 4 ms jiffies
        assert_eq!(hz.expiry(0), 0);
        assert_eq!(hz.expiry(1), 4_000_000);
        assert_eq!(hz.expiry(4_000_000), 4_000_000);
        assert_eq!(hz.expiry(4_000_001), 8_000_000);
        assert_eq!(hz.last_tick(7_999_999), 4_000_000);
        assert_eq!(hz.last_tick(8_000_000), 8_000_000);
    }

    #[test]
    fn a_busy_cpu_ticks_once_per_jiffy_and_skips_missed_ones() {
        let ticks = Ticks::new(Hz::new(100).unwrap()); // 10 ms
        ticks.start(1, 5_000_000);
        assert_eq!(ticks.next(1), Some(10_000_000));
        assert!(!ticks.due(1, 9_999_999));
        assert!(ticks.due(1, 10_000_000));
        assert!(!ticks.due(1, 19_999_999));
        // Late by three jiffies: one tick, then the next boundary.
        assert!(ticks.due(1, 45_000_000));
        assert_eq!(ticks.next(1), Some(50_000_000));
        // Starting a running tick leaves it alone.
        ticks.start(1, 47_000_000);
        assert_eq!(ticks.next(1), Some(50_000_000));
        // Other CPUs' ticks are their own, and out-of-range CPUs never tick.
        assert_eq!(ticks.next(0), None);
        assert!(!ticks.due(0, u64::MAX - 1));
        assert!(!ticks.due(MAX_CPUS, 0));
    }

    #[test]
    fn the_rate_set_at_boot_is_the_rate_ticks_follow() {
        let ticks = Ticks::new(Hz::DEFAULT);
        ticks.set_hz(Hz::new(100).unwrap());
        assert_eq!(ticks.hz().get(), 100);
        ticks.start(0, 0);
        assert_eq!(ticks.next(0), Some(10_000_000));
    }

    #[test]
    fn a_stopped_tick_is_never_due_until_restarted() {
        let ticks = Ticks::new(Hz::DEFAULT);
        ticks.start(0, 0);
        ticks.stop(0);
        assert!(!ticks.due(0, 1_000_000_000));
        ticks.start(0, 1_000_500_000);
        assert_eq!(ticks.next(0), Some(1_001_000_000));
    }
}
