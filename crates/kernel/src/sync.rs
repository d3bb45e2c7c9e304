//! The one place that chooses the locks and atomics of the shared kernel,
//! so that the mechanisms above it are written once:
//!
//! * `--cfg loom`: `loom`'s, so that its model checker explores every
//!   interleaving of the real code (the machine's `tests/loom.rs`), behind
//!   `parking_lot`'s API. Only `Mutex` and `Condvar`: what the models
//!   reach.
//! * feature `parking_lot`: `parking_lot`'s `Mutex`, `RwLock` and
//!   `Condvar`, which put a waiting thread to sleep: right where vCPUs are
//!   OS threads.
//! * feature `spin` (or no feature): [`lock_api`]'s `Mutex` and `RwLock`
//!   over the spinlocks of this module ([`RawSpinlock`], [`RawSpinRwLock`]),
//!   as a bare-metal kernel has nothing to sleep on. No condvar: such a
//!   kernel waits by other means.
//!
//! The choice is the user's and is never made behind its back: cargo
//! unifies features over a build, so if one crate asked for `spin` and
//! another for `parking_lot`, the build stops with a `compile_error!`
//! naming both rather than giving the first crate locks it did not ask for.
//! A user names its kind in `Cargo.toml`
//! (`features = ["spin"]` or `["parking_lot"]`) and can check what it got
//! with [`LOCKS`].
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

#[cfg(all(feature = "spin", feature = "parking_lot"))]
compile_error!(
    "hotkern-kernel: both the `spin` and the `parking_lot` feature are on. Cargo \
     unifies features over the build, so a crate that asked for one got both: \
     the kernel's mechanisms can use only one kind of lock. Build the crates \
     that want spinlocks and the ones that want parking_lot separately."
);

/// The kinds of lock [`sync`](self) can give the kernel's mechanisms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockKind {
    /// [`RawSpinlock`] and [`RawSpinRwLock`] under `lock_api`.
    Spin,
    /// `parking_lot`'s, which sleep.
    ParkingLot,
    /// `loom`'s model (`--cfg loom`).
    Loom,
}

/// The kind of lock this build of the crate uses.
///
/// A user can pin it at compile time, so that a change of features
/// anywhere in the build cannot change it unseen:
///
/// ```
/// use hotkern_kernel::sync::{LockKind, LOCKS};
/// const _: () = assert!(matches!(LOCKS, LockKind::Spin | LockKind::ParkingLot));
/// ```
pub const LOCKS: LockKind = if cfg!(loom) {
    LockKind::Loom
} else if cfg!(feature = "parking_lot") {
    LockKind::ParkingLot
} else {
    LockKind::Spin
};

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

#[cfg(all(not(loom), feature = "parking_lot"))]
pub use parking_lot::{Condvar, Mutex, MutexGuard, RwLock};

/// A mutual-exclusion lock that spins while another CPU holds it.
#[cfg(all(not(loom), not(feature = "parking_lot")))]
pub type Mutex<T> = lock_api::Mutex<RawSpinlock, T>;

/// The guard of a [`Mutex`]: the lock is held until it drops.
#[cfg(all(not(loom), not(feature = "parking_lot")))]
pub type MutexGuard<'a, T> = lock_api::MutexGuard<'a, RawSpinlock, T>;

/// A readers-writer lock that spins while it cannot be taken.
#[cfg(all(not(loom), not(feature = "parking_lot")))]
pub type RwLock<T> = lock_api::RwLock<RawSpinRwLock, T>;
