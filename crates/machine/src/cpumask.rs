//! A set of vCPU numbers, as Linux's `cpumask`, for machines of up to 64 vCPUs.

use core::fmt;

/// The most vCPUs a machine can have.
pub const MAX_CPUS: usize = 64;

/// A set of vCPU numbers below [`MAX_CPUS`].
///
/// ```
/// use hotkern_machine::CpuMask;
/// let mask = CpuMask::first(4).without(2);
/// assert_eq!(mask.iter().collect::<Vec<_>>(), [0, 1, 3]);
/// assert_eq!(mask.count(), 3);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CpuMask(u64);

impl CpuMask {
    /// The empty set.
    pub const EMPTY: CpuMask = CpuMask(0);

    /// The set of the given bits.
    pub const fn from_bits(bits: u64) -> Self {
        CpuMask(bits)
    }

    /// The raw bits.
    pub const fn bits(self) -> u64 {
        self.0
    }

    /// vCPUs `0..n`.
    pub const fn first(n: usize) -> Self {
        if n >= MAX_CPUS {
            CpuMask(u64::MAX)
        } else {
            CpuMask((1u64 << n) - 1)
        }
    }

    /// The set holding only `cpu` (empty if `cpu` is out of range).
    pub const fn one(cpu: usize) -> Self {
        if cpu < MAX_CPUS {
            CpuMask(1 << cpu)
        } else {
            CpuMask(0)
        }
    }

    /// Whether `cpu` is in the set.
    pub const fn contains(self, cpu: usize) -> bool {
        cpu < MAX_CPUS && self.0 & (1 << cpu) != 0
    }

    /// The set with `cpu` added.
    pub const fn with(self, cpu: usize) -> Self {
        CpuMask(self.0 | CpuMask::one(cpu).0)
    }

    /// The set with `cpu` removed.
    pub const fn without(self, cpu: usize) -> Self {
        CpuMask(self.0 & !CpuMask::one(cpu).0)
    }

    /// Members of both sets.
    pub const fn and(self, other: CpuMask) -> Self {
        CpuMask(self.0 & other.0)
    }

    /// Members of either set.
    pub const fn or(self, other: CpuMask) -> Self {
        CpuMask(self.0 | other.0)
    }

    /// Members of `self` not in `other`.
    pub const fn minus(self, other: CpuMask) -> Self {
        CpuMask(self.0 & !other.0)
    }

    /// How many vCPUs the set holds.
    pub const fn count(self) -> usize {
        self.0.count_ones() as usize
    }

    /// Whether the set is empty.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The lowest member.
    pub const fn lowest(self) -> Option<usize> {
        if self.0 == 0 {
            None
        } else {
            Some(self.0.trailing_zeros() as usize)
        }
    }

    /// Members in ascending order.
    pub fn iter(self) -> impl Iterator<Item = usize> {
        let mut rest = self.0;
        core::iter::from_fn(move || {
            if rest == 0 {
                return None;
            }
            let cpu = rest.trailing_zeros() as usize;
            rest &= rest - 1;
            Some(cpu)
        })
    }
}

impl FromIterator<usize> for CpuMask {
    fn from_iter<I: IntoIterator<Item = usize>>(iter: I) -> Self {
        iter.into_iter().fold(CpuMask::EMPTY, CpuMask::with)
    }
}

impl fmt::Debug for CpuMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CpuMask({self})")
    }
}

/// Linux's list format: `0-2,5`.
impl fmt::Display for CpuMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut cpus = self.iter().peekable();
        while let Some(start) = cpus.next() {
            let mut end = start;
            while cpus.peek() == Some(&(end + 1)) {
                end += 1;
                cpus.next();
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if end == start {
                write!(f, "{start}")?;
            } else {
                write!(f, "{start}-{end}")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn set_operations_agree_with_a_bool_array() {
        let a: CpuMask = [0, 3, 4, 63].into_iter().collect();
        let b: CpuMask = [3, 5].into_iter().collect();
        assert_eq!(a.and(b).iter().collect::<Vec<_>>(), [3]);
        assert_eq!(a.minus(b).iter().collect::<Vec<_>>(), [0, 4, 63]);
        assert_eq!(a.or(b).count(), 5);
        assert!(a.contains(63) && !a.contains(64) && !a.contains(1));
        assert_eq!(CpuMask::one(64), CpuMask::EMPTY);
        assert_eq!(CpuMask::first(64).count(), 64);
        assert_eq!(a.lowest(), Some(0));
        assert_eq!(CpuMask::EMPTY.lowest(), None);
    }

    #[test]
    fn display_uses_ranges() {
        let mask: CpuMask = [0, 1, 2, 5, 7, 8].into_iter().collect();
        assert_eq!(mask.to_string(), "0-2,5,7-8");
        assert_eq!(CpuMask::EMPTY.to_string(), "");
    }
}
