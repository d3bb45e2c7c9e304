//! Building an index's section table: how large its sections are, and
//! making the sections a write touches, one shared section for every
//! section a single run covers whole.

use alloc::boxed::Box;
use core::ops::Range;

use crate::error::PhysmemError;
use crate::fallible::boxed;
use crate::section::{Entry, Section};
use crate::types::FrameRange;

use super::directory::SectionTable;

/// log2 of frames per section, unless the address span needs larger ones.
pub(crate) const SECTION_SHIFT: u32 = 9;
/// Most sections in a table; wider spans get larger sections.
pub(super) const MAX_SECTIONS: u64 = 1 << 16;

/// The smallest section shift (at least [`SECTION_SHIFT`]) that keeps the
/// table over `span` within [`MAX_SECTIONS`].
pub(super) fn shift_for(span: FrameRange) -> u32 {
    let count = |shift| {
        let numbers = span.sections(shift);
        numbers.end - numbers.start
    };
    let mut shift = SECTION_SHIFT;
    while count(shift) > MAX_SECTIONS {
        shift += 1;
    }
    shift
}

/// Builds sections `touched` (absolute numbers) of a table
/// starting at section `base`, from `entries` (sorted, disjoint; must hold
/// every segment overlapping those sections).
pub(super) fn fill_sections<P>(
    sections: &mut SectionTable<P>,
    shift: u32,
    touched: Range<u64>,
    entries: &[Entry<P>],
) -> Result<(), PhysmemError> {
    let mut first = 0;
    let mut maker = Maker::new();
    for number in touched {
        let start = number << shift;
        let end = start + (1 << shift);
        while first < entries.len() && entries[first].run.end <= start {
            first += 1;
        }
        let count = entries[first..]
            .iter()
            .take_while(|e| e.run.start < end)
            .count();
        let inside = &entries[first..first + count];
        if !inside.is_empty() {
            sections.set(number, maker.make(start, shift, inside)?);
        }
    }
    Ok(())
}

/// Makes sections for consecutive section numbers, giving every section
/// that one run covers entirely the same shared section.
pub(super) struct Maker<P> {
    /// The last shared section made, and its run.
    shared: Option<(RunKey, *const Section<P>)>,
}

/// Names one version of a run: (slot, generation, start).
type RunKey = (u32, u32, u64);

impl<P> Maker<P> {
    pub(super) fn new() -> Self {
        Maker { shared: None }
    }

    /// The section starting at frame `start` holding `list`.
    pub(super) fn make(
        &mut self,
        start: u64,
        shift: u32,
        list: &[Entry<P>],
    ) -> Result<*const Section<P>, PhysmemError> {
        let end = start + (1 << shift);
        if let [only] = list {
            if only.run.start <= start && end <= only.run.end {
                let key = (only.run.slot, only.run.generation, only.run.start);
                if let Some((shared_key, section)) = self.shared {
                    if shared_key == key {
                        // SAFETY: made by this maker, alive in the index being built.
                        unsafe { &*section }.share();
                        return Ok(section);
                    }
                }
                let section = Box::into_raw(boxed(Section::uniform(only)?)?).cast_const();
                self.shared = Some((key, section));
                return Ok(section);
            }
        }
        Ok(Box::into_raw(boxed(Section::build(start, shift, list)?)?).cast_const())
    }
}
