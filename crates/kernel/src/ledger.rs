//! Every task, work item, timer and RCU callback handed to the kernel, and
//! how many times each completed: the test that nothing is lost or run
//! twice. The ledger only counts; it is plain data that its owner locks, and
//! each completion says whether it drained the books, so a platform that
//! can sleep wakes its waiters then (the machine's condvar) and one that
//! cannot checks [`Ledger::is_drained`].

use alloc::vec::Vec;

/// What kind of deferred item a ledger entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Item {
    /// A task submitted to a run queue.
    Task,
    /// A workqueue item.
    Work,
    /// A timer callback.
    Timer,
    /// An RCU callback.
    RcuCallback,
}

impl Item {
    /// Every kind, in report order.
    pub const ALL: [Item; 4] = [Item::Task, Item::Work, Item::Timer, Item::RcuCallback];

    const fn index(self) -> usize {
        match self {
            Item::Task => 0,
            Item::Work => 1,
            Item::Timer => 2,
            Item::RcuCallback => 3,
        }
    }

    /// The item's name in reports.
    pub const fn name(self) -> &'static str {
        match self {
            Item::Task => "task",
            Item::Work => "work item",
            Item::Timer => "timer",
            Item::RcuCallback => "rcu callback",
        }
    }
}

/// Counts of one kind of item.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Items handed to the kernel.
    pub issued: u64,
    /// Items that completed exactly once.
    pub completed_once: u64,
    /// Items that have not completed.
    pub outstanding: u64,
    /// Items that completed more than once.
    pub completed_twice: u64,
}

/// What [`Ledger::complete`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub struct Completion {
    /// The item completed for the first time (false: again, or an id never
    /// issued).
    pub first: bool,
    /// This completion left nothing outstanding: wake whoever waits for
    /// the ledger to drain.
    pub drained: bool,
}

/// The kernel's ledger of deferred items.
///
/// ```
/// use hotkern_kernel::ledger::{Item, Ledger};
///
/// let mut ledger = Ledger::default();
/// let id = ledger.issue(Item::Work);
/// assert!(!ledger.is_drained());
/// let done = ledger.complete(Item::Work, id);
/// assert!(done.first && done.drained);
/// assert!(!ledger.complete(Item::Work, id).first, "ran twice");
/// assert_eq!(ledger.tally(Item::Work).completed_twice, 1);
/// ```
#[derive(Debug, Default)]
pub struct Ledger {
    /// Completions per item id, per kind.
    runs: [Vec<u8>; 4],
    outstanding: u64,
}

impl Ledger {
    /// Records a new item and returns its id.
    pub fn issue(&mut self, item: Item) -> u64 {
        self.outstanding += 1;
        let runs = &mut self.runs[item.index()];
        runs.push(0);
        (runs.len() - 1) as u64
    }

    /// Records that item `id` completed.
    pub fn complete(&mut self, item: Item, id: u64) -> Completion {
        let Some(count) = self.runs[item.index()].get_mut(id as usize) else {
            return Completion {
                first: false,
                drained: false,
            };
        };
        *count = count.saturating_add(1);
        let first = *count == 1;
        if first {
            self.outstanding -= 1;
        }
        Completion {
            first,
            drained: first && self.outstanding == 0,
        }
    }

    /// Items issued but not completed, over every kind.
    pub fn outstanding(&self) -> u64 {
        self.outstanding
    }

    /// Whether every issued item has completed.
    pub fn is_drained(&self) -> bool {
        self.outstanding == 0
    }

    /// Counts for `item`.
    pub fn tally(&self, item: Item) -> Tally {
        let runs = &self.runs[item.index()];
        let mut tally = Tally {
            issued: runs.len() as u64,
            ..Tally::default()
        };
        for &count in runs {
            match count {
                0 => tally.outstanding += 1,
                1 => tally.completed_once += 1,
                _ => tally.completed_twice += 1,
            }
        }
        tally
    }

    /// Counts for every kind of item.
    pub fn tallies(&self) -> Vec<(Item, Tally)> {
        Item::ALL
            .iter()
            .map(|&item| (item, self.tally(item)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_once_twice_and_outstanding() {
        let mut ledger = Ledger::default();
        let a = ledger.issue(Item::Task);
        let b = ledger.issue(Item::Task);
        let c = ledger.issue(Item::Work);
        assert!(ledger.complete(Item::Task, a).first);
        assert!(!ledger.complete(Item::Task, a).first);
        assert!(!ledger.complete(Item::Task, 99).first);
        assert_eq!(ledger.outstanding(), 2);
        assert!(!ledger.is_drained());
        assert_eq!(
            ledger.complete(Item::Task, b),
            Completion {
                first: true,
                drained: false
            }
        );
        assert_eq!(
            ledger.complete(Item::Work, c),
            Completion {
                first: true,
                drained: true
            }
        );
        assert!(ledger.is_drained());
        let tally = ledger.tally(Item::Task);
        assert_eq!(
            tally,
            Tally {
                issued: 2,
                completed_once: 1,
                outstanding: 0,
                completed_twice: 1
            }
        );
    }
}
