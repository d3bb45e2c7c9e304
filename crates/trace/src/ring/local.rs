//! Atomics for the ring buffer, and `LocalU64`: a counter that only one CPU
//! (one thread and the signal handlers that interrupt it) ever modifies.
//!
//! The kernel's `local_t` idea: a read-modify-write that needs to be atomic
//! only against interrupts on the same CPU can use an instruction without the
//! bus lock, because an interrupt is taken between instructions. On x86-64
//! `add` and `cmpxchg` without `lock` are such instructions and cost a few
//! cycles instead of ~20. Other threads may still *load* the value (statistics,
//! the reader), which is an ordinary aligned 64-bit load.
//!
//! Under `loom`, and on other architectures, the operations fall back to
//! sequentially consistent atomics, which are strictly stronger.

#[cfg(not(loom))]
#[allow(unused_imports)]
pub(crate) use core::sync::atomic::{
    fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize,
};
#[cfg(loom)]
#[allow(unused_imports)]
pub(crate) use loom::sync::atomic::{
    fence, AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize,
};

pub(crate) use core::sync::atomic::Ordering;

/// A 64-bit value modified only by its own CPU (and code nested on it).
#[derive(Debug, Default)]
#[repr(transparent)]
pub(crate) struct LocalU64(AtomicU64);

impl LocalU64 {
    #[cfg(not(loom))]
    pub(crate) const fn new(value: u64) -> Self {
        LocalU64(AtomicU64::new(value))
    }

    #[cfg(loom)]
    pub(crate) fn new(value: u64) -> Self {
        LocalU64(AtomicU64::new(value))
    }

    /// Loads the value (from any thread).
    #[inline(always)]
    pub(crate) fn load(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    /// Stores a value (owning CPU only).
    #[inline(always)]
    pub(crate) fn store(&self, value: u64) {
        self.0.store(value, Ordering::Release)
    }

    /// Adds `delta` (owning CPU only); atomic against nested writers.
    #[inline(always)]
    pub(crate) fn add(&self, delta: u64) {
        #[cfg(all(target_arch = "x86_64", not(loom), not(miri)))]
        // SAFETY: the pointer is valid and aligned; a non-locked `add` is a
        // single instruction, so a signal handler on this thread sees either
        // the old or the new value. Only this CPU writes the location.
        unsafe {
            core::arch::asm!(
                "add qword ptr [{p}], {d}",
                p = in(reg) self.0.as_ptr(),
                d = in(reg) delta,
                options(nostack),
            );
        }
        #[cfg(not(all(target_arch = "x86_64", not(loom), not(miri))))]
        {
            self.0.fetch_add(delta, Ordering::SeqCst);
        }
    }

    /// Adds `delta` and returns the previous value (owning CPU only).
    #[inline(always)]
    pub(crate) fn fetch_add(&self, delta: u64) -> u64 {
        #[cfg(all(target_arch = "x86_64", not(loom), not(miri)))]
        {
            let previous: u64;
            // SAFETY: as in `add`; `xadd` without `lock` is one instruction.
            unsafe {
                core::arch::asm!(
                    "xadd qword ptr [{p}], {v}",
                    p = in(reg) self.0.as_ptr(),
                    v = inout(reg) delta => previous,
                    options(nostack),
                );
            }
            previous
        }
        #[cfg(not(all(target_arch = "x86_64", not(loom), not(miri))))]
        {
            self.0.fetch_add(delta, Ordering::SeqCst)
        }
    }

    /// Subtracts `delta` (owning CPU only).
    #[inline(always)]
    pub(crate) fn sub(&self, delta: u64) {
        self.add(delta.wrapping_neg());
    }

    /// Compare-and-exchange (owning CPU only); `Err` carries the current value.
    #[inline(always)]
    pub(crate) fn compare_exchange(&self, current: u64, new: u64) -> Result<u64, u64> {
        #[cfg(all(target_arch = "x86_64", not(loom), not(miri)))]
        {
            let previous: u64;
            // SAFETY: as in `add`; `cmpxchg` without `lock` is one instruction.
            unsafe {
                core::arch::asm!(
                    "cmpxchg qword ptr [{p}], {n}",
                    p = in(reg) self.0.as_ptr(),
                    n = in(reg) new,
                    inout("rax") current => previous,
                    options(nostack),
                );
            }
            if previous == current {
                Ok(previous)
            } else {
                Err(previous)
            }
        }
        #[cfg(not(all(target_arch = "x86_64", not(loom), not(miri))))]
        {
            self.0
                .compare_exchange(current, new, Ordering::SeqCst, Ordering::SeqCst)
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn local_operations_behave_like_atomics() {
        let value = LocalU64::new(5);
        value.add(10);
        assert_eq!(value.load(), 15);
        assert_eq!(value.fetch_add(2), 15);
        assert_eq!(value.fetch_add(1), 17);
        value.sub(3);
        value.sub(3);
        assert_eq!(value.load(), 12);
        assert_eq!(value.compare_exchange(12, 40), Ok(12));
        assert_eq!(value.compare_exchange(12, 50), Err(40));
        assert_eq!(value.load(), 40);
        value.store(7);
        assert_eq!(value.load(), 7);
    }
}
