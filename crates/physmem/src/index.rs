//! The published index: an immutable snapshot of all segments that readers
//! search without locks. A write builds a new one and retires the old.
//!
//! Lookup is direct-indexed, so its cost does not grow with fragmentation:
//! the frame number picks a *section* (2^15 frames, 128 MiB, as Linux's
//! SPARSEMEM), the section picks a *block* of its own size, and the block
//! names the first run (segment) that can hold any of its frames. Each
//! section chooses its block size so that at most [`MAX_SCAN`] runs are
//! looked at, so a lookup is three dependent loads and a short scan whether
//! there are 32 segments or 80,000. Sections with one run have one block.

use alloc::boxed::Box;
use alloc::vec::Vec;

use crate::sync::{AtomicU64, Ordering};
use crate::types::{FreeList, SegmentHandle};

/// log2 of frames per section, unless the address span needs larger ones.
pub(crate) const SECTION_SHIFT: u32 = 15;
/// Most sections in a table; wider spans get larger sections.
const MAX_SECTIONS: u64 = 1 << 20;
/// Most runs one lookup examines.
pub(crate) const MAX_SCAN: usize = 2;

/// One segment as lookups see it; the hot part, 32 bytes.
pub(crate) struct Run<P> {
    pub(crate) start: u64,
    pub(crate) end: u64,
    /// The descriptor of `start`.
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
    pub(crate) start_hint: AtomicU64,
}

impl Detail {
    #[inline]
    fn copy(&self) -> Detail {
        Detail {
            avail_start: self.avail_start,
            avail_end: self.avail_end,
            free_list: self.free_list,
            start_hint: AtomicU64::new(self.start_hint.load(Ordering::Relaxed)),
        }
    }
}

#[derive(Clone, Copy)]
struct Section {
    first_block: u32,
    /// Blocks past the section's last run are not stored: lookups there
    /// clamp to the last block and end their scan after the run it names.
    last_block: u32,
    block_shift: u32,
}

/// What a write hands to [`Index::build`] for each segment.
pub(crate) struct Entry<P> {
    pub(crate) run: Run<P>,
    pub(crate) avail_start: u64,
    pub(crate) avail_end: u64,
    pub(crate) free_list: FreeList,
    pub(crate) start_hint: u64,
}

struct Buffers<P> {
    sections: Vec<Section>,
    blocks: Vec<u32>,
    runs: Vec<Run<P>>,
    details: Vec<Detail>,
    slot_runs: Vec<u32>,
}

pub(crate) struct Index<P> {
    shift: u32,
    base: u64,
    sections: Vec<Section>,
    blocks: Vec<u32>,
    /// Sorted by start, followed by a sentinel that ends every scan.
    runs: Vec<Run<P>>,
    details: Vec<Detail>,
    /// Slot → run index, `u32::MAX` when the slot is free.
    slot_runs: Vec<u32>,
}

// SAFETY: the raw descriptor pointers are shared references to `P`s that the
// index's owner keeps alive; an index is only read once published.
unsafe impl<P: Sync> Send for Index<P> {}
unsafe impl<P: Sync> Sync for Index<P> {}

const NO_RUN: u32 = u32::MAX;

impl<P> Index<P> {
    /// Builds the index of `entries`, sorted by start and disjoint.
    /// Takes the vectors of a reclaimed index, emptied, so that a write
    /// reuses warm memory instead of faulting in fresh pages.
    fn buffers(spare: Option<Box<Index<P>>>) -> Buffers<P> {
        match spare {
            Some(index) => {
                let Index {
                    mut sections,
                    mut blocks,
                    mut runs,
                    mut details,
                    mut slot_runs,
                    ..
                } = *index;
                sections.clear();
                blocks.clear();
                runs.clear();
                details.clear();
                slot_runs.clear();
                Buffers { sections, blocks, runs, details, slot_runs }
            }
            None => Buffers {
                sections: Vec::new(),
                blocks: Vec::new(),
                runs: Vec::new(),
                details: Vec::new(),
                slot_runs: Vec::new(),
            },
        }
    }

    pub(crate) fn build(entries: Vec<Entry<P>>, slot_count: usize, spare: Option<Box<Index<P>>>) -> Self {
        let count = entries.len();
        let Buffers {
            mut sections,
            mut blocks,
            mut runs,
            mut details,
            mut slot_runs,
        } = Self::buffers(spare);
        runs.reserve(count + 1);
        details.reserve(count);
        slot_runs.resize(slot_count, NO_RUN);
        for (i, entry) in entries.into_iter().enumerate() {
            slot_runs[entry.run.slot as usize] = i as u32;
            details.push(Detail {
                avail_start: entry.avail_start,
                avail_end: entry.avail_end,
                free_list: entry.free_list,
                start_hint: AtomicU64::new(entry.start_hint),
            });
            runs.push(entry.run);
        }
        let (shift, base) = Self::tables(&runs, &mut sections, &mut blocks);
        runs.push(Self::sentinel());
        Index {
            shift,
            base,
            sections,
            blocks,
            runs,
            details,
            slot_runs,
        }
    }

    /// A copy of this index with runs `[at, at + remove)` replaced by
    /// `insert` (sorted, fitting in that place): the common write, done with
    /// bulk copies instead of a rebuild from the writer's records.
    pub(crate) fn splice(
        &self,
        at: usize,
        remove: usize,
        insert: Vec<Entry<P>>,
        slot_count: usize,
        spare: Option<Box<Index<P>>>,
    ) -> Self {
        let old_len = self.len();
        let tail = at + remove;
        debug_assert!(tail <= old_len);
        let added = insert.len();
        let count = old_len - remove + added;
        let Buffers {
            mut sections,
            mut blocks,
            mut runs,
            mut details,
            mut slot_runs,
        } = Self::buffers(spare);
        runs.reserve(count + 1);
        details.reserve(count);
        runs.extend_from_slice(&self.runs[..at]);
        details.extend(self.details[..at].iter().map(Detail::copy));
        slot_runs.extend_from_slice(&self.slot_runs);
        slot_runs.resize(slot_count, NO_RUN);
        for run in &self.runs[at..tail] {
            slot_runs[run.slot as usize] = NO_RUN;
        }
        // Runs after the replaced ones move by the difference in count.
        if added != remove {
            for index in slot_runs.iter_mut() {
                if *index != NO_RUN && *index as usize >= tail {
                    *index = (*index as usize + added - remove) as u32;
                }
            }
        }
        for (k, entry) in insert.into_iter().enumerate() {
            slot_runs[entry.run.slot as usize] = (at + k) as u32;
            details.push(Detail {
                avail_start: entry.avail_start,
                avail_end: entry.avail_end,
                free_list: entry.free_list,
                start_hint: AtomicU64::new(entry.start_hint),
            });
            runs.push(entry.run);
        }
        runs.extend_from_slice(&self.runs[tail..old_len]);
        details.extend(self.details[tail..old_len].iter().map(Detail::copy));
        let (shift, base) = Self::tables(&runs, &mut sections, &mut blocks);
        runs.push(Self::sentinel());
        Index {
            shift,
            base,
            sections,
            blocks,
            runs,
            details,
            slot_runs,
        }
    }

    /// Index of the first run starting at or after `start`.
    pub(crate) fn position(&self, start: u64) -> usize {
        self.runs[..self.len()].partition_point(|r| r.start < start)
    }

    fn sentinel() -> Run<P> {
        Run {
            start: u64::MAX,
            end: u64::MAX,
            pages: core::ptr::null(),
            slot: NO_RUN,
            generation: 0,
        }
    }

    fn tables(runs: &[Run<P>], sections: &mut Vec<Section>, blocks: &mut Vec<u32>) -> (u32, u64) {
        let (Some(first), Some(last)) = (runs.first(), runs.last()) else {
            return (SECTION_SHIFT, 0);
        };
        let (low, high) = (first.start, last.end - 1);
        let mut shift = SECTION_SHIFT;
        while (high >> shift) - (low >> shift) + 1 > MAX_SECTIONS {
            shift += 1;
        }
        let base = low >> shift;
        let section_count = (high >> shift) - base + 1;
        sections.reserve(section_count as usize);
        let mut first = 0;
        for s in 0..section_count {
            let section_start = (base + s) << shift;
            let section_end = section_start + (1 << shift);
            while first < runs.len() && runs[first].end <= section_start {
                first += 1;
            }
            let mut last = first;
            while last < runs.len() && runs[last].start < section_end {
                last += 1;
            }
            let inside = &runs[first..last];
            let block_shift = Self::block_shift(inside, section_start, shift);
            let covered_end = inside
                .last()
                .map_or(section_start + 1, |r| r.end.min(section_end));
            let block_count = ((covered_end - section_start - 1) >> block_shift) + 1;
            sections.push(Section {
                first_block: blocks.len() as u32,
                last_block: (block_count - 1) as u32,
                block_shift,
            });
            // Block k names the first run ending after the block's start:
            // run i covers the blocks starting in [end of run i-1, end of run i).
            let table_start = blocks.len();
            blocks.resize(table_start + block_count as usize, last as u32);
            let mut block = 0u64;
            for (i, run) in runs[first..last].iter().enumerate() {
                let end = run.end.min(section_start + (block_count << block_shift));
                // Blocks whose start is below `end`.
                let upto = (end.saturating_sub(section_start) + (1 << block_shift) - 1) >> block_shift;
                if upto > block {
                    blocks[table_start + block as usize..table_start + upto as usize].fill((first + i) as u32);
                    block = upto;
                }
            }
        }
        (shift, base)
    }

    /// The coarsest block size at which no lookup scans more than
    /// [`MAX_SCAN`] runs, starting near one block per run.
    fn block_shift(inside: &[Run<P>], section_start: u64, shift: u32) -> u32 {
        if inside.len() <= 1 {
            return shift;
        }
        let wanted = (inside.len() as u64).next_power_of_two().trailing_zeros();
        let mut block_shift = shift.saturating_sub(wanted);
        while block_shift > 0 && Self::worst_scan(inside, section_start, shift, block_shift) > MAX_SCAN {
            block_shift -= 1;
        }
        block_shift
    }

    /// Runs examined in the worst case: one plus the most run ends falling
    /// strictly inside one block (ends are sorted, so equal blocks are adjacent).
    fn worst_scan(inside: &[Run<P>], section_start: u64, shift: u32, block_shift: u32) -> usize {
        let section_end = section_start + (1 << shift);
        let mask = (1u64 << block_shift) - 1;
        let (mut worst, mut current, mut count) = (0, u64::MAX, 0);
        for run in inside {
            let end = run.end;
            if end <= section_start || end >= section_end || (end - section_start) & mask == 0 {
                continue;
            }
            let block = (end - section_start) >> block_shift;
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

    /// The run holding `pfn`: the lookup every reader does.
    #[inline]
    pub(crate) fn find(&self, pfn: u64) -> Option<usize> {
        let section = (pfn >> self.shift).wrapping_sub(self.base);
        let entry = *self.sections.get(section as usize)?;
        let offset = pfn & ((1u64 << self.shift) - 1);
        let block = (offset >> entry.block_shift).min(entry.last_block as u64);
        let block = entry.first_block as usize + block as usize;
        let mut i = self.blocks[block] as usize;
        loop {
            let run = &self.runs[i];
            if pfn < run.end {
                return (pfn >= run.start).then_some(i);
            }
            i += 1;
        }
    }

    /// Alternative measured by the benchmark: binary search over all runs
    /// (FreeBSD's and vm-memory's lookup).
    pub(crate) fn find_by_binary_search(&self, pfn: u64) -> Option<usize> {
        let runs = &self.runs[..self.runs.len() - 1];
        let after = runs.partition_point(|r| r.start <= pfn);
        let i = after.checked_sub(1)?;
        (pfn < runs[i].end).then_some(i)
    }

    /// Alternative measured by the benchmark: the section table narrows the
    /// runs to one section's, then binary search among them.
    pub(crate) fn find_by_section_search(&self, pfn: u64) -> Option<usize> {
        let section = (pfn >> self.shift).wrapping_sub(self.base) as usize;
        let entry = *self.sections.get(section)?;
        let low = self.blocks[entry.first_block as usize] as usize;
        let high = match self.sections.get(section + 1) {
            Some(next) => self.blocks[next.first_block as usize] as usize + 1,
            None => self.runs.len() - 1,
        }
        .min(self.runs.len() - 1);
        let runs = &self.runs[low..high];
        let after = runs.partition_point(|r| r.start <= pfn);
        let i = after.checked_sub(1)?;
        (pfn < runs[i].end).then_some(low + i)
    }

    /// Number of segments.
    pub(crate) fn len(&self) -> usize {
        self.runs.len() - 1
    }

    pub(crate) fn run(&self, i: usize) -> &Run<P> {
        &self.runs[i]
    }

    pub(crate) fn detail(&self, i: usize) -> &Detail {
        &self.details[i]
    }

    /// The run a live handle names.
    pub(crate) fn resolve(&self, handle: SegmentHandle) -> Option<usize> {
        let i = *self.slot_runs.get(handle.slot as usize)?;
        if i == NO_RUN || self.runs[i as usize].generation != handle.generation {
            return None;
        }
        Some(i as usize)
    }

    /// Bytes of lookup tables (sections and blocks), for the benchmark.
    pub(crate) fn table_bytes(&self) -> usize {
        self.sections.len() * core::mem::size_of::<Section>() + self.blocks.len() * 4
    }
}
