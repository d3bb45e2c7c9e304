//! The one place that chooses the locks and atomics of the shared kernel,
//! so that the mechanisms above it are written once:
//!
//! * `--cfg loom`: `loom`'s, so that its model checker explores every
//!   interleaving of the real code (the machine's `tests/loom.rs`), behind
//!   `parking_lot`'s API. Only `Mutex` and `Condvar`: what the models
//!   reach.
//! * feature `std`: `parking_lot`'s `Mutex`, `RwLock` and `Condvar`,
//!   which put a waiting thread to sleep: right where vCPUs are OS threads.
//! * neither: [`lock_api`]'s `Mutex` and `RwLock` over the spinlocks of
//!   this module ([`RawSpinlock`], [`RawSpinRwLock`]), as a bare-metal
//!   kernel has nothing to sleep on. No condvar: such a kernel waits by
//!   other means.
//!
//! Atomics are `core`'s, or `loom`'s under `--cfg loom`.
//!
//! ```
//! use hotkern_kernel::sync::Mutex;
//!
//! let counter = Mutex::new(0u64);
//! *counter.lock() += 1;
//! assert_eq!(*counter.lock(), 1);
//! ```

mod spin;

pub use spin::{RawSpinRwLock, RawSpinlock};

#[cfg(loom)]
pub use loom::sync::atomic::{fence, AtomicBool, AtomicI64, AtomicPtr, AtomicU64, AtomicUsize};

#[cfg(not(loom))]
pub use core::sync::atomic::{fence, AtomicBool, AtomicI64, AtomicPtr, AtomicU64, AtomicUsize};

/// One turn of a wait on another CPU's store: a pause on hardware, a
/// yield under loom (whose model would otherwise spin without end).
pub fn spin_wait() {
    #[cfg(loom)]
    loom::thread::yield_now();
    #[cfg(not(loom))]
    core::hint::spin_loop();
}

pub use core::sync::atomic::Ordering;

#[cfg(loom)]
mod model;

#[cfg(loom)]
pub use model::{Condvar, Mutex, MutexGuard};

#[cfg(all(not(loom), feature = "std"))]
pub use parking_lot::{Condvar, Mutex, MutexGuard, RwLock};

/// A mutual-exclusion lock that spins while another CPU holds it.
#[cfg(all(not(loom), not(feature = "std")))]
pub type Mutex<T> = lock_api::Mutex<RawSpinlock, T>;

/// The guard of a [`Mutex`]: the lock is held until it drops.
#[cfg(all(not(loom), not(feature = "std")))]
pub type MutexGuard<'a, T> = lock_api::MutexGuard<'a, RawSpinlock, T>;

/// A readers-writer lock that spins while it cannot be taken.
#[cfg(all(not(loom), not(feature = "std")))]
pub type RwLock<T> = lock_api::RwLock<RawSpinRwLock, T>;
