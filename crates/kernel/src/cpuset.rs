//! The lock-free holder of the kernel's online and active masks. CPUs read
//! both on every turn of their loop and whenever they place work, while
//! hotplug steps flip one CPU at a time, so each mask lives in one atomic
//! word, as Linux's `cpu_online_mask` is read without a lock. Whole sets go
//! in and out as cpuhp's [`CpuSet`], the one set type of the kernel.

use hotkern_cpuhp::{CpuId, CpuSet};

use crate::sync::{AtomicU64, Ordering};

/// The most CPUs a kernel can have: the bits of one atomic word.
pub const MAX_CPUS: usize = 64;

/// The [`CpuId`] of CPU number `index`. CPU numbers are below
/// [`MAX_CPUS`], so the conversion never truncates.
pub const fn cpu_id(index: usize) -> CpuId {
    CpuId(index as u32)
}

/// The word bit of `cpu`, or no bit if it is not a possible CPU.
pub(crate) fn bit(cpu: CpuId) -> u64 {
    if cpu.index() < MAX_CPUS {
        1 << cpu.index()
    } else {
        0
    }
}

/// The word of `set`'s possible CPUs.
pub(crate) fn bits(set: &CpuSet) -> u64 {
    set.iter().fold(0, |word, cpu| word | bit(cpu))
}

/// The set of a word's bits.
pub(crate) fn from_bits(mut rest: u64) -> CpuSet {
    let mut set = CpuSet::EMPTY;
    while rest != 0 {
        set.insert(CpuId(rest.trailing_zeros()));
        rest &= rest - 1;
    }
    set
}

/// A set of CPUs read and changed without a lock.
///
/// ```
/// use hotkern_cpuhp::CpuId;
/// use hotkern_kernel::cpuset::AtomicCpuSet;
///
/// let online = AtomicCpuSet::default();
/// online.set(CpuId(2), true);
/// assert!(online.contains(CpuId(2)) && !online.contains(CpuId(3)));
/// assert_eq!(online.load().iter().collect::<Vec<_>>(), [CpuId(2)]);
/// ```
#[derive(Default)]
pub struct AtomicCpuSet(AtomicU64);

impl AtomicCpuSet {
    /// The set now.
    pub fn load(&self) -> CpuSet {
        from_bits(self.0.load(Ordering::SeqCst))
    }

    /// The set now, read with a read-modify-write that changes nothing: it
    /// reads the latest value, so one side of a store-buffering pair (store
    /// something, then read the set; add yourself, then read the something)
    /// cannot miss the other, in loom's model too, which treats a `SeqCst`
    /// load as an acquire.
    pub fn load_latest(&self) -> CpuSet {
        from_bits(self.0.fetch_or(0, Ordering::SeqCst))
    }

    /// Whether `cpu` is in the set now.
    pub fn contains(&self, cpu: CpuId) -> bool {
        self.0.load(Ordering::SeqCst) & bit(cpu) != 0
    }

    /// Adds `cpu` (if `member`) or removes it; a CPU at or above
    /// [`MAX_CPUS`] is never a member.
    pub fn set(&self, cpu: CpuId, member: bool) {
        if member {
            self.0.fetch_or(bit(cpu), Ordering::SeqCst);
        } else {
            self.0.fetch_and(!bit(cpu), Ordering::SeqCst);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_go_in_and_out_one_at_a_time() {
        let mask = AtomicCpuSet::default();
        for cpu in [0, 3, 63, 64] {
            mask.set(CpuId(cpu), true);
        }
        mask.set(CpuId(3), false);
        assert_eq!(mask.load(), [0, 63].map(CpuId).into_iter().collect());
        assert!(mask.contains(CpuId(63)) && !mask.contains(CpuId(64)));
        assert!(!mask.contains(CpuId(3)) && !mask.contains(CpuId(u32::MAX)));
        assert_eq!(cpu_id(MAX_CPUS - 1), CpuId(63));
    }
}
