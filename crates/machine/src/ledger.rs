//! The machine's ledger: `hotkern-kernel`'s counts, under a lock, plus a
//! condvar so that shutdown can sleep until every item has completed
//! rather than poll. Waiting stays here because it needs a thread to sleep.

use std::time::{Duration, Instant};

use hotkern_kernel::ledger::{Item, Ledger as Books, Tally};
use parking_lot::{Condvar, Mutex};

/// The machine's ledger of deferred items.
#[derive(Default)]
pub struct Ledger {
    books: Mutex<Books>,
    drained: Condvar,
}

impl Ledger {
    /// Records a new item and returns its id.
    pub fn issue(&self, item: Item) -> u64 {
        self.books.lock().issue(item)
    }

    /// Records that item `id` completed; false if it had completed before.
    pub fn complete(&self, item: Item, id: u64) -> bool {
        let done = self.books.lock().complete(item, id);
        if done.drained {
            self.drained.notify_all();
        }
        done.first
    }

    /// Waits until every issued item has completed, or `timeout` passes;
    /// returns whether everything completed.
    pub fn wait_drained(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut books = self.books.lock();
        while !books.is_drained() {
            if self.drained.wait_until(&mut books, deadline).timed_out() {
                return books.is_drained();
            }
        }
        true
    }

    /// Counts for `item`.
    pub fn tally(&self, item: Item) -> Tally {
        self.books.lock().tally(item)
    }

    /// Counts for every kind of item.
    pub fn tallies(&self) -> Vec<(Item, Tally)> {
        self.books.lock().tallies()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waiting_ends_when_the_last_item_completes() {
        let ledger = Ledger::default();
        let a = ledger.issue(Item::Task);
        let b = ledger.issue(Item::Work);
        assert!(ledger.complete(Item::Task, a));
        assert!(!ledger.complete(Item::Task, a));
        assert!(!ledger.wait_drained(Duration::from_millis(1)));
        std::thread::scope(|scope| {
            scope.spawn(|| assert!(ledger.complete(Item::Work, b)));
            assert!(ledger.wait_drained(Duration::from_secs(60)));
        });
    }
}
