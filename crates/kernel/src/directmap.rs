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
//! let mut map = GibMap::EMPTY;
//! map.set(0..448);
//! let changed = map.set(span.pages);
//! assert_eq!(plan(false, changed, &map), Change::Promote);
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

    /// Marks `pages` (indexes below 512) mapped; whether any was not.
    pub fn set(&mut self, pages: Range<usize>) -> bool {
        self.update(pages, true)
    }

    /// Marks `pages` (indexes below 512) not mapped; whether any was.
    pub fn clear(&mut self, pages: Range<usize>) -> bool {
        self.update(pages, false)
    }

    /// Sets or clears `pages` in place a word at a time, saying whether a
    /// bit changed: a 128 MiB plug is one mask, with no copy of the map
    /// and no comparison of two maps. Little code on purpose: under
    /// QEMU's TCG the kernel's first plug pays for the translation of
    /// every instruction it runs for the first time.
    fn update(&mut self, pages: Range<usize>, set: bool) -> bool {
        let end = pages.end.min(LARGE_PER_HUGE);
        let mut page = pages.start;
        let mut changed = 0;
        while page < end {
            let word = page / 64;
            let stop = end.min((word + 1) * 64);
            // 1 to 64 bits from `page % 64`.
            let mask = (u64::MAX >> (64 - (stop - page))) << (page % 64);
            let before = self.words[word];
            let after = if set { before | mask } else { before & !mask };
            changed |= before ^ after;
            self.words[word] = after;
            page = stop;
        }
        changed != 0
    }

    /// Whether the 2 MiB page `page` is mapped.
    pub fn contains(&self, page: usize) -> bool {
        page < LARGE_PER_HUGE && self.words[page / 64] & (1 << (page % 64)) != 0
    }

    /// Whether the whole GiB is mapped: a 1 GiB page can map it.
    pub fn is_full(&self) -> bool {
        self.words.iter().fold(u64::MAX, |all, word| all & word) == u64::MAX
    }

    /// Whether nothing in the GiB is mapped.
    pub fn is_empty(&self) -> bool {
        self.words.iter().fold(0, |any, word| any | word) == 0
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

/// The change for one GiB after [`GibMap::set`] or [`GibMap::clear`]:
/// `huge` says whether its PDPT entry is a 1 GiB page now (then its map
/// was full), `changed` is what the update returned, `after` the map it
/// left.
///
/// ```
/// use hotkern_kernel::directmap::{plan, Change, GibMap};
///
/// let mut map = GibMap::FULL;
/// let changed = map.clear(0..1);
/// assert_eq!(plan(true, changed, &map), Change::Split);
/// let mut map = GibMap::EMPTY;
/// let changed = map.set(0..1);
/// assert_eq!(plan(false, changed, &map), Change::Entries);
/// ```
pub fn plan(huge: bool, changed: bool, after: &GibMap) -> Change {
    match (huge, after.is_full()) {
        (true, true) => Change::Nothing,
        // Also a GiB already full through its directory.
        (false, true) => Change::Promote,
        (true, false) => Change::Split,
        (false, false) if !changed => Change::Nothing,
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

    /// The plan for going from `before` to `after` as the kernel makes
    /// it: the update's word says whether anything changed.
    fn planned(huge: bool, before: &GibMap, after: &GibMap) -> Change {
        plan(huge, before != after, after)
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
        assert_eq!(planned(false, &GibMap::EMPTY, &map(0..64)), Change::Entries);
        assert_eq!(planned(false, &map(0..64), &map(0..128)), Change::Entries);
        assert_eq!(planned(false, &map(0..128), &map(0..64)), Change::Entries);
        assert_eq!(planned(false, &map(0..64), &GibMap::EMPTY), Change::Entries);
    }

    #[test]
    fn the_last_2_mib_of_a_gib_makes_it_one_huge_page() {
        assert_eq!(planned(false, &map(0..511), &GibMap::FULL), Change::Promote);
        assert_eq!(
            planned(false, &GibMap::EMPTY, &GibMap::FULL),
            Change::Promote
        );
        // A GiB already full through its directory is promoted too.
        assert_eq!(
            planned(false, &GibMap::FULL, &GibMap::FULL),
            Change::Promote
        );
    }

    #[test]
    fn a_huge_page_splits_only_when_part_of_it_goes() {
        assert_eq!(planned(true, &GibMap::FULL, &GibMap::FULL), Change::Nothing);
        assert_eq!(planned(true, &GibMap::FULL, &map(0..511)), Change::Split);
        assert_eq!(planned(true, &GibMap::FULL, &GibMap::EMPTY), Change::Split);
        assert!(Change::Split.needs_directory() && Change::Entries.needs_directory());
        assert!(!Change::Promote.needs_directory() && !Change::Nothing.needs_directory());
    }

    #[test]
    fn an_unchanged_partial_gib_writes_nothing() {
        assert_eq!(planned(false, &map(3..9), &map(3..9)), Change::Nothing);
        assert_eq!(
            planned(false, &GibMap::EMPTY, &GibMap::EMPTY),
            Change::Nothing
        );
    }

    #[test]
    fn word_wide_updates_match_page_by_page_ones() {
        let ranges = [
            0..1,
            0..64,
            63..65,
            1..63,
            60..130,
            64..128,
            0..512,
            511..512,
            200..600,
        ];
        for first in ranges.clone() {
            for second in ranges.clone() {
                let mut words = GibMap::EMPTY;
                words.set(first.clone());
                let before = words;
                let changed = words.clear(second.clone());
                let mut pages = GibMap::EMPTY;
                for page in first.clone().filter(|&p| p < LARGE_PER_HUGE) {
                    pages.words[page / 64] |= 1 << (page % 64);
                }
                for page in second.clone().filter(|&p| p < LARGE_PER_HUGE) {
                    pages.words[page / 64] &= !(1 << (page % 64));
                }
                assert_eq!(words, pages, "set {first:?}, clear {second:?}");
                assert_eq!(
                    changed,
                    words != before,
                    "clear {second:?} after set {first:?}"
                );
            }
        }
    }

    #[test]
    fn updates_say_whether_they_changed_a_page() {
        let mut gib = map(0..64);
        assert!(!gib.set(0..64) && !gib.set(10..20) && !gib.clear(64..128));
        assert!(gib.set(63..65) && !gib.set(64..65));
        assert!(gib.clear(64..600) && !gib.clear(64..600));
        assert_eq!(gib, map(0..64));
        // What the kernel plans from an update that changed nothing.
        assert_eq!(plan(false, gib.set(0..1), &gib), Change::Nothing);
        assert_eq!(plan(false, gib.set(500..512), &gib), Change::Entries);
    }

    #[test]
    fn gib_maps_set_and_clear_only_their_pages() {
        let mut gib = map(0..512);
        assert!(gib.is_full());
        gib.clear(63..65);
        assert!(gib.contains(62) && !gib.contains(63) && !gib.contains(64) && gib.contains(65));
        gib.clear(0..512);
        assert!(gib.is_empty() && !gib.contains(600));
        // Fullness and emptiness see every word, the last and the first.
        let mut last = GibMap::FULL;
        last.clear(511..512);
        assert!(!last.is_full() && last != GibMap::FULL);
        let mut first = GibMap::EMPTY;
        first.set(0..1);
        assert!(!first.is_empty() && first != GibMap::EMPTY);
        gib.set(500..600);
        assert_eq!(gib, map(500..512));
    }
}
