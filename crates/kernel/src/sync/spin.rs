//! Spinlocks for a kernel with nothing to sleep on: a test-and-test-and-set
//! mutex and a readers-writer lock, both [`lock_api`] raw locks. A waiter
//! reads the lock word until it looks free and only then tries to take it,
//! so waiting CPUs spin in their own caches instead of bouncing the line
//! with failed writes (the TTAS lock of Herlihy and Shavit, "The Art of
//! Multiprocessor Programming", chapter 7).

use core::hint::spin_loop;
use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use lock_api::{GuardSend, RawMutex, RawRwLock};

/// A test-and-test-and-set spinlock, for [`lock_api::Mutex`].
///
/// ```
/// use hotkern_kernel::sync::RawSpinlock;
///
/// let counter = lock_api::Mutex::<RawSpinlock, u64>::new(0);
/// *counter.lock() += 1;
/// assert_eq!(*counter.lock(), 1);
/// ```
#[derive(Debug)]
pub struct RawSpinlock {
    locked: AtomicBool,
}

// SAFETY: `try_lock` succeeds only by swapping `locked` from false to true,
// so at most one holder exists until `unlock` stores false again; the
// Acquire there pairs with the Release in `unlock`, so the next holder sees
// everything the previous one wrote under the lock.
unsafe impl RawMutex for RawSpinlock {
    // A `const` is the trait's way of giving an initial value: each use is
    // a fresh lock, which is what is wanted.
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = RawSpinlock {
        locked: AtomicBool::new(false),
    };

    type GuardMarker = GuardSend;

    fn lock(&self) {
        while !self.try_lock() {
            // Test before the next test-and-set: wait with plain reads.
            while self.locked.load(Ordering::Relaxed) {
                spin_loop();
            }
        }
    }

    fn try_lock(&self) -> bool {
        // Acquire: pairs with the Release in `unlock`.
        !self.locked.load(Ordering::Relaxed) && !self.locked.swap(true, Ordering::Acquire)
    }

    unsafe fn unlock(&self) {
        // Release: pairs with the Acquire in `try_lock`.
        self.locked.store(false, Ordering::Release);
    }

    fn is_locked(&self) -> bool {
        self.locked.load(Ordering::Relaxed)
    }
}

/// The writer's bit of [`RawSpinRwLock`]'s word; each reader adds
/// [`READER`].
const WRITER: usize = 1;
const READER: usize = 2;

/// A readers-writer spinlock, for [`lock_api::RwLock`]: one word holding
/// the reader count and a writer bit. Readers that keep arriving can starve
/// a writer; it is meant for data read far more often than written, held
/// briefly.
#[derive(Debug)]
pub struct RawSpinRwLock {
    state: AtomicUsize,
}

impl RawSpinRwLock {
    /// Waits with plain reads until `free` holds of the word.
    fn wait_until(&self, free: impl Fn(usize) -> bool) {
        while !free(self.state.load(Ordering::Relaxed)) {
            spin_loop();
        }
    }
}

// SAFETY: a writer takes the word only from 0 (no reader, no writer) and
// readers add themselves only while the writer bit is clear, both by
// compare-and-swap, so a writer excludes everyone and readers exclude
// writers. Acquire on taking pairs with Release on letting go, so a holder
// sees what earlier writers wrote.
unsafe impl RawRwLock for RawSpinRwLock {
    // As for `RawSpinlock::INIT`: each use is a fresh lock.
    #[allow(clippy::declare_interior_mutable_const)]
    const INIT: Self = RawSpinRwLock {
        state: AtomicUsize::new(0),
    };

    type GuardMarker = GuardSend;

    fn lock_shared(&self) {
        while !self.try_lock_shared() {
            self.wait_until(|state| state & WRITER == 0);
        }
    }

    fn try_lock_shared(&self) -> bool {
        let state = self.state.load(Ordering::Relaxed);
        // Acquire: pairs with the Release in `unlock_exclusive`.
        state & WRITER == 0
            && self
                .state
                .compare_exchange_weak(state, state + READER, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
    }

    unsafe fn unlock_shared(&self) {
        // Release: pairs with the Acquire in `try_lock_exclusive`, so the
        // next writer comes after this reader's reads.
        self.state.fetch_sub(READER, Ordering::Release);
    }

    fn lock_exclusive(&self) {
        while !self.try_lock_exclusive() {
            self.wait_until(|state| state == 0);
        }
    }

    fn try_lock_exclusive(&self) -> bool {
        // Acquire: pairs with the Release in `unlock_shared` and
        // `unlock_exclusive`.
        self.state
            .compare_exchange(0, WRITER, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    unsafe fn unlock_exclusive(&self) {
        // Release: pairs with the Acquire in `try_lock_shared` and
        // `try_lock_exclusive`. No reader joined meanwhile (the writer bit
        // kept them out), so the word is exactly WRITER.
        self.state.store(0, Ordering::Release);
    }

    fn is_locked(&self) -> bool {
        self.state.load(Ordering::Relaxed) != 0
    }

    fn is_locked_exclusive(&self) -> bool {
        self.state.load(Ordering::Relaxed) & WRITER != 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::thread;

    type SpinMutex<T> = lock_api::Mutex<RawSpinlock, T>;
    type SpinRwLock<T> = lock_api::RwLock<RawSpinRwLock, T>;

    const THREADS: u64 = 4;
    const ROUNDS: u64 = 20_000;

    #[test]
    fn contending_threads_lose_no_increment() {
        let counter = SpinMutex::new(0u64);
        thread::scope(|scope| {
            for _ in 0..THREADS {
                scope.spawn(|| {
                    for _ in 0..ROUNDS {
                        // A read, then a write: a lock letting two holders
                        // in at once would lose increments.
                        let mut guard = counter.lock();
                        let seen = *guard;
                        *guard = seen + 1;
                    }
                });
            }
        });
        assert_eq!(counter.into_inner(), THREADS * ROUNDS);
    }

    #[test]
    fn a_held_lock_refuses_a_second_holder() {
        let lock = SpinMutex::new(());
        let guard = lock.lock();
        assert!(lock.is_locked() && lock.try_lock().is_none());
        drop(guard);
        assert!(!lock.is_locked() && lock.try_lock().is_some());
    }

    #[test]
    fn writers_exclude_everyone_and_readers_share() {
        let lock = SpinRwLock::new(0u64);
        {
            let first = lock.read();
            let second = lock.try_read().expect("readers share");
            assert!(lock.try_write().is_none(), "readers keep a writer out");
            assert_eq!(*first + *second, 0);
        }
        {
            let _writer = lock.write();
            assert!(lock.is_locked_exclusive());
            assert!(lock.try_read().is_none() && lock.try_write().is_none());
        }
        assert!(!lock.is_locked());
    }

    #[test]
    fn contending_writers_and_readers_see_whole_updates() {
        // Two words written together: a reader seeing them differ would
        // have overlapped a writer.
        let pair = SpinRwLock::new((0u64, 0u64));
        thread::scope(|scope| {
            for _ in 0..THREADS / 2 {
                scope.spawn(|| {
                    for _ in 0..ROUNDS {
                        let mut guard = pair.write();
                        guard.0 += 1;
                        guard.1 = guard.0;
                    }
                });
                scope.spawn(|| {
                    for _ in 0..ROUNDS {
                        let guard = pair.read();
                        assert_eq!(guard.0, guard.1);
                    }
                });
            }
        });
        assert_eq!(
            pair.into_inner(),
            (THREADS / 2 * ROUNDS, THREADS / 2 * ROUNDS)
        );
    }
}
