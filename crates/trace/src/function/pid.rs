//! Task-id sets for `set_ftrace_pid` and `set_event_pid`: a sparse bitmap
//! that writers test without locks and the control side changes in place.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::ptr;
use core::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};

/// Highest task id + 1 a list can hold (Linux's `PID_MAX_LIMIT`).
pub const PID_LIMIT: i32 = 1 << 22;
const CHUNK_BITS: usize = 16;
const CHUNK_WORDS: usize = (1 << CHUNK_BITS) / 64;
const CHUNKS: usize = (PID_LIMIT as usize) >> CHUNK_BITS;

type Chunk = [AtomicU64; CHUNK_WORDS];

/// A set of task ids. Chunks are allocated on first use and kept until the
/// list is dropped, so a lock-free reader never sees freed memory.
pub struct PidList {
    active: AtomicBool,
    chunks: Box<[AtomicPtr<Chunk>]>,
}

impl core::fmt::Debug for PidList {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_list().entries(self.pids()).finish()
    }
}

impl Default for PidList {
    fn default() -> Self {
        Self::new()
    }
}

/// A task id outside `0..PID_LIMIT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BadPid(pub i64);

impl core::fmt::Display for BadPid {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "invalid pid {} (must be 0..{})", self.0, PID_LIMIT)
    }
}

impl core::error::Error for BadPid {}

impl PidList {
    /// An empty, inactive list.
    pub fn new() -> Self {
        PidList {
            active: AtomicBool::new(false),
            chunks: (0..CHUNKS)
                .map(|_| AtomicPtr::new(ptr::null_mut()))
                .collect(),
        }
    }

    /// Whether filtering by this list is on (it has at least one id).
    #[inline(always)]
    pub(crate) fn is_active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }

    /// Whether `pid` is in the list.
    #[inline]
    pub fn contains(&self, pid: i32) -> bool {
        if !(0..PID_LIMIT).contains(&pid) {
            return false;
        }
        let pid = pid as usize;
        let chunk = self.chunks[pid >> CHUNK_BITS].load(Ordering::Acquire);
        if chunk.is_null() {
            return false;
        }
        let bit = pid & ((1 << CHUNK_BITS) - 1);
        // SAFETY: chunks are never freed while the list lives.
        let word = unsafe { &(*chunk)[bit / 64] };
        word.load(Ordering::Relaxed) & (1 << (bit % 64)) != 0
    }

    fn chunk_for(&self, pid: usize) -> &Chunk {
        let slot = &self.chunks[pid >> CHUNK_BITS];
        let mut chunk = slot.load(Ordering::Acquire);
        if chunk.is_null() {
            let fresh: Box<Chunk> = Box::new(core::array::from_fn(|_| AtomicU64::new(0)));
            let fresh = Box::into_raw(fresh);
            match slot.compare_exchange(ptr::null_mut(), fresh, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => chunk = fresh,
                Err(existing) => {
                    // SAFETY: `fresh` was never shared.
                    drop(unsafe { Box::from_raw(fresh) });
                    chunk = existing;
                }
            }
        }
        // SAFETY: non-null chunks live as long as the list.
        unsafe { &*chunk }
    }

    /// Adds ids (all validated first; nothing changes on error).
    pub fn add(&self, pids: &[i64]) -> Result<(), BadPid> {
        if let Some(bad) = pids.iter().find(|p| !(0..i64::from(PID_LIMIT)).contains(p)) {
            return Err(BadPid(*bad));
        }
        for &pid in pids {
            let pid = pid as usize;
            let bit = pid & ((1 << CHUNK_BITS) - 1);
            self.chunk_for(pid)[bit / 64].fetch_or(1 << (bit % 64), Ordering::AcqRel);
        }
        if !pids.is_empty() {
            self.active.store(true, Ordering::Release);
        }
        Ok(())
    }

    /// Removes ids (validated first).
    #[cfg(test)]
    pub(crate) fn remove(&self, pids: &[i64]) -> Result<(), BadPid> {
        if let Some(bad) = pids.iter().find(|p| !(0..i64::from(PID_LIMIT)).contains(p)) {
            return Err(BadPid(*bad));
        }
        for &pid in pids {
            let pid = pid as usize;
            let chunk = self.chunks[pid >> CHUNK_BITS].load(Ordering::Acquire);
            if !chunk.is_null() {
                let bit = pid & ((1 << CHUNK_BITS) - 1);
                // SAFETY: as in `contains`.
                unsafe { &(*chunk)[bit / 64] }.fetch_and(!(1 << (bit % 64)), Ordering::AcqRel);
            }
        }
        if self.pids().is_empty() {
            self.active.store(false, Ordering::Release);
        }
        Ok(())
    }

    /// Empties the list (filtering off).
    pub fn clear(&self) {
        self.active.store(false, Ordering::Release);
        for slot in self.chunks.iter() {
            let chunk = slot.load(Ordering::Acquire);
            if !chunk.is_null() {
                // SAFETY: as in `contains`.
                for word in unsafe { &*chunk }.iter() {
                    word.store(0, Ordering::Relaxed);
                }
            }
        }
    }

    /// The ids, ascending.
    pub(crate) fn pids(&self) -> Vec<i32> {
        let mut out = Vec::new();
        for (index, slot) in self.chunks.iter().enumerate() {
            let chunk = slot.load(Ordering::Acquire);
            if chunk.is_null() {
                continue;
            }
            // SAFETY: as in `contains`.
            for (w, word) in unsafe { &*chunk }.iter().enumerate() {
                let mut bits = word.load(Ordering::Relaxed);
                while bits != 0 {
                    let b = bits.trailing_zeros() as usize;
                    bits &= bits - 1;
                    out.push(((index << CHUNK_BITS) + w * 64 + b) as i32);
                }
            }
        }
        out
    }
}

impl Drop for PidList {
    fn drop(&mut self) {
        for slot in self.chunks.iter() {
            let chunk = slot.swap(ptr::null_mut(), Ordering::AcqRel);
            if !chunk.is_null() {
                // SAFETY: allocated by `chunk_for` with Box; no reader remains
                // (we have `&mut self`).
                drop(unsafe { Box::from_raw(chunk) });
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_remove_and_list() {
        let list = PidList::new();
        assert!(!list.is_active());
        list.add(&[5, 70000, 4_000_000]).unwrap();
        assert!(list.is_active());
        assert!(list.contains(5) && list.contains(70000) && list.contains(4_000_000));
        assert!(!list.contains(6) && !list.contains(-1));
        assert_eq!(list.pids(), alloc::vec![5, 70000, 4_000_000]);
        list.remove(&[70000]).unwrap();
        assert_eq!(list.pids(), alloc::vec![5, 4_000_000]);
        list.clear();
        assert!(!list.is_active());
        assert!(list.pids().is_empty());
    }

    #[test]
    fn bad_ids_change_nothing() {
        let list = PidList::new();
        list.add(&[1]).unwrap();
        assert_eq!(list.add(&[2, -3]), Err(BadPid(-3)));
        assert_eq!(
            list.add(&[i64::from(PID_LIMIT)]),
            Err(BadPid(i64::from(PID_LIMIT)))
        );
        assert_eq!(list.remove(&[1, 1 << 40]), Err(BadPid(1 << 40)));
        assert_eq!(list.pids(), alloc::vec![1]);
    }

    #[test]
    fn bad_pid_message_gives_the_range() {
        let error: &dyn core::error::Error = &BadPid(-3);
        assert_eq!(
            alloc::string::ToString::to_string(error),
            alloc::format!("invalid pid -3 (must be 0..{PID_LIMIT})")
        );
    }
}
