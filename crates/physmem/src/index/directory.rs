//! The section table of an index: one entry per section from `base`, kept
//! in leaves of [`LEAF`] entries that successive indexes share.
//!
//! A flat table is copied whole by every write: 256 KiB per plug once
//! the span reaches 64 GiB (32,768 sections of 2 MiB), so a grow of n
//! runs copied O(n²) bytes and every replaced index kept a table of that
//! size waiting for readers. Here a write copies the directory (one
//! pointer per leaf, 512 bytes at 64 GiB) and the leaves whose entries it
//! changes (one or two for a 128 MiB run), and shares every other leaf
//! with the index it was made from, as the slot map shares its chunks.
//! A lookup pays one more dependent load (directory, then leaf).
//!
//! Leaves cover absolute section numbers (leaf `k` holds sections
//! `k * LEAF ..`), so moving the table's base moves no entry. Entries
//! outside `[base, base + len)` are null in every leaf: a leaf the table
//! stops covering part of is copied with those entries cleared, so a
//! later table that covers them again finds them empty.

use alloc::boxed::Box;
use alloc::vec::Vec;
use core::ops::Range;
use core::ptr;

use crate::error::PhysmemError;
use crate::fallible::{boxed, try_vec};
use crate::section::Section;

const LEAF_SHIFT: u32 = 9;
/// Entries of a leaf: 4 KiB of pointers, one GiB of 2 MiB sections.
pub(crate) const LEAF: usize = 1 << LEAF_SHIFT;

/// One leaf of section pointers.
pub(crate) struct Leaf<P> {
    sections: [*const Section<P>; LEAF],
    /// Under loom, reads touch this cell and drop writes it, so the model
    /// reports a leaf freed while a reader can still use it.
    #[cfg(loom)]
    alive: loom::cell::UnsafeCell<()>,
}

#[cfg(loom)]
impl<P> Drop for Leaf<P> {
    fn drop(&mut self) {
        self.alive.with_mut(|_| ());
    }
}

impl<P> Leaf<P> {
    fn with(sections: [*const Section<P>; LEAF]) -> Result<*mut Leaf<P>, PhysmemError> {
        let leaf = boxed(Leaf {
            sections,
            #[cfg(loom)]
            alive: loom::cell::UnsafeCell::new(()),
        })?;
        Ok(Box::into_raw(leaf))
    }
}

/// The section table: entries for absolute section numbers
/// `base .. base + len`, null where no run overlaps.
pub(crate) struct SectionTable<P> {
    pub(crate) base: u64,
    len: usize,
    /// Leaf `first_leaf + i` at `leaves[i]`. Owned by the newest index
    /// that lists them; shared with the index a write builds until it
    /// replaces them.
    leaves: Vec<*const Leaf<P>>,
    first_leaf: u64,
}

/// Leaf numbers holding the absolute section numbers `numbers`.
fn leaves_of(numbers: Range<u64>) -> Range<u64> {
    if numbers.start >= numbers.end {
        return 0..0;
    }
    (numbers.start >> LEAF_SHIFT)..((numbers.end - 1) >> LEAF_SHIFT) + 1
}

/// Absolute section numbers leaf `leaf` holds.
fn numbers_of(leaf: u64) -> Range<u64> {
    (leaf << LEAF_SHIFT)..(leaf + 1) << LEAF_SHIFT
}

fn overlaps(a: &Range<u64>, b: &Range<u64>) -> bool {
    a.start.max(b.start) < a.end.min(b.end)
}

impl<P> SectionTable<P> {
    /// A table of no sections.
    pub(crate) fn empty() -> Self {
        SectionTable {
            base: 0,
            len: 0,
            leaves: Vec::new(),
            first_leaf: 0,
        }
    }

    /// A table for sections `numbers`, every entry null; on failure
    /// nothing is left allocated.
    pub(crate) fn new(numbers: Range<u64>) -> Result<Self, PhysmemError> {
        Self::empty().derive(numbers.clone(), numbers)
    }

    /// A table for sections `numbers` made from this one: entries in
    /// `cleared` are null (the caller fills them, see [`set`](Self::set)),
    /// others as here (null where this table has none). Leaves with no
    /// entry in `cleared` and none that this table covers and the new one
    /// does not are shared; the others are fresh copies. On failure
    /// nothing is left allocated.
    pub(crate) fn derive(
        &self,
        numbers: Range<u64>,
        cleared: Range<u64>,
    ) -> Result<Self, PhysmemError> {
        let old = self.base..self.end();
        let leaves = leaves_of(numbers.clone());
        let mut table = SectionTable {
            base: numbers.start,
            len: (numbers.end - numbers.start) as usize,
            leaves: try_vec((leaves.end - leaves.start) as usize)?,
            first_leaf: leaves.start,
        };
        if numbers.start >= numbers.end {
            table.base = 0;
        }
        for leaf in leaves {
            let held = numbers_of(leaf);
            let mine = self.leaf(leaf);
            // Entries this table lists but the new one must not.
            let dropped = |r: &Range<u64>| {
                overlaps(r, &(old.start..numbers.start.min(old.end)))
                    || overlaps(r, &(numbers.end.max(old.start)..old.end))
            };
            if let Some(mine) = mine {
                if !overlaps(&held, &cleared) && !dropped(&held) {
                    table.leaves.push(mine);
                    continue;
                }
            }
            let mut sections = [ptr::null(); LEAF];
            for (number, entry) in held.zip(sections.iter_mut()) {
                let keep = numbers.contains(&number) && !cleared.contains(&number);
                if keep {
                    *entry = self.at(number).unwrap_or(ptr::null());
                }
            }
            match Leaf::with(sections) {
                Ok(leaf) => table.leaves.push(leaf.cast_const()),
                Err(error) => {
                    table.discard(Some(self));
                    return Err(error);
                }
            }
        }
        Ok(table)
    }

    /// The leaf holding leaf number `leaf`, if the table has it.
    fn leaf(&self, leaf: u64) -> Option<*const Leaf<P>> {
        let i = usize::try_from(leaf.checked_sub(self.first_leaf)?).ok()?;
        self.leaves.get(i).copied()
    }

    /// Number of entries.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// One past the last absolute section number.
    pub(crate) fn end(&self) -> u64 {
        self.base + self.len as u64
    }

    /// Entry `n` of the table (counted from `base`): `None` past the end,
    /// a null pointer where no run overlaps.
    #[inline]
    pub(crate) fn get(&self, n: usize) -> Option<*const Section<P>> {
        if n >= self.len {
            return None;
        }
        let number = self.base + n as u64;
        let leaf = self.leaves[((number >> LEAF_SHIFT) - self.first_leaf) as usize];
        // SAFETY: leaves stay allocated while any index listing them may
        // be read (they are retired through the epoch like sections).
        let leaf = unsafe { &*leaf };
        #[cfg(loom)]
        leaf.alive.with(|_| ());
        Some(leaf.sections[number as usize & (LEAF - 1)])
    }

    /// The entry for absolute section `number`, if the table covers it.
    pub(crate) fn at(&self, number: u64) -> Option<*const Section<P>> {
        let n = usize::try_from(number.checked_sub(self.base)?).ok()?;
        self.get(n)
    }

    /// Sets the entry of absolute section `number`, which must be in
    /// the range a [`derive`](Self::derive) cleared (or any, for a table
    /// from [`new`](Self::new)): those leaves are this table's own, not
    /// published yet.
    pub(crate) fn set(&mut self, number: u64, section: *const Section<P>) {
        debug_assert!(number >= self.base && number < self.end());
        let leaf = self.leaves[((number >> LEAF_SHIFT) - self.first_leaf) as usize];
        // SAFETY: per the contract, a leaf made by this table's `derive`
        // and reachable by no reader yet.
        unsafe { (*leaf.cast_mut()).sections[number as usize & (LEAF - 1)] = section };
    }

    /// Leaves of this table that `other` does not list at the same
    /// place: what replacing this table by `other` leaves unused.
    pub(crate) fn replaced_by<'a>(
        &'a self,
        other: Option<&'a SectionTable<P>>,
    ) -> impl Iterator<Item = *const Leaf<P>> + 'a {
        (self.first_leaf..)
            .zip(&self.leaves)
            .filter(move |&(leaf, &mine)| other.and_then(|o| o.leaf(leaf)) != Some(mine))
            .map(|(_, &mine)| mine)
    }

    /// Frees the leaves of this table that `other` (the table it was made
    /// from, if any) does not list at the same place.
    pub(crate) fn discard(&self, other: Option<&SectionTable<P>>) {
        for leaf in self.replaced_by(other) {
            // SAFETY: made by this table alone and not published.
            drop(unsafe { Box::from_raw(leaf.cast_mut()) });
        }
    }

    /// Bytes of the directory and leaves.
    pub(crate) fn bytes(&self) -> usize {
        self.leaves.len()
            * (core::mem::size_of::<*const Leaf<P>>() + core::mem::size_of::<Leaf<P>>())
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    /// A stand-in section pointer: the table stores and compares them,
    /// never reads through them.
    fn fake(n: u64) -> *const Section<()> {
        (0x1000 + n as usize * 64) as *const Section<()>
    }

    #[test]
    fn a_write_copies_only_the_leaves_it_touches() {
        let mut table = SectionTable::new(3..3000).unwrap();
        for number in 3..3000 {
            table.set(number, fake(number));
        }
        // Entries 1500..1510 rebuilt: leaf 2 (1024..1536) is copied, the
        // other five are the old table's.
        let next = table.derive(3..3000, 1500..1510).unwrap();
        assert_eq!(table.replaced_by(Some(&next)).count(), 1);
        assert_eq!(next.at(1500), Some(ptr::null()), "cleared for the caller");
        assert_eq!(next.at(1510), Some(fake(1510)));
        assert_eq!(next.at(2999), Some(fake(2999)));
        assert_eq!(next.at(3000), None);
        next.discard(Some(&table));
        table.discard(None);
    }

    #[test]
    fn entries_a_table_stops_covering_are_empty_when_covered_again() {
        let mut table = SectionTable::new(0..1000).unwrap();
        for number in 0..1000 {
            table.set(number, fake(number));
        }
        // The lowest 600 go (the base moves up into leaf 1): leaf 0 is
        // copied with its entries cleared, so the table that grows back
        // down lists nothing there, not what the first table did.
        let shrunk = table.derive(600..1000, 0..0).unwrap();
        let regrown = shrunk.derive(0..1000, 0..0).unwrap();
        assert_eq!(regrown.at(0), Some(ptr::null()));
        assert_eq!(regrown.at(599), Some(ptr::null()));
        assert_eq!(regrown.at(600), Some(fake(600)));
        regrown.discard(Some(&shrunk));
        shrunk.discard(Some(&table));
        table.discard(None);
        assert_eq!(SectionTable::<()>::new(5..5).unwrap().len(), 0);
    }
}
