//! CPU numbers and CPU sets (the engine's `cpumask`).

use core::fmt;

/// Highest number of CPUs a [`CpuSet`] (the default capacity) can hold.
pub const MAX_CPUS: usize = DEFAULT_WORDS * 64;

/// 64-bit words in a [`CpuSet`]: the capacity every type of this crate has
/// when its `WORDS` parameter is not named.
pub const DEFAULT_WORDS: usize = 4;

/// A logical CPU number, below the capacity of the [`CpuMask`] it goes in.
///
/// ```
/// use hotkern_cpuhp::CpuId;
/// assert_eq!(CpuId(3).index(), 3);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CpuId(pub u32);

impl CpuId {
    /// The CPU number as an index.
    pub const fn index(self) -> usize {
        self.0 as usize
    }
}

impl fmt::Display for CpuId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cpu{}", self.0)
    }
}

/// A set of up to `WORDS × 64` CPUs (Linux's `cpumask`, whose size is the
/// build-time `NR_CPUS`): `Copy`, no allocation.
///
/// The capacity is a type parameter rather than a run-time limit so that the
/// sets the engine copies, intersects and walks on every operation stay
/// fixed-size arrays the compiler unrolls; a machine with more CPUs than the
/// default [`CpuSet`] holds names a larger mask, and the engine
/// ([`Hotplug`](crate::Hotplug)), its [`Platform`](crate::Platform) and the
/// callbacks' [`Context`](crate::Context) take the same `WORDS`. The CPUs a
/// machine really has are its `possible` set, a run-time value: a CPU outside
/// it, or beyond the capacity, is refused with
/// [`Error::NoSuchCpu`](crate::Error::NoSuchCpu).
///
/// ```
/// use hotkern_cpuhp::{CpuId, CpuMask};
/// // 1024 CPUs: sixteen words.
/// let set = CpuMask::<16>::range(0, 1024);
/// assert_eq!(set.len(), 1024);
/// assert!(set.contains(CpuId(1023)));
/// assert_eq!(CpuMask::<16>::CAPACITY, 1024);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct CpuMask<const WORDS: usize> {
    words: [u64; WORDS],
}

/// The default [`CpuMask`]: up to [`MAX_CPUS`] (256) CPUs, what every type of
/// this crate uses when its `WORDS` parameter is not named.
///
/// ```
/// use hotkern_cpuhp::{CpuId, CpuSet};
/// let set = CpuSet::range(0, 4).without(CpuId(2));
/// assert_eq!(set.len(), 3);
/// assert!(set.contains(CpuId(3)) && !set.contains(CpuId(2)));
/// assert_eq!(set.iter().map(|c| c.0).collect::<Vec<_>>(), [0, 1, 3]);
/// ```
pub type CpuSet = CpuMask<DEFAULT_WORDS>;

impl<const WORDS: usize> Default for CpuMask<WORDS> {
    fn default() -> Self {
        Self::EMPTY
    }
}

impl<const WORDS: usize> CpuMask<WORDS> {
    /// How many CPUs the set can hold: `WORDS × 64`.
    pub const CAPACITY: usize = WORDS * 64;

    /// The empty set.
    pub const EMPTY: Self = CpuMask { words: [0; WORDS] };

    /// The empty set.
    pub const fn new() -> Self {
        Self::EMPTY
    }

    /// The set holding only `cpu` (empty if `cpu` is out of range).
    pub fn single(cpu: CpuId) -> Self {
        Self::EMPTY.with(cpu)
    }

    /// CPUs `start..end` (clamped to [`CAPACITY`](Self::CAPACITY)).
    pub fn range(start: u32, end: u32) -> Self {
        let mut set = Self::EMPTY;
        let end = (end as usize).min(Self::CAPACITY) as u32;
        for n in start..end {
            set.insert(CpuId(n));
        }
        set
    }

    /// Adds `cpu`; returns false (and changes nothing) if it is out of range.
    pub fn insert(&mut self, cpu: CpuId) -> bool {
        if cpu.index() >= Self::CAPACITY {
            return false;
        }
        self.words[cpu.index() / 64] |= 1 << (cpu.index() % 64);
        true
    }

    /// Removes `cpu` if present.
    pub fn remove(&mut self, cpu: CpuId) {
        if cpu.index() < Self::CAPACITY {
            self.words[cpu.index() / 64] &= !(1 << (cpu.index() % 64));
        }
    }

    /// This set with `cpu` added.
    pub fn with(mut self, cpu: CpuId) -> Self {
        self.insert(cpu);
        self
    }

    /// This set with `cpu` removed.
    pub fn without(mut self, cpu: CpuId) -> Self {
        self.remove(cpu);
        self
    }

    /// Whether `cpu` is in the set.
    pub fn contains(&self, cpu: CpuId) -> bool {
        cpu.index() < Self::CAPACITY
            && self.words[cpu.index() / 64] & (1 << (cpu.index() % 64)) != 0
    }

    /// Number of CPUs in the set.
    pub fn len(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.words.iter().all(|w| *w == 0)
    }

    /// The lowest CPU in the set.
    pub fn first(&self) -> Option<CpuId> {
        self.iter().next()
    }

    /// CPUs in both sets.
    pub fn intersection(&self, other: &Self) -> Self {
        let mut out = *self;
        for (w, o) in out.words.iter_mut().zip(other.words.iter()) {
            *w &= *o;
        }
        out
    }

    /// CPUs in either set.
    pub fn union(&self, other: &Self) -> Self {
        let mut out = *self;
        for (w, o) in out.words.iter_mut().zip(other.words.iter()) {
            *w |= *o;
        }
        out
    }

    /// CPUs in this set but not in `other`.
    pub fn difference(&self, other: &Self) -> Self {
        let mut out = *self;
        for (w, o) in out.words.iter_mut().zip(other.words.iter()) {
            *w &= !*o;
        }
        out
    }

    /// Whether every CPU of this set is in `other`.
    pub fn is_subset(&self, other: &Self) -> bool {
        self.difference(other).is_empty()
    }

    /// CPUs in ascending order.
    pub fn iter(&self) -> Iter<WORDS> {
        Iter {
            set: *self,
            next: 0,
        }
    }
}

impl<const WORDS: usize> FromIterator<CpuId> for CpuMask<WORDS> {
    fn from_iter<I: IntoIterator<Item = CpuId>>(iter: I) -> Self {
        let mut set = Self::EMPTY;
        for cpu in iter {
            set.insert(cpu);
        }
        set
    }
}

impl<const WORDS: usize> IntoIterator for CpuMask<WORDS> {
    type Item = CpuId;
    type IntoIter = Iter<WORDS>;
    fn into_iter(self) -> Iter<WORDS> {
        self.iter()
    }
}

impl<const WORDS: usize> IntoIterator for &CpuMask<WORDS> {
    type Item = CpuId;
    type IntoIter = Iter<WORDS>;
    fn into_iter(self) -> Iter<WORDS> {
        self.iter()
    }
}

/// Iterator over a [`CpuMask`] in ascending order.
#[derive(Clone, Debug)]
pub struct Iter<const WORDS: usize = DEFAULT_WORDS> {
    set: CpuMask<WORDS>,
    next: usize,
}

impl<const WORDS: usize> Iterator for Iter<WORDS> {
    type Item = CpuId;
    fn next(&mut self) -> Option<CpuId> {
        while self.next < CpuMask::<WORDS>::CAPACITY {
            let word = self.set.words[self.next / 64] >> (self.next % 64);
            if word == 0 {
                self.next = (self.next / 64 + 1) * 64;
                continue;
            }
            let found = self.next + word.trailing_zeros() as usize;
            self.next = found + 1;
            return Some(CpuId(found as u32));
        }
        None
    }
}

impl<const WORDS: usize> fmt::Debug for CpuMask<WORDS> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Prints the set in the kernel's list format, e.g. `0-3,6`.
impl<const WORDS: usize> fmt::Display for CpuMask<WORDS> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut iter = self.iter().peekable();
        while let Some(start) = iter.next() {
            let mut end = start;
            while let Some(next) = iter.peek() {
                if next.0 == end.0 + 1 {
                    end = *next;
                    iter.next();
                } else {
                    break;
                }
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if start == end {
                write!(f, "{}", start.0)?;
            } else {
                write!(f, "{}-{}", start.0, end.0)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::format;
    use alloc::vec::Vec;

    #[test]
    fn set_operations_agree_with_membership() {
        let a = CpuSet::range(0, 70);
        let b = CpuSet::range(60, 130);
        assert_eq!(a.intersection(&b).len(), 10);
        assert_eq!(a.union(&b).len(), 130);
        assert_eq!(a.difference(&b).len(), 60);
        assert!(CpuSet::range(2, 5).is_subset(&a));
        assert!(!b.is_subset(&a));
        let listed: Vec<u32> = b.iter().map(|c| c.0).collect();
        assert_eq!(listed.first(), Some(&60));
        assert_eq!(listed.last(), Some(&129));
        assert_eq!(listed.len(), 70);
    }

    #[test]
    fn out_of_range_cpus_are_refused() {
        let mut set = CpuSet::new();
        assert!(!set.insert(CpuId(MAX_CPUS as u32)));
        assert!(set.is_empty());
        assert!(!set.contains(CpuId(u32::MAX)));
        set.remove(CpuId(u32::MAX));
        // The first CPU past the end, where an off-by-one bound would index
        // past the last word.
        assert!(!CpuSet::range(0, MAX_CPUS as u32).contains(CpuId(MAX_CPUS as u32)));
        set.remove(CpuId(MAX_CPUS as u32));
        assert!(set.insert(CpuId(MAX_CPUS as u32 - 1)));
        assert_eq!(set.first(), Some(CpuId(MAX_CPUS as u32 - 1)));
    }

    #[test]
    fn display_uses_ranges() {
        let set: CpuSet = [0, 1, 2, 3, 6, 8, 9].into_iter().map(CpuId).collect();
        assert_eq!(format!("{set}"), "0-3,6,8-9");
        assert_eq!(format!("{set:?}"), "0-3,6,8-9");
        assert_eq!(format!("{}", CpuSet::EMPTY), "");
    }
}
