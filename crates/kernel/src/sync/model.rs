//! `loom`'s mutex and condvar behind `parking_lot`'s API (a `lock` that
//! cannot fail, a condvar that waits on `&mut` guard), so the code the
//! model checks is the code that runs. Only the API the models reach.

use core::ops::{Deref, DerefMut};
use std::time::Instant;

/// A mutex with `parking_lot`'s API over loom's.
#[derive(Debug, Default)]
pub struct Mutex<T>(loom::sync::Mutex<T>);

/// Its guard; `None` only while a condvar wait holds the real guard.
pub struct MutexGuard<'a, T>(Option<loom::sync::MutexGuard<'a, T>>);

impl<T> Mutex<T> {
    /// An unlocked mutex holding `value`.
    pub fn new(value: T) -> Self {
        Mutex(loom::sync::Mutex::new(value))
    }

    /// Takes the lock; a holder's panic does not poison it, as in
    /// `parking_lot`.
    pub fn lock(&self) -> MutexGuard<'_, T> {
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
pub struct Condvar(loom::sync::Condvar);

impl Condvar {
    /// A condvar nobody waits on.
    pub fn new() -> Self {
        Condvar(loom::sync::Condvar::new())
    }

    /// Releases `guard`'s lock, waits for a notification, takes it again.
    pub fn wait<T>(&self, guard: &mut MutexGuard<'_, T>) {
        if let Some(inner) = guard.0.take() {
            guard.0 = Some(self.0.wait(inner).unwrap_or_else(|e| e.into_inner()));
        }
    }

    /// Loom has no clock: a timed wait is an untimed one, which never
    /// times out (returns false).
    pub fn wait_until<T>(&self, guard: &mut MutexGuard<'_, T>, _deadline: Instant) -> bool {
        self.wait(guard);
        false
    }

    /// Wakes every waiter.
    pub fn notify_all(&self) {
        self.0.notify_all();
    }

    /// Wakes one waiter.
    pub fn notify_one(&self) {
        self.0.notify_one();
    }
}
