//! Placing a task, work item, timer or RCU callback on a CPU, with one
//! fallback policy for every platform.
//!
//! An item is offered to the CPU it prefers, then to each CPU after that
//! one in the candidate set, wrapping round, until one takes it (a run
//! queue closes when its CPU leaves the active mask, a worker pool unbinds
//! and a timer base is disabled when it goes offline). If none does, the
//! item waits in the [`Limbo`] until a CPU becomes active, and everything
//! there is placed again then ([`StepKernel::cpus_activated`](crate::steps::StepKernel::cpus_activated)).
//!
//! Why wait instead of running the item where it is: the caller may be
//! the hotplug controller inside a stop-machine with interrupts off, or a
//! dying CPU in its teardown. A job run there runs on a CPU it was not
//! meant for, in a context it was not written for, and before its time
//! for a timer; a task cannot run there at all. Linux never reaches this
//! point, since its last CPU cannot go down: a dying CPU's work goes to
//! its pool's other workers, its timers to the CPU running the teardown
//! (`timers_dead_cpu`), its tasks to an active CPU (`migrate_tasks`). Nor
//! does hotkern, with CPU 0 online throughout; the limbo is what keeps
//! an item safe should every candidate refuse it for a moment (a bulk
//! operation's CPUs are still in the online mask while their pools
//! unbind), instead of a panic or a job run in the wrong place.
//!
//! RCU callbacks follow the same policy ([`crate::rcu::callbacks`]): an
//! online CPU's list, else the limbo, where a callback runs nowhere, and
//! asks for its grace period again once placed. Waiting for a grace
//! period and running it in place would block where Linux's `call_rcu`
//! never does, in the same contexts.
//!
//! ```
//! use hotkern_cpuhp::{CpuId, CpuSet};
//! use hotkern_kernel::placement::place;
//! // CPU 2 is preferred but refuses; CPU 3, after it, takes the item.
//! let taken = place(2, CpuSet::range(0, 4), "job", |cpu, item| {
//!     if cpu == 2 { Err(item) } else { Ok(()) }
//! });
//! assert_eq!(taken, Ok(3));
//! ```

use alloc::vec::Vec;

use hotkern_cpuhp::CpuSet;

use crate::rcu::callbacks::Callback;
use crate::sync::{AtomicUsize, Mutex, Ordering};
use crate::timer::Timer;
use crate::workqueue::Work;

/// Offers `item` to `preferred`, then to each CPU of `candidates` after
/// it, wrapping round (`preferred` is asked first whether or not it is a
/// candidate). Returns the CPU whose `offer` took it, or the item back if
/// none did.
pub fn place<I>(
    preferred: usize,
    candidates: CpuSet,
    item: I,
    mut offer: impl FnMut(usize, I) -> Result<(), I>,
) -> Result<usize, I> {
    let mut item = match offer(preferred, item) {
        Ok(()) => return Ok(preferred),
        Err(back) => back,
    };
    let after = candidates
        .iter()
        .map(|cpu| cpu.index())
        .filter(|&cpu| cpu > preferred);
    let before = candidates
        .iter()
        .map(|cpu| cpu.index())
        .filter(|&cpu| cpu < preferred);
    for cpu in after.chain(before) {
        match offer(cpu, item) {
            Ok(()) => return Ok(cpu),
            Err(back) => item = back,
        }
    }
    Err(item)
}

/// Something no CPU could take, waiting for one to become active.
pub enum Waiting<J, T> {
    /// A task.
    Task(T),
    /// A work item.
    Work(Work<J>),
    /// A timer.
    Timer(Timer<J>),
    /// An RCU callback.
    Callback(Callback<J>),
}

/// Where what no CPU could take waits.
pub struct Limbo<J, T> {
    waiting: Mutex<Vec<Waiting<J, T>>>,
    /// How many wait, readable without the lock: placing from a hot path
    /// asks whether anything waits at every item, and nearly always
    /// nothing does.
    count: AtomicUsize,
}

impl<J, T> Default for Limbo<J, T> {
    fn default() -> Self {
        Limbo::new()
    }
}

impl<J, T> Limbo<J, T> {
    /// An empty limbo.
    #[cfg(not(loom))]
    pub const fn new() -> Limbo<J, T> {
        Limbo {
            waiting: Mutex::new(Vec::new()),
            count: AtomicUsize::new(0),
        }
    }

    /// An empty limbo.
    #[cfg(loom)]
    pub fn new() -> Limbo<J, T> {
        Limbo {
            waiting: Mutex::new(Vec::new()),
            count: AtomicUsize::new(0),
        }
    }

    /// Keeps `item` until [`take`](Limbo::take).
    pub fn keep(&self, item: Waiting<J, T>) {
        let mut waiting = self.waiting.lock();
        waiting.push(item);
        // Under the lock, so that the count never says less than waits
        // once `keep` returned (Relaxed: the lock orders it).
        self.count.store(waiting.len(), Ordering::Relaxed);
    }

    /// Everything waiting, in the order it came; the limbo is empty after.
    pub fn take(&self) -> Vec<Waiting<J, T>> {
        let mut waiting = self.waiting.lock();
        self.count.store(0, Ordering::Relaxed);
        core::mem::take(&mut *waiting)
    }

    /// How many items wait (a snapshot: others may keep and take
    /// meanwhile).
    pub fn len(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many RCU callbacks wait (a snapshot, as [`len`](Limbo::len)).
    pub fn callbacks(&self) -> usize {
        let waiting = self.waiting.lock();
        let is_callback = |item: &&Waiting<J, T>| matches!(item, Waiting::Callback(_));
        waiting.iter().filter(is_callback).count()
    }
}

#[cfg(test)]
mod tests {
    use alloc::vec;

    use hotkern_cpuhp::CpuId;

    use super::*;

    fn order(preferred: usize, candidates: &[u32]) -> Vec<usize> {
        let mut asked = Vec::new();
        let set: CpuSet = candidates.iter().map(|&cpu| CpuId(cpu)).collect();
        let refused = place(preferred, set, (), |cpu, item| {
            asked.push(cpu);
            Err(item)
        });
        assert_eq!(refused, Err(()));
        asked
    }

    #[test]
    fn the_preferred_cpu_first_then_the_ones_after_it_wrapping() {
        assert_eq!(order(2, &[0, 1, 2, 3, 5]), vec![2, 3, 5, 0, 1]);
        // A preferred CPU outside the set is still asked, once.
        assert_eq!(order(4, &[1, 6]), vec![4, 6, 1]);
        assert_eq!(order(0, &[]), vec![0]);
    }

    #[test]
    fn the_first_taker_gets_it_and_no_one_after() {
        let set = CpuSet::range(0, 4);
        let mut asked = Vec::new();
        let taken = place(3, set, 7u32, |cpu, item| {
            asked.push(cpu);
            if cpu == 1 {
                Ok(())
            } else {
                Err(item)
            }
        });
        assert_eq!(taken, Ok(1));
        assert_eq!(asked, vec![3, 0, 1]);
    }

    #[test]
    fn the_limbo_gives_back_everything_in_order_once() {
        let limbo: Limbo<u32, u32> = Limbo::new();
        limbo.keep(Waiting::Task(1));
        limbo.keep(Waiting::Work(Work { id: 2, job: 20 }));
        assert_eq!(limbo.len(), 2);
        assert!(!limbo.is_empty());
        let taken = limbo.take();
        assert!(matches!(
            taken[..],
            [Waiting::Task(1), Waiting::Work(Work { id: 2, .. })]
        ));
        assert!(limbo.is_empty());
    }
}
