//! Allocation that reports failure instead of aborting. A write must leave
//! everything as it was when memory runs out, so every allocation on the
//! write path goes through here (or `try_reserve`) before anything changes.

use alloc::alloc::{alloc, Layout};
use alloc::boxed::Box;
use alloc::vec::Vec;
use core::ptr::NonNull;

use crate::error::PhysmemError;

/// `Box::new`, or [`PhysmemError::OutOfMemory`] (dropping `value`).
pub(crate) fn boxed<T>(value: T) -> Result<Box<T>, PhysmemError> {
    try_box(value).map_err(|_| PhysmemError::OutOfMemory)
}

/// `Box::new`, or `value` back when there is no memory for it.
pub(crate) fn try_box<T>(value: T) -> Result<Box<T>, T> {
    let layout = Layout::new::<T>();
    if layout.size() == 0 {
        // A zero-sized box allocates nothing.
        return Ok(Box::new(value));
    }
    // SAFETY: the layout has a non-zero size.
    let Some(raw) = NonNull::new(unsafe { alloc(layout) }.cast::<T>()) else {
        return Err(value);
    };
    // SAFETY: freshly allocated with `T`'s layout from the global allocator,
    // which is what `Box` frees with.
    unsafe {
        raw.as_ptr().write(value);
        Ok(Box::from_raw(raw.as_ptr()))
    }
}

/// An empty vector with room for exactly `capacity` items.
pub(crate) fn try_vec<T>(capacity: usize) -> Result<Vec<T>, PhysmemError> {
    let mut vec = Vec::new();
    vec.try_reserve_exact(capacity)
        .map_err(|_| PhysmemError::OutOfMemory)?;
    Ok(vec)
}

/// Room for `additional` more items in `vec`.
pub(crate) fn reserve<T>(vec: &mut Vec<T>, additional: usize) -> Result<(), PhysmemError> {
    vec.try_reserve(additional)
        .map_err(|_| PhysmemError::OutOfMemory)
}
