//! Per-CPU slots: one lock and one optional instance per possible CPU, the
//! shape every per-CPU structure here shares (timer bases, worker pools,
//! page caches). A CPU's hotplug steps create its instance and free it
//! later; in between, the CPU (or whoever takes over its work) reaches it
//! through its own lock, so CPUs never contend on each other's.

use alloc::boxed::Box;

use crate::sync::{Mutex, MutexGuard};

/// One slot per CPU, each holding that CPU's `T` while it exists.
///
/// ```
/// use hotkern_kernel::percpu::PerCpu;
///
/// let counters = PerCpu::new(2);
/// assert!(counters.create(1, || 0u64));
/// assert!(!counters.create(1, || 0), "already there");
/// assert_eq!(counters.with(1, |n| { *n += 1; *n }), Some(1));
/// assert_eq!(counters.with(0, |n| *n), None, "CPU 0 has none");
/// assert_eq!(counters.free(1), Some(1));
/// ```
pub struct PerCpu<T> {
    slots: Box<[Mutex<Option<T>>]>,
}

impl<T> PerCpu<T> {
    /// Empty slots for `cpus` CPUs.
    pub fn new(cpus: usize) -> Self {
        PerCpu {
            slots: (0..cpus).map(|_| Mutex::new(None)).collect(),
        }
    }

    /// Puts `make()` in `cpu`'s slot; false, calling nothing, if the slot
    /// is taken.
    pub fn create(&self, cpu: usize, make: impl FnOnce() -> T) -> bool {
        let mut slot = self.slots[cpu].lock();
        if slot.is_some() {
            return false;
        }
        *slot = Some(make());
        true
    }

    /// Empties `cpu`'s slot, giving back what it held.
    pub fn free(&self, cpu: usize) -> Option<T> {
        self.slots[cpu].lock().take()
    }

    /// Runs `f` on `cpu`'s instance under its lock; `None` if it has none.
    pub fn with<R>(&self, cpu: usize, f: impl FnOnce(&mut T) -> R) -> Option<R> {
        self.slots[cpu].lock().as_mut().map(f)
    }

    /// Locks `cpu`'s slot, for what [`PerCpu::with`] cannot say (giving a
    /// refused item back, creating in place).
    pub fn lock(&self, cpu: usize) -> MutexGuard<'_, Option<T>> {
        self.slots[cpu].lock()
    }

    /// Locks every slot, in CPU order, for a reading taken at one instant.
    pub fn lock_all(&self) -> impl Iterator<Item = MutexGuard<'_, Option<T>>> {
        self.slots.iter().map(|slot| slot.lock())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    #[test]
    fn slots_are_created_once_and_freed_once() {
        let slots = PerCpu::new(3);
        assert!(slots.create(2, || 'a'));
        assert!(!slots.create(2, || unreachable!("a taken slot calls nothing")));
        *slots.lock(0) = Some('b');
        let seen: Vec<_> = slots.lock_all().map(|slot| *slot).collect();
        assert_eq!(seen, [Some('b'), None, Some('a')]);
        assert_eq!(slots.free(2), Some('a'));
        assert_eq!(slots.free(2), None);
        assert_eq!(slots.with(0, |c| *c), Some('b'));
    }
}
