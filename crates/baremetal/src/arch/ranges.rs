//! Sets of page-frame ranges in fixed storage: how the kernel turns the
//! loader's memory map into the segments it gives physmem, before there is
//! a heap.

/// Ranges a set holds; more are counted in [`FrameRanges::dropped`].
pub const MAX_RANGES: usize = 64;

/// Bytes per page frame.
pub const PAGE_SIZE: u64 = 4096;

/// Sorted, disjoint ranges of page frames `[start, end)`. [`add`](Self::add)
/// merges ranges that touch; [`split_at`](Self::split_at) keeps two apart.
#[derive(Clone)]
pub struct FrameRanges {
    ranges: [(u64, u64); MAX_RANGES],
    len: usize,
    /// Ranges lost because the storage was full.
    pub dropped: usize,
}

impl FrameRanges {
    /// An empty set.
    pub const fn new() -> Self {
        FrameRanges {
            ranges: [(0, 0); MAX_RANGES],
            len: 0,
            dropped: 0,
        }
    }

    /// The ranges, in address order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.ranges[..self.len].iter().copied()
    }

    /// Number of ranges.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Number of frames in all ranges.
    pub fn frames(&self) -> u64 {
        self.iter().map(|(start, end)| end - start).sum()
    }

    /// Whether frame `pfn` is in the set.
    pub fn contains(&self, pfn: u64) -> bool {
        self.iter().any(|(start, end)| start <= pfn && pfn < end)
    }

    /// Adds the whole frames inside bytes `[start, end)` (a partial frame
    /// at either end is not usable RAM), merging with what touches them.
    pub fn add_bytes(&mut self, start: u64, end: u64) {
        let first = start.div_ceil(PAGE_SIZE);
        let last = end / PAGE_SIZE;
        if first < last {
            self.add(first, last);
        }
    }

    /// Takes out every frame that bytes `[start, end)` touch.
    pub fn remove_bytes(&mut self, start: u64, end: u64) {
        let first = start / PAGE_SIZE;
        let last = end.div_ceil(PAGE_SIZE);
        if first < last {
            self.remove(first, last);
        }
    }

    /// Adds frames `[start, end)`, merging overlapping and adjacent ranges.
    pub fn add(&mut self, mut start: u64, mut end: u64) {
        // Absorb every range that overlaps or touches the new one.
        let mut index = 0;
        while index < self.len {
            let (s, e) = self.ranges[index];
            if s <= end && start <= e {
                start = start.min(s);
                end = end.max(e);
                self.take(index);
            } else {
                index += 1;
            }
        }
        self.put(start, end);
    }

    /// Takes frames `[start, end)` out, splitting a range that contains them.
    pub fn remove(&mut self, start: u64, end: u64) {
        let mut index = 0;
        while index < self.len {
            let (s, e) = self.ranges[index];
            if e <= start || end <= s {
                index += 1;
                continue;
            }
            self.take(index);
            if s < start {
                self.put(s, start);
            }
            if end < e {
                self.put(end, e);
            }
            // The pieces went in sorted; restart is simplest and the sets
            // are tiny.
            index = 0;
        }
    }

    /// Splits any range that crosses frame `pfn`, so no range straddles it.
    pub fn split_at(&mut self, pfn: u64) {
        if let Some(index) = self.ranges[..self.len]
            .iter()
            .position(|&(s, e)| s < pfn && pfn < e)
        {
            let (s, e) = self.ranges[index];
            self.ranges[index] = (s, pfn);
            // Kept apart on purpose: `put` does not merge.
            self.put(pfn, e);
        }
    }

    fn take(&mut self, index: usize) {
        self.ranges.copy_within(index + 1..self.len, index);
        self.len -= 1;
    }

    /// Inserts in address order, without merging.
    fn put(&mut self, start: u64, end: u64) {
        if self.len == MAX_RANGES {
            self.dropped += 1;
            return;
        }
        let at = self.ranges[..self.len]
            .iter()
            .position(|&(s, _)| s > start)
            .unwrap_or(self.len);
        self.ranges.copy_within(at..self.len, at + 1);
        self.ranges[at] = (start, end);
        self.len += 1;
    }
}
