//! Per-CPU timer bases: timers fire on the vCPU they were armed on (run by
//! its `ksoftirqd`), and move to a live CPU when theirs goes away.

use std::cmp::Ordering as CmpOrdering;
use std::collections::BinaryHeap;
use std::time::Instant;

use parking_lot::Mutex;

use crate::task::Job;

pub(crate) struct Timer {
    pub(crate) deadline: Instant,
    pub(crate) id: u64,
    pub(crate) job: Job,
}

impl PartialEq for Timer {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == CmpOrdering::Equal
    }
}
impl Eq for Timer {}
impl PartialOrd for Timer {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl Ord for Timer {
    /// Earliest deadline first in a max-heap.
    fn cmp(&self, other: &Self) -> CmpOrdering {
        (other.deadline, other.id).cmp(&(self.deadline, self.id))
    }
}

#[derive(Default)]
struct Base {
    heap: BinaryHeap<Timer>,
    /// Fires only between the CPU's starting and dying steps.
    enabled: bool,
}

pub(crate) struct Timers {
    bases: Box<[Mutex<Option<Base>>]>,
}

impl Timers {
    pub(crate) fn new(cpus: usize) -> Self {
        Timers {
            bases: (0..cpus).map(|_| Mutex::new(None)).collect(),
        }
    }

    /// Creates `cpu`'s (disabled) base; false if it exists.
    pub(crate) fn create(&self, cpu: usize) -> bool {
        let mut base = self.bases[cpu].lock();
        if base.is_some() {
            return false;
        }
        *base = Some(Base::default());
        true
    }

    /// Lets `cpu`'s timers fire, or stops them; false if it has no base.
    pub(crate) fn set_enabled(&self, cpu: usize, enabled: bool) -> bool {
        match self.bases[cpu].lock().as_mut() {
            Some(base) => {
                base.enabled = enabled;
                true
            }
            None => false,
        }
    }

    pub(crate) fn is_enabled(&self, cpu: usize) -> bool {
        self.bases[cpu].lock().as_ref().is_some_and(|b| b.enabled)
    }

    /// Arms `timer` on `cpu`; gives it back if that base is missing or stopped.
    pub(crate) fn arm(&self, cpu: usize, timer: Timer) -> Result<(), Timer> {
        match self.bases[cpu].lock().as_mut() {
            Some(base) if base.enabled => {
                base.heap.push(timer);
                Ok(())
            }
            _ => Err(timer),
        }
    }

    /// Removes and returns `cpu`'s expired timers.
    pub(crate) fn take_due(&self, cpu: usize, now: Instant) -> Vec<Timer> {
        let mut due = Vec::new();
        if let Some(base) = self.bases[cpu].lock().as_mut() {
            if !base.enabled {
                return due;
            }
            while base.heap.peek().is_some_and(|t| t.deadline <= now) {
                if let Some(timer) = base.heap.pop() {
                    due.push(timer);
                }
            }
        }
        due
    }

    /// The earliest pending deadline on `cpu`.
    pub(crate) fn next_deadline(&self, cpu: usize) -> Option<Instant> {
        self.bases[cpu]
            .lock()
            .as_ref()
            .filter(|b| b.enabled)
            .and_then(|b| b.heap.peek().map(|t| t.deadline))
    }

    /// Whether `cpu` has an expired timer.
    pub(crate) fn has_due(&self, cpu: usize, now: Instant) -> bool {
        self.next_deadline(cpu).is_some_and(|d| d <= now)
    }

    /// Takes every pending timer of `cpu`, keeping its (empty) base.
    pub(crate) fn take_all(&self, cpu: usize) -> Vec<Timer> {
        self.bases[cpu]
            .lock()
            .as_mut()
            .map_or_else(Vec::new, |base| base.heap.drain().collect())
    }

    /// Frees `cpu`'s base; gives back the timers it still held, or `None`
    /// if there was no base.
    pub(crate) fn free(&self, cpu: usize) -> Option<Vec<Timer>> {
        self.bases[cpu]
            .lock()
            .take()
            .map(|base| base.heap.into_vec())
    }

    /// Pending timers on `cpu`.
    pub(crate) fn pending(&self, cpu: usize) -> usize {
        self.bases[cpu].lock().as_ref().map_or(0, |b| b.heap.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn timer(at: Instant, id: u64) -> Timer {
        Timer {
            deadline: at,
            id,
            job: Box::new(|_| {}),
        }
    }

    #[test]
    fn timers_fire_in_deadline_order_only_on_an_enabled_base() {
        let timers = Timers::new(2);
        let now = Instant::now();
        assert!(timers.arm(0, timer(now, 1)).is_err(), "no base");
        assert!(timers.create(0) && !timers.create(0));
        assert!(timers.arm(0, timer(now, 1)).is_err(), "disabled base");
        assert!(timers.set_enabled(0, true));
        for (offset, id) in [(30, 3), (10, 1), (20, 2), (1_000_000, 4)] {
            assert!(timers
                .arm(0, timer(now + Duration::from_micros(offset), id))
                .is_ok());
        }
        let later = now + Duration::from_micros(50);
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
