//! Atomics the lock-free read side uses: `core`'s normally, `loom`'s when the
//! crate is built for the loom model (`--cfg loom`), so that the model explores
//! every interleaving of the real code rather than of a copy.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicPtr, AtomicU64, AtomicU8, AtomicUsize, Ordering};

#[cfg(not(loom))]
pub(crate) use core::sync::atomic::{fence, AtomicPtr, AtomicU64, AtomicU8, AtomicUsize, Ordering};
