//! One section of the published index: the runs (segments) overlapping
//! 2^9 frames and the block table that finds the right one in at most
//! [`MAX_SCAN`] steps.

use alloc::vec::Vec;
use core::cell::Cell;
use core::ptr;

use crate::error::PhysmemError;
use crate::fallible::try_vec;
use crate::sync::AtomicU64;
use crate::types::FreeList;

/// Most runs one lookup examines.
pub(crate) const MAX_SCAN: usize = 2;

/// One segment as lookups see it; the hot part, 32 bytes.
pub(crate) struct Run<P> {
    pub(crate) start: u64,
    pub(crate) end: u64,
    /// The descriptor of `start`; for a segment with deferred descriptor
    /// init, its plug's `Deferred` instead, marked (see `deferred::tag`).
    pub(crate) pages: *const P,
    pub(crate) slot: u32,
    pub(crate) generation: u32,
}

impl<P> Clone for Run<P> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<P> Copy for Run<P> {}

/// The rest of a segment's attributes, read by getters.
pub(crate) struct Detail {
    pub(crate) avail_start: u64,
    pub(crate) avail_end: u64,
    pub(crate) free_list: FreeList,
    /// Every section a segment spans has a copy; the writer sets them all.
    pub(crate) start_hint: AtomicU64,
}

impl Detail {
    fn of<P>(entry: &Entry<P>) -> Self {
        Detail {
            avail_start: entry.avail_start,
            avail_end: entry.avail_end,
            free_list: entry.free_list,
            start_hint: AtomicU64::new(entry.start_hint),
        }
    }
}

/// What a write hands to the index for each segment.
pub(crate) struct Entry<P> {
    pub(crate) run: Run<P>,
    pub(crate) avail_start: u64,
    pub(crate) avail_end: u64,
    pub(crate) free_list: FreeList,
    pub(crate) start_hint: u64,
}

impl<P> Clone for Entry<P> {
    fn clone(&self) -> Self {
        Entry {
            run: self.run,
            avail_start: self.avail_start,
            avail_end: self.avail_end,
            free_list: self.free_list,
            start_hint: self.start_hint,
        }
    }
}

/// The runs overlapping one section, and the block table into them.
pub(crate) struct Section<P> {
    /// Where block 0 starts: the section's first frame, or for a section
    /// that one run covers entirely, that run's start (so that the same
    /// section can serve every section the run covers).
    pub(crate) start: u64,
    block_shift: u32,
    /// Blocks past the section's last run are not stored: frames there are
    /// in no segment of this section.
    last_block: u32,
    blocks: Vec<u32>,
    /// Sorted by start, followed by a sentinel that ends every scan.
    pub(crate) runs: Vec<Run<P>>,
    details: Vec<Detail>,
    /// Table entries of the newest index that point here (an index a write
    /// is building counts only the sections it made). Only the writer reads
    /// or changes it, under its lock, and never for a section a write keeps.
    shares: Cell<u32>,
    /// Under loom, every read touches this cell and drop writes it, so the
    /// model reports any section freed while a reader can still use it.
    #[cfg(loom)]
    alive: loom::cell::UnsafeCell<()>,
}

#[cfg(loom)]
impl<P> Drop for Section<P> {
    fn drop(&mut self) {
        self.alive.with_mut(|_| ());
    }
}

fn sentinel<P>() -> Run<P> {
    Run {
        start: u64::MAX,
        end: u64::MAX,
        pages: ptr::null(),
        slot: u32::MAX,
        generation: 0,
    }
}

impl<P> Section<P> {
    /// The section of `1 << shift` frames from `start`, holding `entries`
    /// (sorted, disjoint, each overlapping the section).
    pub(crate) fn build(
        start: u64,
        shift: u32,
        entries: &[Entry<P>],
    ) -> Result<Self, PhysmemError> {
        let end = start + (1 << shift);
        let mut runs: Vec<Run<P>> = try_vec(entries.len() + 1)?;
        runs.extend(entries.iter().map(|e| e.run));
        let mut details = try_vec(entries.len())?;
        details.extend(entries.iter().map(Detail::of));
        let block_shift = Self::block_shift(&runs, start, shift);
        let covered_end = runs.last().map_or(start + 1, |r| r.end.min(end));
        let block_count = ((covered_end - start - 1) >> block_shift) + 1;
        // Block k names the first run ending after the block's start:
        // run i covers the blocks starting in [end of run i-1, end of run i).
        let mut blocks = try_vec(block_count as usize)?;
        blocks.resize(block_count as usize, runs.len() as u32);
        let mut block = 0u64;
        for (i, run) in runs.iter().enumerate() {
            let run_end = run.end.min(start + (block_count << block_shift));
            let upto = (run_end - start).div_ceil(1 << block_shift);
            if upto > block {
                blocks[block as usize..upto as usize].fill(i as u32);
                block = upto;
            }
        }
        runs.push(sentinel());
        Ok(Section {
            start,
            block_shift,
            last_block: (block_count - 1) as u32,
            blocks,
            runs,
            details,
            shares: Cell::new(1),
            #[cfg(loom)]
            alive: loom::cell::UnsafeCell::new(()),
        })
    }

    /// A section that `entry`'s run covers entirely, usable for every such
    /// section of that run: one block, whatever the frame.
    pub(crate) fn uniform(entry: &Entry<P>) -> Result<Self, PhysmemError> {
        let mut blocks = try_vec(1)?;
        blocks.push(0);
        let mut runs = try_vec(2)?;
        runs.extend([entry.run, sentinel()]);
        let mut details = try_vec(1)?;
        details.push(Detail::of(entry));
        Ok(Section {
            start: entry.run.start,
            block_shift: u64::BITS - 1,
            last_block: 0,
            blocks,
            runs,
            details,
            shares: Cell::new(1),
            #[cfg(loom)]
            alive: loom::cell::UnsafeCell::new(()),
        })
    }

    /// One more table entry points here.
    pub(crate) fn share(&self) {
        self.shares.set(self.shares.get() + 1);
    }

    /// One table entry less points here; true when none is left.
    pub(crate) fn release(&self) -> bool {
        let left = self.shares.get().saturating_sub(1);
        self.shares.set(left);
        left == 0
    }

    /// The coarsest block size at which no lookup scans more than
    /// [`MAX_SCAN`] runs, starting near one block per run.
    fn block_shift(runs: &[Run<P>], start: u64, shift: u32) -> u32 {
        if runs.len() <= 1 {
            return shift;
        }
        let wanted = (runs.len() as u64).next_power_of_two().trailing_zeros();
        let mut block_shift = shift.saturating_sub(wanted);
        while block_shift > 0 && Self::worst_scan(runs, start, shift, block_shift) > MAX_SCAN {
            block_shift -= 1;
        }
        block_shift
    }

    /// Runs examined in the worst case: one plus the most run ends falling
    /// strictly inside one block (ends are sorted, so equal blocks are adjacent).
    fn worst_scan(runs: &[Run<P>], start: u64, shift: u32, block_shift: u32) -> usize {
        let end = start + (1 << shift);
        let mask = (1u64 << block_shift) - 1;
        let (mut worst, mut current, mut count) = (0, u64::MAX, 0);
        for run in runs {
            if run.end >= end || (run.end - start) & mask == 0 {
                continue;
            }
            let block = (run.end - start) >> block_shift;
            if block == current {
                count += 1;
            } else {
                current = block;
                count = 1;
            }
            worst = worst.max(count);
        }
        worst + 1
    }

    /// The run holding `pfn`, which must not lie below the section.
    #[inline]
    pub(crate) fn find(&self, pfn: u64) -> Option<usize> {
        self.find_counting(pfn, || {})
    }

    /// [`find`](Self::find), calling `step` once per run it examines, so
    /// that tests measure the scan bound on the lookup itself rather than
    /// on a copy of it. `find` passes a closure that does nothing, which
    /// inlining removes: the release lookup is the same machine code.
    #[inline(always)]
    fn find_counting(&self, pfn: u64, mut step: impl FnMut()) -> Option<usize> {
        #[cfg(loom)]
        self.alive.with(|_| ());
        let block = (pfn - self.start) >> self.block_shift;
        if block > self.last_block as u64 {
            return None;
        }
        let mut i = self.blocks[block as usize] as usize;
        loop {
            step();
            let run = &self.runs[i];
            if pfn < run.end {
                return (pfn >= run.start).then_some(i);
            }
            i += 1;
        }
    }

    /// Alternative measured by the benchmark: binary search among the
    /// section's runs instead of the block table.
    pub(crate) fn find_by_search(&self, pfn: u64) -> Option<usize> {
        let runs = &self.runs[..self.len()];
        let i = runs.partition_point(|r| r.start <= pfn).checked_sub(1)?;
        (pfn < runs[i].end).then_some(i)
    }

    /// Runs in the section.
    pub(crate) fn len(&self) -> usize {
        self.runs.len() - 1
    }

    pub(crate) fn run(&self, i: usize) -> &Run<P> {
        &self.runs[i]
    }

    pub(crate) fn detail(&self, i: usize) -> &Detail {
        &self.details[i]
    }

    /// Whether run `i` starts in the section that begins at frame
    /// `section_start` (iteration lists each segment once: in the section
    /// holding its first frame).
    pub(crate) fn owns(&self, i: usize, section_start: u64) -> bool {
        self.runs[i].start >= section_start
    }

    pub(crate) fn bytes(&self) -> usize {
        self.blocks.len() * 4
            + self.runs.len() * core::mem::size_of::<Run<P>>()
            + self.details.len() * core::mem::size_of::<Detail>()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use alloc::vec;
    extern crate std;

    fn entries(ranges: &[(u64, u64)]) -> Vec<Entry<()>> {
        ranges
            .iter()
            .enumerate()
            .map(|(slot, &(start, end))| Entry {
                run: Run {
                    start,
                    end,
                    pages: ptr::null(),
                    slot: slot as u32,
                    generation: 0,
                },
                avail_start: start,
                avail_end: end,
                free_list: FreeList::DEFAULT,
                start_hint: 0,
            })
            .collect()
    }

    /// Runs the lookup examines for `pfn`, and what it finds.
    fn probe(section: &Section<()>, pfn: u64) -> (usize, Option<usize>) {
        let mut steps = 0;
        let found = section.find_counting(pfn, || steps += 1);
        (steps, found)
    }

    #[test]
    fn no_lookup_scans_more_than_max_scan_runs_however_runs_cluster() {
        let layouts: Vec<Vec<(u64, u64)>> = vec![
            // One-frame runs packed at the start, then nothing.
            (0..64).map(|i| (i, i + 1)).collect(),
            // One-frame runs every other frame.
            (0..256).map(|i| (2 * i, 2 * i + 1)).collect(),
            // The fragmented load test's shape: 1..7 frames cut from every 8.
            (0..64).map(|i| (8 * i + 1 + i % 7, 8 * i + 8)).collect(),
            // A run from the previous section, a cluster, a run into the next.
            vec![(0, 100), (100, 101), (101, 102), (102, 103), (300, 600)],
            // Two ends in the first 4 frames: a block size that allows one
            // scan of MAX_SCAN + 1 runs is tempting here.
            vec![(0, 1), (1, 2), (2, 512)],
        ];
        let mut most = 0;
        for (n, layout) in layouts.iter().enumerate() {
            let section = Section::build(0, 9, &entries(layout)).unwrap();
            for pfn in 0..512 {
                let (steps, found) = probe(&section, pfn);
                assert!(steps <= MAX_SCAN, "layout {n} pfn {pfn}: {steps} steps");
                let expected = layout.iter().position(|&(s, e)| s <= pfn && pfn < e);
                assert_eq!(found, expected, "layout {n} pfn {pfn}");
                assert_eq!(section.find(pfn), expected);
                most = most.max(steps);
            }
        }
        // The counter counts: these layouts make some lookup use the bound.
        assert_eq!(most, MAX_SCAN);
    }

    /// Runs of 1..=`longest` frames with gaps of 0..=`gap` frames over the
    /// section `[1024, 1536)`, the first and last possibly reaching into
    /// the neighbouring sections. A fixed xorshift generator: the same
    /// layouts every run.
    fn generated(state: &mut u64, longest: u64, gap: u64) -> Vec<(u64, u64)> {
        let mut next = |bound: u64| {
            *state ^= *state << 13;
            *state ^= *state >> 7;
            *state ^= *state << 17;
            *state % bound
        };
        let mut at = 1024 - next(longest + 1);
        let mut layout = Vec::new();
        while at < 1536 {
            let end = at + 1 + next(longest);
            if end > 1024 {
                layout.push((at, end));
            }
            at = end + next(gap + 1);
        }
        layout
    }

    #[test]
    fn scan_bound_holds_for_generated_fragmentation() {
        let mut state = 0x9e37_79b9_7f4a_7c15;
        let mut at_bound = 0;
        for case in 0..400u64 {
            let (longest, gap) = (1 << (case % 7), case % 5);
            let layout = generated(&mut state, longest, gap);
            let section = Section::build(1024, 9, &entries(&layout)).unwrap();
            let mut most = 0;
            for pfn in 1024..1536 {
                let (steps, found) = probe(&section, pfn);
                assert!(steps <= MAX_SCAN, "case {case} pfn {pfn}: {steps} steps");
                let expected = layout.iter().position(|&(s, e)| s <= pfn && pfn < e);
                assert_eq!(found, expected, "case {case} pfn {pfn}");
                // The benchmark's alternative lookup must agree.
                assert_eq!(
                    section.find_by_search(pfn),
                    expected,
                    "case {case} pfn {pfn}"
                );
                most = most.max(steps);
            }
            at_bound += usize::from(most == MAX_SCAN);
        }
        std::println!("{at_bound} of 400 generated layouts reach the scan bound");
        // Most layouts are fragmented enough that some lookup needs the
        // whole bound: the cases test the bound, not an easy shape.
        assert!(at_bound >= 200, "{at_bound} of 400 layouts reach the bound");
    }

    #[test]
    fn blocks_are_as_coarse_as_the_bound_allows_and_stop_at_the_last_run() {
        // Run ends at offsets 10 and 128 of the section at 1024. Blocks of
        // 2^8 hold both ends (3 steps), of 2^7 only the end at 10 (128
        // ends block 0 exactly): 2^7 is the coarsest within the bound, and
        // the runs end with block 0.
        let section = Section::build(1024, 9, &entries(&[(1024, 1034), (1040, 1152)])).unwrap();
        assert_eq!(section.block_shift, 7);
        assert_eq!((section.blocks.len(), section.last_block), (1, 0));
        assert_eq!(section.find(1151), Some(1));
        assert_eq!(section.find(1152), None);
        assert_eq!(section.find(1535), None);
        // Ending at offset 100 of blocks of 2^6 (the end at 10 shares block
        // 0 with no other): two blocks.
        let section = Section::build(1024, 9, &entries(&[(1024, 1034), (1040, 1124)])).unwrap();
        assert_eq!(section.block_shift, 6);
        assert_eq!((section.blocks.len(), section.last_block), (2, 1));
        assert_eq!(section.find(1123), Some(1));
        assert_eq!(section.find(1124), None);
        // Two blocks of 4 bytes, two runs and the sentinel of 32 bytes
        // each, and two details.
        let details = 2 * size_of::<Detail>();
        assert_eq!(section.bytes(), 2 * 4 + 3 * 32 + details);
    }

    #[test]
    fn a_section_of_no_runs_finds_nothing() {
        let section = Section::<()>::build(1024, 9, &[]).unwrap();
        assert_eq!(section.len(), 0);
        assert!((1024..1536).all(|pfn| section.find(pfn).is_none()));
    }
}
