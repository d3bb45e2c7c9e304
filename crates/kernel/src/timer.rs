//! Per-CPU timer bases: timers fire on the CPU they were armed on (run by
//! its `ksoftirqd`), and move to a live CPU when theirs goes away.
//! Deadlines are nanoseconds of the platform's clock, whatever its epoch:
//! the machine counts from its start, a bare-metal kernel from boot.

use alloc::collections::BinaryHeap;
use alloc::vec::Vec;
use core::cmp::Ordering as CmpOrdering;

use crate::percpu::PerCpu;

/// A timer: a job `J` to run once the clock reaches `deadline`.
pub struct Timer<J> {
    /// When it fires, in nanoseconds of the platform's clock.
    pub deadline: u64,
    /// Its ledger id; among equal deadlines, the lower id fires first.
    pub id: u64,
    /// What runs when it fires.
    pub job: J,
}

impl<J> PartialEq for Timer<J> {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == CmpOrdering::Equal
    }
}
impl<J> Eq for Timer<J> {}
impl<J> PartialOrd for Timer<J> {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl<J> Ord for Timer<J> {
    /// Earliest deadline first in a max-heap.
    fn cmp(&self, other: &Self) -> CmpOrdering {
        (other.deadline, other.id).cmp(&(self.deadline, self.id))
    }
}

struct Base<J> {
    heap: BinaryHeap<Timer<J>>,
    /// Fires only between the CPU's starting and dying steps.
    enabled: bool,
}

/// Every CPU's timer base, each created and freed by the CPU's hotplug
/// steps and enabled only while the CPU is up.
///
/// ```
/// use hotkern_kernel::timer::{Timer, Timers};
///
/// let timers = Timers::new(1);
/// timers.create(0);
/// timers.set_enabled(0, true);
/// assert!(timers.arm(0, Timer { deadline: 100, id: 0, job: "tick" }).is_ok());
/// assert!(!timers.has_due(0, 99));
/// let due = timers.take_due(0, 100);
/// assert_eq!(due.iter().map(|t| t.job).collect::<Vec<_>>(), ["tick"]);
/// ```
pub struct Timers<J> {
    bases: PerCpu<Base<J>>,
}

impl<J> Timers<J> {
    /// No base yet on any of `cpus` CPUs.
    pub fn new(cpus: usize) -> Self {
        Timers {
            bases: PerCpu::new(cpus),
        }
    }

    /// Creates `cpu`'s (disabled) base; false if it exists.
    pub fn create(&self, cpu: usize) -> bool {
        self.bases.create(cpu, || Base {
            heap: BinaryHeap::new(),
            enabled: false,
        })
    }

    /// Lets `cpu`'s timers fire, or stops them; false if it has no base.
    pub fn set_enabled(&self, cpu: usize, enabled: bool) -> bool {
        self.bases
            .with(cpu, |base| base.enabled = enabled)
            .is_some()
    }

    /// Whether `cpu`'s timers may fire.
    pub fn is_enabled(&self, cpu: usize) -> bool {
        self.bases.with(cpu, |b| b.enabled).unwrap_or(false)
    }

    /// Arms `timer` on `cpu`; gives it back if that base is missing or stopped.
    pub fn arm(&self, cpu: usize, timer: Timer<J>) -> Result<(), Timer<J>> {
        match self.bases.lock(cpu).as_mut() {
            Some(base) if base.enabled => {
                base.heap.push(timer);
                Ok(())
            }
            _ => Err(timer),
        }
    }

    /// Removes and returns `cpu`'s timers due at `now`, earliest first.
    pub fn take_due(&self, cpu: usize, now: u64) -> Vec<Timer<J>> {
        self.bases
            .with(cpu, |base| {
                let mut due = Vec::new();
                while base.enabled && base.heap.peek().is_some_and(|t| t.deadline <= now) {
                    if let Some(timer) = base.heap.pop() {
                        due.push(timer);
                    }
                }
                due
            })
            .unwrap_or_default()
    }

    /// The earliest pending deadline on `cpu`.
    pub fn next_deadline(&self, cpu: usize) -> Option<u64> {
        self.bases
            .with(cpu, |b| {
                b.heap.peek().map(|t| t.deadline).filter(|_| b.enabled)
            })
            .flatten()
    }

    /// Whether `cpu` has a timer due at `now`.
    pub fn has_due(&self, cpu: usize, now: u64) -> bool {
        self.next_deadline(cpu).is_some_and(|d| d <= now)
    }

    /// Takes every pending timer of `cpu`, keeping its (empty) base.
    pub fn take_all(&self, cpu: usize) -> Vec<Timer<J>> {
        self.bases
            .with(cpu, |base| base.heap.drain().collect())
            .unwrap_or_default()
    }

    /// Frees `cpu`'s base; gives back the timers it still held, or `None`
    /// if there was no base.
    pub fn free(&self, cpu: usize) -> Option<Vec<Timer<J>>> {
        self.bases.free(cpu).map(|base| base.heap.into_vec())
    }

    /// Pending timers on `cpu`.
    pub fn pending(&self, cpu: usize) -> usize {
        self.bases.with(cpu, |b| b.heap.len()).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Nanoseconds in a microsecond.
    const US: u64 = 1_000;

    fn timer(at: u64, id: u64) -> Timer<()> {
        Timer {
            deadline: at,
            id,
            job: (),
        }
    }

    #[test]
    fn timers_fire_in_deadline_order_only_on_an_enabled_base() {
        let timers = Timers::new(2);
        let now = 5_000_000;
        assert!(timers.arm(0, timer(now, 1)).is_err(), "no base");
        assert!(timers.create(0) && !timers.create(0));
        assert!(timers.arm(0, timer(now, 1)).is_err(), "disabled base");
        assert!(timers.set_enabled(0, true));
        for (offset, id) in [(30, 3), (10, 1), (20, 2), (1_000_000, 4)] {
            assert!(timers.arm(0, timer(now + offset * US, id)).is_ok());
        }
        let later = now + 50 * US;
        assert!(timers.has_due(0, later));
        let due: Vec<u64> = timers.take_due(0, later).iter().map(|t| t.id).collect();
        assert_eq!(due, [1, 2, 3]);
        assert_eq!(timers.pending(0), 1);
        timers.set_enabled(0, false);
        assert!(
            timers.next_deadline(0).is_none(),
            "a stopped base never fires"
        );
        assert_eq!(timers.take_all(0).len(), 1);
        assert_eq!(timers.free(0).map(|left| left.len()), Some(0));
        assert!(!timers.is_enabled(0));
    }
}
