//! The locks and atomics of the grace-period machinery: `parking_lot` and
//! `std` normally, `loom`'s under `--cfg loom` so that its model checker
//! can explore every interleaving of the quiescent-state handshake
//! (`tests/loom.rs`). Only the API the machine uses is provided.

#[cfg(not(loom))]
pub(crate) use parking_lot::{Condvar, Mutex};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize};

#[cfg(loom)]
mod model {
    use core::ops::{Deref, DerefMut};
    use std::time::Instant;

    /// A mutex with `parking_lot`'s API over loom's.
    #[derive(Debug, Default)]
    pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

    /// Its guard; `None` only while a condvar wait holds the real guard.
    pub(crate) struct MutexGuard<'a, T>(Option<loom::sync::MutexGuard<'a, T>>);

    impl<T> Mutex<T> {
        pub(crate) fn new(value: T) -> Self {
            Mutex(loom::sync::Mutex::new(value))
        }

        pub(crate) fn lock(&self) -> MutexGuard<'_, T> {
            MutexGuard(Some(self.0.lock().unwrap_or_else(|e| e.into_inner())))
        }
    }

    impl<T> Deref for MutexGuard<'_, T> {
        type Target = T;
        fn deref(&self) -> &T {
            self.0.as_deref().expect("guard held")
        }
    }

    impl<T> DerefMut for MutexGuard<'_, T> {
        fn deref_mut(&mut self) -> &mut T {
            self.0.as_deref_mut().expect("guard held")
        }
    }

    /// A condvar with `parking_lot`'s API over loom's.
    #[derive(Debug, Default)]
    pub(crate) struct Condvar(loom::sync::Condvar);

    impl Condvar {
        pub(crate) fn new() -> Self {
            Condvar(loom::sync::Condvar::new())
        }

        pub(crate) fn wait<T>(&self, guard: &mut MutexGuard<'_, T>) {
            if let Some(inner) = guard.0.take() {
                guard.0 = Some(self.0.wait(inner).unwrap_or_else(|e| e.into_inner()));
            }
        }

        /// Loom has no clock: a timed wait is an untimed one, which never
        /// times out (returns false).
        pub(crate) fn wait_until<T>(
            &self,
            guard: &mut MutexGuard<'_, T>,
            _deadline: Instant,
        ) -> bool {
            self.wait(guard);
            false
        }

        pub(crate) fn notify_all(&self) {
            self.0.notify_all();
        }

        pub(crate) fn notify_one(&self) {
            self.0.notify_one();
        }
    }
}

#[cfg(loom)]
pub(crate) use model::{Condvar, Mutex};
