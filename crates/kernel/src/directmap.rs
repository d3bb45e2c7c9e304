//! The plan for the direct map of hot-plugged memory: which x86-64
//! page-table entries a map or unmap of a byte range writes, kept apart
//! from the page tables themselves so that the host can test it.
//!
//! Each aligned GiB of hot-plugged memory has one PDPT entry. While only
//! part of the GiB is plugged, that entry points at a page directory whose
//! 2 MiB entries map the plugged part; once every 2 MiB of the GiB is
//! mapped, the entry becomes one 1 GiB page (Linux's direct map does the
//! same in `arch/x86/mm/init_64.c`, `phys_pud_init` choosing `PG_LEVEL_1G`
//! where the range covers a whole aligned GiB). Unmapping part of a 1 GiB
//! page splits it back into its directory, the only time a directory's
//! 2 MiB entries are rewritten wholesale (Linux's `split_large_page`).
//!
//! ```
//! use hotkern_kernel::directmap::{plan, spans, Change, GibMap};
//!
//! // A grow that plugs the last 128 MiB of the GiB at 4 GiB.
//! let span = spans(0x1_3800_0000, 0x1_4000_0000).unwrap().next().unwrap();
//! assert_eq!((span.gib, span.pages.clone()), (4, 448..512));
//! let mut before = GibMap::EMPTY;
//! before.set(0..448);
//! let mut after = before;
//! after.set(span.pages);
//! assert_eq!(plan(false, &before, &after), Change::Promote);
//! ```

use core::fmt;
use core::ops::Range;

/// A 2 MiB page, what one page-directory entry maps.
pub const LARGE_PAGE_BYTES: u64 = 2 << 20;
/// A 1 GiB page, what one PDPT entry maps.
pub const HUGE_PAGE_BYTES: u64 = 1 << 30;
/// 2 MiB pages in a GiB: the entries of one page directory.
pub const LARGE_PER_HUGE: usize = 512;

/// Why a range cannot be planned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirectMapError {
    /// The start or the end is not on a 2 MiB boundary, or the end is
    /// before the start.
    Unaligned {
        /// The range's start.
        start: u64,
        /// The range's end.
        end: u64,
    },
}

impl fmt::Display for DirectMapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DirectMapError::Unaligned { start, end } => write!(
                f,
                "[{start:#x}, {end:#x}) is not a range of whole 2 MiB pages"
            ),
        }
    }
}

impl core::error::Error for DirectMapError {}

/// Which 2 MiB pages of one aligned GiB are mapped: bit `i` the `i`-th.
///
/// ```
/// use hotkern_kernel::directmap::GibMap;
///
/// let mut map = GibMap::EMPTY;
/// map.set(0..512);
/// assert!(map.is_full());
/// map.clear(10..11);
/// assert!(!map.contains(10) && map.contains(11));
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GibMap {
    words: [u64; LARGE_PER_HUGE / 64],
}

impl GibMap {
    /// Nothing mapped.
    pub const EMPTY: GibMap = GibMap {
        words: [0; LARGE_PER_HUGE / 64],
    };
    /// Every 2 MiB of the GiB mapped.
    pub const FULL: GibMap = GibMap {
        words: [u64::MAX; LARGE_PER_HUGE / 64],
    };

    /// Marks `pages` (indexes below 512) mapped.
    pub fn set(&mut self, pages: Range<usize>) {
        for page in pages.take_while(|&p| p < LARGE_PER_HUGE) {
            self.words[page / 64] |= 1 << (page % 64);
        }
    }

    /// Marks `pages` (indexes below 512) not mapped.
    pub fn clear(&mut self, pages: Range<usize>) {
        for page in pages.take_while(|&p| p < LARGE_PER_HUGE) {
            self.words[page / 64] &= !(1 << (page % 64));
        }
    }

    /// Whether the 2 MiB page `page` is mapped.
    pub fn contains(&self, page: usize) -> bool {
        page < LARGE_PER_HUGE && self.words[page / 64] & (1 << (page % 64)) != 0
    }

    /// Whether the whole GiB is mapped: a 1 GiB page can map it.
    pub fn is_full(&self) -> bool {
        *self == GibMap::FULL
    }

    /// Whether nothing in the GiB is mapped.
    pub fn is_empty(&self) -> bool {
        *self == GibMap::EMPTY
    }
}

/// The part of a range inside one aligned GiB.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GibSpan {
    /// The GiB's number (its address over 1 GiB): its PDPT slot.
    pub gib: u64,
    /// The 2 MiB pages of the GiB the range covers.
    pub pages: Range<usize>,
}

/// Cuts `[start, end)` at GiB boundaries, as the PDPT entries it touches.
///
/// ```
/// use hotkern_kernel::directmap::spans;
///
/// let cut: Vec<_> = spans(0x1_3fe0_0000, 0x1_4040_0000).unwrap().collect();
/// assert_eq!(cut.len(), 2);
/// assert_eq!((cut[0].gib, cut[0].pages.clone()), (4, 511..512));
/// assert_eq!((cut[1].gib, cut[1].pages.clone()), (5, 0..2));
/// assert!(spans(0x1000, 0x20_0000).is_err());
/// ```
pub fn spans(start: u64, end: u64) -> Result<impl Iterator<Item = GibSpan>, DirectMapError> {
    if start % LARGE_PAGE_BYTES != 0 || end % LARGE_PAGE_BYTES != 0 || end < start {
        return Err(DirectMapError::Unaligned { start, end });
    }
    let mut at = start;
    Ok(core::iter::from_fn(move || {
        if at >= end {
            return None;
        }
        let gib = at / HUGE_PAGE_BYTES;
        let stop = end.min((gib + 1) * HUGE_PAGE_BYTES);
        let page = |address: u64| ((address % HUGE_PAGE_BYTES) / LARGE_PAGE_BYTES) as usize;
        let last = if stop % HUGE_PAGE_BYTES == 0 {
            LARGE_PER_HUGE
        } else {
            page(stop)
        };
        let span = GibSpan {
            gib,
            pages: page(at)..last,
        };
        at = stop;
        Some(span)
    }))
}

/// How one GiB's PDPT entry and directory change to go from mapping
/// `before` to mapping `after`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Already as wanted: write nothing.
    Nothing,
    /// Write the directory's entries that differ; the PDPT entry keeps
    /// pointing at the directory.
    Entries,
    /// Every 2 MiB is now mapped: the PDPT entry becomes a 1 GiB page.
    /// The directory is kept, untouched, for a later split.
    Promote,
    /// A 1 GiB page loses part of its GiB: fill the directory from
    /// `after`, then point the PDPT entry at it. Needs the directory.
    Split,
}

impl Change {
    /// Whether the change writes the GiB's page directory, which must then
    /// exist before anything changes.
    pub fn needs_directory(self) -> bool {
        matches!(self, Change::Entries | Change::Split)
    }
}

/// The change for one GiB: `huge` says whether its PDPT entry is a 1 GiB
/// page now (then `before` must be full).
///
/// ```
/// use hotkern_kernel::directmap::{plan, Change, GibMap};
///
/// let mut after = GibMap::FULL;
/// after.clear(0..1);
/// assert_eq!(plan(true, &GibMap::FULL, &after), Change::Split);
/// assert_eq!(plan(false, &GibMap::EMPTY, &after), Change::Entries);
/// ```
pub fn plan(huge: bool, before: &GibMap, after: &GibMap) -> Change {
    match (huge, after.is_full()) {
        (true, true) => Change::Nothing,
        // Also a GiB already full through its directory.
        (false, true) => Change::Promote,
        (true, false) => Change::Split,
        (false, false) if before == after => Change::Nothing,
        (false, false) => Change::Entries,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    const GIB: u64 = HUGE_PAGE_BYTES;
    const MIB: u64 = 1 << 20;

    fn map(pages: Range<usize>) -> GibMap {
        let mut map = GibMap::EMPTY;
        map.set(pages);
        map
    }

    #[test]
    fn spans_cut_at_each_gib_and_cover_the_range_once() {
        let cut: Vec<_> = spans(4 * GIB + 1022 * MIB, 6 * GIB + 4 * MIB)
            .unwrap()
            .collect();
        assert_eq!(
            cut,
            [
                GibSpan {
                    gib: 4,
                    pages: 511..512
                },
                GibSpan {
                    gib: 5,
                    pages: 0..512
                },
                GibSpan {
                    gib: 6,
                    pages: 0..2
                },
            ]
        );
        let pages: usize = cut.iter().map(|s| s.pages.len()).sum();
        assert_eq!(pages as u64 * LARGE_PAGE_BYTES, GIB + 6 * MIB);
    }

    #[test]
    fn an_empty_range_has_no_span_and_a_whole_gib_has_one() {
        assert_eq!(spans(5 * GIB, 5 * GIB).unwrap().count(), 0);
        let whole: Vec<_> = spans(5 * GIB, 6 * GIB).unwrap().collect();
        assert_eq!(
            whole,
            [GibSpan {
                gib: 5,
                pages: 0..512
            }]
        );
    }

    #[test]
    fn unaligned_or_reversed_ranges_are_refused() {
        assert!(spans(GIB + 4096, 2 * GIB).is_err());
        assert!(spans(GIB, 2 * GIB + MIB).is_err());
        assert_eq!(
            spans(2 * GIB, GIB).err(),
            Some(DirectMapError::Unaligned {
                start: 2 * GIB,
                end: GIB
            })
        );
    }

    #[test]
    fn a_partly_plugged_gib_uses_directory_entries() {
        assert_eq!(plan(false, &GibMap::EMPTY, &map(0..64)), Change::Entries);
        assert_eq!(plan(false, &map(0..64), &map(0..128)), Change::Entries);
        assert_eq!(plan(false, &map(0..128), &map(0..64)), Change::Entries);
        assert_eq!(plan(false, &map(0..64), &GibMap::EMPTY), Change::Entries);
    }

    #[test]
    fn the_last_2_mib_of_a_gib_makes_it_one_huge_page() {
        assert_eq!(plan(false, &map(0..511), &GibMap::FULL), Change::Promote);
        assert_eq!(plan(false, &GibMap::EMPTY, &GibMap::FULL), Change::Promote);
        // A GiB already full through its directory is promoted too.
        assert_eq!(plan(false, &GibMap::FULL, &GibMap::FULL), Change::Promote);
    }

    #[test]
    fn a_huge_page_splits_only_when_part_of_it_goes() {
        assert_eq!(plan(true, &GibMap::FULL, &GibMap::FULL), Change::Nothing);
        assert_eq!(plan(true, &GibMap::FULL, &map(0..511)), Change::Split);
        assert_eq!(plan(true, &GibMap::FULL, &GibMap::EMPTY), Change::Split);
        assert!(Change::Split.needs_directory() && Change::Entries.needs_directory());
        assert!(!Change::Promote.needs_directory() && !Change::Nothing.needs_directory());
    }

    #[test]
    fn an_unchanged_partial_gib_writes_nothing() {
        assert_eq!(plan(false, &map(3..9), &map(3..9)), Change::Nothing);
        assert_eq!(plan(false, &GibMap::EMPTY, &GibMap::EMPTY), Change::Nothing);
    }

    #[test]
    fn gib_maps_set_and_clear_only_their_pages() {
        let mut gib = map(0..512);
        assert!(gib.is_full());
        gib.clear(63..65);
        assert!(gib.contains(62) && !gib.contains(63) && !gib.contains(64) && gib.contains(65));
        gib.clear(0..512);
        assert!(gib.is_empty() && !gib.contains(600));
        gib.set(500..600);
        assert_eq!(gib, map(500..512));
    }
}
