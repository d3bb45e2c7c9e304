//! Deferred reclamation for the lock-free read side.
//!
//! Readers announce themselves in one of two counters chosen by the parity
//! of a global epoch; a writer that has unpublished something *retires* it
//! and frees it only once no reader that could have seen it is left:
//!
//! - a reader loads the epoch, increments the counter of its parity, and
//!   re-loads the epoch; if the epoch moved it backs out and retries, so a
//!   reader is only ever counted under an epoch that was current while it
//!   was counted;
//! - the writer retires garbage into a *current* bag; to reclaim, it flips the
//!   epoch (moving the bag to *waiting*) and frees the waiting bag once the
//!   old parity's counters have drained to zero. It flips again only after
//!   that, so the parity it re-uses is known to be empty of old readers.
//!
//! The writer never waits: reclamation happens on a later write (or
//! [`Retired::collect`] call) if readers are still inside. Counters are
//! striped over cache lines so that readers on different CPUs need not share
//! one line; a reader names its stripe (its CPU, say) or takes stripe 0.
//!
//! ```
//! use hotkern_physmem::epoch::{Domain, Retired};
//!
//! let domain = Domain::new();
//! let mut retired = Retired::new();
//! let reader = domain.pin(0);
//! retired.retire(7u32);
//! let mut freed = Vec::new();
//! retired.collect(&domain, |g| freed.push(g));
//! assert!(freed.is_empty(), "a reader may still see it");
//! drop(reader);
//! retired.collect(&domain, |g| freed.push(g));
//! assert_eq!(freed, [7]);
//! ```

use alloc::vec::Vec;

use crate::sync::{fence, AtomicUsize, Ordering};

/// Reader counter stripes. Fewer under loom to keep the model small.
#[cfg(not(loom))]
pub const STRIPES: usize = 8;
/// Reader counter stripes. Fewer under loom to keep the model small.
#[cfg(loom)]
pub const STRIPES: usize = 2;

#[repr(align(64))]
struct Stripe {
    readers: [AtomicUsize; 2],
}

/// The epoch and reader counters shared by readers and the writer.
pub struct Domain {
    epoch: AtomicUsize,
    stripes: [Stripe; STRIPES],
}

#[cfg(not(loom))]
macro_rules! domain_new {
    () => {
        Domain {
            epoch: AtomicUsize::new(0),
            stripes: [const {
                Stripe {
                    readers: [AtomicUsize::new(0), AtomicUsize::new(0)],
                }
            }; STRIPES],
        }
    };
}

impl Domain {
    /// A domain with no readers.
    #[cfg(not(loom))]
    pub const fn new() -> Self {
        domain_new!()
    }

    /// A domain with no readers.
    #[cfg(loom)]
    pub fn new() -> Self {
        Domain {
            epoch: AtomicUsize::new(0),
            stripes: core::array::from_fn(|_| Stripe {
                readers: [AtomicUsize::new(0), AtomicUsize::new(0)],
            }),
        }
    }

    /// Enters a read-side critical section on counter stripe `stripe`
    /// (taken modulo [`STRIPES`]); it lasts until the pin is dropped.
    pub fn pin(&self, stripe: usize) -> Pin<'_> {
        let stripe = &self.stripes[stripe % STRIPES];
        loop {
            let epoch = self.epoch.load(Ordering::Acquire);
            let counter = &stripe.readers[epoch & 1];
            counter.fetch_add(1, Ordering::Relaxed);
            // Store-load ordering against the writer's flip: either the
            // writer's counter check sees our increment, or we see its flip.
            fence(Ordering::SeqCst);
            if self.epoch.load(Ordering::Acquire) == epoch {
                return Pin { counter };
            }
            // The writer flipped between our two loads: being counted under
            // a stale parity would let it free what we are about to read.
            counter.fetch_sub(1, Ordering::Release);
        }
    }

    fn drained(&self, parity: usize) -> bool {
        self.stripes
            .iter()
            .all(|s| s.readers[parity & 1].load(Ordering::Acquire) == 0)
    }
}

impl Default for Domain {
    fn default() -> Self {
        Self::new()
    }
}

/// A reader's presence in a [`Domain`]; dropping it leaves.
pub struct Pin<'a> {
    counter: &'a AtomicUsize,
}

impl Drop for Pin<'_> {
    fn drop(&mut self) {
        // Release: everything this reader did happens before the writer's
        // free that observes the counter at zero.
        self.counter.fetch_sub(1, Ordering::Release);
    }
}

/// The writer's bags of retired garbage. One writer at a time.
pub struct Retired<G> {
    current: Vec<G>,
    waiting: Vec<G>,
}

impl<G> Retired<G> {
    /// Empty bags.
    pub const fn new() -> Self {
        Retired {
            current: Vec::new(),
            waiting: Vec::new(),
        }
    }

    /// Hands over `garbage`, already unreachable for new readers.
    pub fn retire(&mut self, garbage: G) {
        self.current.push(garbage);
    }

    /// Room to [`retire`](Self::retire) `additional` more items without
    /// allocating, so that a write can reserve it before it changes anything.
    pub fn reserve(
        &mut self,
        additional: usize,
    ) -> Result<(), alloc::collections::TryReserveError> {
        self.current.try_reserve(additional)
    }

    /// Garbage not freed yet.
    pub fn pending(&self) -> usize {
        self.current.len() + self.waiting.len()
    }

    /// Frees (passes to `free`) all garbage no reader can still see; never waits.
    pub fn collect(&mut self, domain: &Domain, mut free: impl FnMut(G)) {
        if !self.waiting.is_empty() {
            let previous = domain.epoch.load(Ordering::Relaxed).wrapping_sub(1);
            fence(Ordering::SeqCst);
            if !domain.drained(previous) {
                return;
            }
            self.waiting.drain(..).for_each(&mut free);
        }
        if self.current.is_empty() {
            return;
        }
        // The parity we flip to was seen drained after the last flip (the
        // waiting bag is empty), so no reader counted there holds old data.
        let old = domain.epoch.fetch_add(1, Ordering::AcqRel);
        // Pairs with the fence in `pin`: see there.
        fence(Ordering::SeqCst);
        core::mem::swap(&mut self.current, &mut self.waiting);
        if domain.drained(old) {
            self.waiting.drain(..).for_each(&mut free);
        }
    }

    /// Everything, regardless of readers: for teardown, when the caller has
    /// exclusive access.
    pub fn drain_all(&mut self, mut free: impl FnMut(G)) {
        self.waiting.drain(..).for_each(&mut free);
        self.current.drain(..).for_each(&mut free);
    }
}

impl<G> Default for Retired<G> {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn garbage_waits_for_every_reader_that_could_see_it() {
        let domain = Domain::new();
        let mut retired = Retired::new();
        let mut freed = Vec::new();
        let early = domain.pin(3);
        retired.retire(1);
        retired.collect(&domain, |g| freed.push(g));
        assert!(freed.is_empty());
        // A reader arriving after the flip cannot hold garbage 1.
        let late = domain.pin(3);
        retired.retire(2);
        retired.collect(&domain, |g| freed.push(g));
        assert!(freed.is_empty());
        drop(early);
        retired.collect(&domain, |g| freed.push(g));
        assert_eq!(freed, [1]);
        // Garbage 2 was retired while `late` was inside.
        retired.collect(&domain, |g| freed.push(g));
        assert_eq!(freed, [1]);
        assert_eq!(retired.pending(), 1);
        drop(late);
        retired.collect(&domain, |g| freed.push(g));
        assert_eq!(freed, [1, 2]);
        assert_eq!(retired.pending(), 0);
    }

    #[test]
    fn any_stripe_number_counts_the_reader() {
        // Stripes are taken modulo STRIPES: CPU numbers far beyond it
        // (and the largest one) still pin, and still hold garbage back.
        let domain = Domain::new();
        let mut retired = Retired::new();
        let mut freed = Vec::new();
        let pins = [STRIPES * STRIPES + 1, usize::MAX].map(|cpu| domain.pin(cpu));
        retired.retire(1);
        retired.collect(&domain, |g| freed.push(g));
        assert!(freed.is_empty());
        let [first, last] = pins;
        drop(first);
        retired.collect(&domain, |g| freed.push(g));
        assert!(freed.is_empty(), "the other reader is still inside");
        drop(last);
        retired.collect(&domain, |g| freed.push(g));
        assert_eq!(freed, [1]);
    }

    #[test]
    fn drain_all_frees_everything_whatever_the_readers() {
        let domain = Domain::new();
        let mut retired = Retired::new();
        let _reader = domain.pin(0);
        retired.retire(1);
        retired.collect(&domain, |_| panic!("a reader is inside"));
        retired.retire(2);
        // 1 waits for the reader, 2 is in the current bag.
        assert_eq!(retired.pending(), 2);
        let mut freed = Vec::new();
        retired.drain_all(|g| freed.push(g));
        assert_eq!(freed, [1, 2]);
        assert_eq!(retired.pending(), 0);
    }
}
