//! Every task, work item, timer and RCU callback handed to the machine, and
//! how many times each completed: the test that nothing is lost or run twice.

use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

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
    const ALL: [Item; 4] = [Item::Task, Item::Work, Item::Timer, Item::RcuCallback];

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
    /// Items handed to the machine.
    pub issued: u64,
    /// Items that completed exactly once.
    pub completed_once: u64,
    /// Items that have not completed.
    pub outstanding: u64,
    /// Items that completed more than once.
    pub completed_twice: u64,
}

#[derive(Default)]
struct Books {
    /// Completions per item id, per kind.
    runs: [Vec<u8>; 4],
    outstanding: u64,
}

/// The machine's ledger of deferred items.
#[derive(Default)]
pub struct Ledger {
    books: Mutex<Books>,
    drained: Condvar,
}

impl Ledger {
    /// Records a new item and returns its id.
    pub fn issue(&self, item: Item) -> u64 {
        let mut books = self.books.lock();
        books.outstanding += 1;
        let runs = &mut books.runs[item.index()];
        runs.push(0);
        (runs.len() - 1) as u64
    }

    /// Records that item `id` completed; false if it had completed before.
    pub fn complete(&self, item: Item, id: u64) -> bool {
        let mut books = self.books.lock();
        let Some(count) = books.runs[item.index()].get_mut(id as usize) else {
            return false;
        };
        *count = count.saturating_add(1);
        let first = *count == 1;
        if first {
            books.outstanding -= 1;
            if books.outstanding == 0 {
                self.drained.notify_all();
            }
        }
        first
    }

    /// Items issued but not completed, over every kind.
    #[cfg(test)]
    pub fn outstanding(&self) -> u64 {
        self.books.lock().outstanding
    }

    /// Waits until every issued item has completed, or `timeout` passes;
    /// returns whether everything completed.
    pub fn wait_drained(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut books = self.books.lock();
        while books.outstanding > 0 {
            if self.drained.wait_until(&mut books, deadline).timed_out() {
                return books.outstanding == 0;
            }
        }
        true
    }

    /// Counts for `item`.
    pub fn tally(&self, item: Item) -> Tally {
        let books = self.books.lock();
        let runs = &books.runs[item.index()];
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
        let ledger = Ledger::default();
        let a = ledger.issue(Item::Task);
        let b = ledger.issue(Item::Task);
        let c = ledger.issue(Item::Work);
        assert!(ledger.complete(Item::Task, a));
        assert!(!ledger.complete(Item::Task, a));
        assert!(!ledger.complete(Item::Task, 99));
        assert_eq!(ledger.outstanding(), 2);
        assert!(!ledger.wait_drained(Duration::from_millis(1)));
        assert!(ledger.complete(Item::Task, b));
        assert!(ledger.complete(Item::Work, c));
        assert!(ledger.wait_drained(Duration::from_millis(1)));
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
