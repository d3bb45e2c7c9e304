//! `hotkern`: the cache this crate proposes.
//!
//! What it keeps from FreeBSD's loader cache as of 2016: one cache per
//! device, O(1) lookup, a miss read straight into cache memory with one
//! device operation, partial-block requests copying only what was asked.
//!
//! What it changes, and why:
//!
//! * **Where blocks go.** The 2016 design's direct-mapped slot
//!   `b & (nblks - 1)` makes a FAT sector and the file data that happens to share its slot
//!   evict each other, and a FAT read-ahead overwrites data read ahead but
//!   not yet used. Here a hash index maps blocks to slots, and slots form
//!   two rings: read-ahead runs of sequential streams fill the *stream*
//!   ring, everything else (FAT, directories, boot sector) the *reuse*
//!   ring. File data passing through once can no longer push out the
//!   metadata a loader consults again and again.
//! * **When to read ahead.** Only for a request that continues a stream
//!   (it starts in the last block a stream touched, or a little beyond);
//!   up to four streams are followed at once, so the FAT and the file data
//!   are each recognised as sequential though their requests interleave.
//! * **How much.** Each stream's window doubles when the previous
//!   read-ahead was fully consumed and halves when less than half of it was,
//!   capped so that a miss plus its read-ahead is one device operation of
//!   at most the device's largest transfer; it never runs past the end of
//!   the device nor over blocks already cached; all arithmetic saturates,
//!   so no request size can underflow it.
//! * **Large requests** bypass the cache: their aligned middle goes from
//!   the device straight into the caller's buffer, only partial edge
//!   blocks go through the cache.
//! * **Writes** go through to the device first; on success the cached
//!   copies of the blocks written are updated in place, on failure they are
//!   dropped (the device may hold either version).

use alloc::vec;
use alloc::vec::Vec;

use hashbrown::HashMap;

use crate::cache::{merge_write, read_split, write_split, BlockCache, Span};
use crate::device::BlockDevice;
use crate::error::{ConfigError, IoError};
use crate::stats::CacheStats;

/// Streams followed at once.
const STREAMS: usize = 4;
/// First read-ahead window of a new sequential stream, in bytes.
const INITIAL_WINDOW_BYTES: usize = 16 << 10;
/// The smallest cache, in blocks.
const MIN_SLOTS: usize = 8;

const STREAM_RING: usize = 0;
const REUSE_RING: usize = 1;

const EMPTY: u64 = u64::MAX;

const FREE_SLOT: Slot = Slot {
    block: EMPTY,
    readahead: false,
};

#[derive(Debug, Clone, Copy)]
struct Slot {
    block: u64,
    readahead: bool,
}

#[derive(Debug, Clone, Copy)]
struct Ring {
    start: usize,
    len: usize,
    head: usize,
}

#[derive(Debug, Clone, Copy, Default)]
struct Stream {
    active: bool,
    last: u64,
    next: u64,
    window: u64,
    ra_start: u64,
    ra_end: u64,
    consumed: u64,
    used: u64,
}

/// The hotkern block cache (see the module documentation).
///
/// ```
/// use hotkern_bcache::{BlockCache, HotkernCache, MemoryDevice};
/// let mut cache = HotkernCache::new(MemoryDevice::zeroed(4096, 512).unwrap(), 256 << 10);
/// let mut buf = [0u8; 512];
/// for block in 0..64 {
///     cache.read(block, 0, &mut buf).unwrap();
/// }
/// let stats = cache.stats();
/// // Sequential 512-byte reads: read-ahead grows and most blocks are hits.
/// assert!(stats.block_hits > 50);
/// assert!(stats.device_ops < 8);
/// ```
#[derive(Debug)]
pub struct HotkernCache<D> {
    device: D,
    block_size: usize,
    block_count: u64,
    data: Vec<u8>,
    slots: Vec<Slot>,
    index: HashMap<u64, usize>,
    rings: [Ring; 2],
    streams: [Stream; STREAMS],
    clock: u64,
    io_cap: u64,
    initial_window: u64,
    /// Slot of the block found last: sequential requests find the next
    /// block there or in the following slot without hashing.
    hint: usize,
    stats: CacheStats,
}

impl<D: BlockDevice> HotkernCache<D> {
    /// A cache of `budget_bytes` (at least 8 blocks) in front of `device`.
    pub fn new(device: D, budget_bytes: usize) -> Self {
        let slots = Self::slot_count(&device, budget_bytes);
        let data = vec![0u8; slots * device.block_size()];
        let table = vec![FREE_SLOT; slots];
        let index = HashMap::with_capacity(slots);
        Self::assemble(device, data, table, index)
    }

    /// Like [`new`](Self::new), but a memory allocation that fails is
    /// [`ConfigError::OutOfMemory`] rather than the end of the program: a
    /// boot loader with a small heap falls back to a smaller cache, as
    /// FreeBSD's `bcache_allocate()` does.
    ///
    /// ```
    /// use hotkern_bcache::{ConfigError, HotkernCache, MemoryDevice};
    /// let cache = HotkernCache::try_new(MemoryDevice::zeroed(64, 512).unwrap(), 16 << 10);
    /// assert_eq!(cache.unwrap().slots(), 32);
    /// let huge = HotkernCache::try_new(MemoryDevice::zeroed(64, 512).unwrap(), usize::MAX);
    /// assert!(matches!(huge, Err(ConfigError::OutOfMemory { .. })));
    /// ```
    pub fn try_new(device: D, budget_bytes: usize) -> Result<Self, ConfigError> {
        let slots = Self::slot_count(&device, budget_bytes);
        let bytes = slots.saturating_mul(device.block_size());
        let out_of_memory = ConfigError::OutOfMemory { bytes };
        let mut data = Vec::new();
        data.try_reserve_exact(bytes).map_err(|_| out_of_memory)?;
        data.resize(bytes, 0);
        let mut table = Vec::new();
        table.try_reserve_exact(slots).map_err(|_| out_of_memory)?;
        table.resize(slots, FREE_SLOT);
        let mut index = HashMap::new();
        index.try_reserve(slots).map_err(|_| out_of_memory)?;
        Ok(Self::assemble(device, data, table, index))
    }

    fn slot_count(device: &D, budget_bytes: usize) -> usize {
        (budget_bytes / device.block_size()).max(MIN_SLOTS)
    }

    /// The cache around `data` (whole slots), their `table` and an index
    /// with room for as many entries.
    fn assemble(device: D, data: Vec<u8>, table: Vec<Slot>, index: HashMap<u64, usize>) -> Self {
        let block_size = device.block_size();
        let block_count = device.block_count();
        let slots = data.len() / block_size;
        let reuse = (slots / 4).max(2);
        let stream = slots - reuse;
        let io_cap = u64::from(device.max_transfer_blocks())
            .min((stream / 2) as u64)
            .max(1);
        let initial_window = ((INITIAL_WINDOW_BYTES / block_size) as u64).clamp(1, io_cap);
        HotkernCache {
            device,
            block_size,
            block_count,
            data,
            slots: table,
            index,
            rings: [
                Ring {
                    start: 0,
                    len: stream,
                    head: 0,
                },
                Ring {
                    start: stream,
                    len: reuse,
                    head: 0,
                },
            ],
            streams: [Stream::default(); STREAMS],
            clock: 0,
            io_cap,
            initial_window,
            hint: 0,
            stats: CacheStats::default(),
        }
    }

    /// The device behind.
    pub fn device(&self) -> &D {
        &self.device
    }

    /// Blocks the cache holds at most.
    pub fn slots(&self) -> usize {
        self.slots.len()
    }

    /// Finds the stream `span` continues, or starts a new one in place of
    /// the least recently used. Returns (stream, whether it continues one).
    fn classify(&mut self, span: &Span) -> (usize, bool) {
        for (i, s) in self.streams.iter().enumerate() {
            // Small forward gaps (the unread tail of a file's last cluster
            // before the next file) still count as sequential.
            let reach = s.next.saturating_add(s.window.min(self.io_cap));
            if s.active && span.first >= s.last && span.first <= reach {
                return (i, true);
            }
        }
        let victim = (0..STREAMS)
            .min_by_key(|&i| (self.streams[i].active, self.streams[i].used))
            .unwrap_or(0);
        self.streams[victim] = Stream {
            active: true,
            ..Stream::default()
        };
        (victim, false)
    }

    fn follow(&mut self, stream: usize, span: &Span) {
        self.clock += 1;
        let s = &mut self.streams[stream];
        s.last = span.end - 1;
        s.next = span.end;
        s.used = self.clock;
    }

    /// The next read-ahead window of a stream that just missed, tuned by how
    /// much of its previous read-ahead was consumed.
    fn tune(&mut self, stream: usize) -> u64 {
        let s = &mut self.streams[stream];
        let issued = s.ra_end - s.ra_start;
        if issued == 0 {
            s.window = s.window.max(self.initial_window);
        } else if s.consumed >= issued {
            s.window = (s.window.saturating_mul(2)).min(self.io_cap);
        } else if s.consumed * 2 < issued {
            s.window = (s.window / 2).max(1);
        }
        s.window
    }

    fn hit(&mut self, slot: usize, stream: usize) {
        self.stats.block_hits += 1;
        let entry = &mut self.slots[slot];
        if entry.readahead {
            entry.readahead = false;
            self.stats.readahead_consumed += 1;
            let s = &mut self.streams[stream];
            if entry.block >= s.ra_start && entry.block < s.ra_end {
                s.consumed += 1;
            }
        }
    }

    /// Claims `n` contiguous slots of a ring, evicting what they held.
    fn allocate(&mut self, ring: usize, n: usize) -> usize {
        let r = &mut self.rings[ring];
        if r.head + n > r.len {
            r.head = 0;
        }
        let at = r.start + r.head;
        r.head += n;
        if r.head == r.len {
            r.head = 0;
        }
        for slot in &mut self.slots[at..at + n] {
            if slot.block != EMPTY {
                self.index.remove(&slot.block);
                slot.block = EMPTY;
                slot.readahead = false;
            }
        }
        at
    }

    /// The slot holding `block`, if cached.
    fn find(&mut self, block: u64) -> Option<usize> {
        for slot in [self.hint, self.hint + 1] {
            if self.slots.get(slot).is_some_and(|s| s.block == block) {
                self.hint = slot;
                return Some(slot);
            }
        }
        let slot = *self.index.get(&block)?;
        self.hint = slot;
        Some(slot)
    }

    fn copy_piece(&self, span: &Span, block: u64, slot: usize, buf: &mut [u8]) {
        let bs = self.block_size;
        let piece = span.piece(block, bs);
        let from = slot * bs + piece.in_block;
        let to = piece.in_buf..piece.in_buf + piece.len;
        buf[to].copy_from_slice(&self.data[from..from + piece.len]);
    }

    fn read_cached(
        &mut self,
        span: &Span,
        buf: &mut [u8],
        stream: usize,
        sequential: bool,
    ) -> Result<(), IoError> {
        let bs = self.block_size;
        let mut block = span.first;
        while block < span.end {
            if let Some(slot) = self.find(block) {
                self.hit(slot, stream);
                self.copy_piece(span, block, slot, buf);
                block += 1;
                continue;
            }
            let mut miss_end = block + 1;
            while miss_end < span.end && !self.index.contains_key(&miss_end) {
                miss_end += 1;
            }
            let run = miss_end - block;
            self.stats.block_misses += run;
            let mut readahead = 0;
            if sequential {
                let wanted = self
                    .tune(stream)
                    .min(self.io_cap.saturating_sub(run))
                    .min(self.block_count - miss_end);
                readahead = wanted;
            }
            let n = (run + readahead) as usize;
            let ring = if readahead > 0 || n > self.rings[REUSE_RING].len {
                STREAM_RING
            } else {
                REUSE_RING
            };
            let at = self.allocate(ring, n);
            read_split(
                &mut self.device,
                block,
                &mut self.data[at * bs..(at + n) * bs],
                &mut self.stats,
            )?;
            for j in 0..n {
                let b = block + j as u64;
                self.slots[at + j] = Slot {
                    block: b,
                    readahead: j as u64 >= run,
                };
                // Read-ahead may cover blocks cached elsewhere: the fresh
                // copy (the device is always current) replaces the old one.
                if let Some(old) = self.index.insert(b, at + j) {
                    self.slots[old] = Slot {
                        block: EMPTY,
                        readahead: false,
                    };
                }
            }
            if readahead > 0 {
                self.stats.readahead_issued += readahead;
                let s = &mut self.streams[stream];
                s.ra_start = miss_end;
                s.ra_end = miss_end + readahead;
                s.consumed = 0;
            }
            for j in 0..run {
                self.copy_piece(span, block + j, at + j as usize, buf);
            }
            block = miss_end;
        }
        Ok(())
    }

    /// A large request: partial edge blocks through the cache, the aligned
    /// middle straight from the device into `buf`.
    fn read_bypass(&mut self, span: &Span, buf: &mut [u8], stream: usize) -> Result<(), IoError> {
        self.stats.bypasses += 1;
        let bs = self.block_size;
        let mut low = span.first;
        let mut buf_low = 0;
        if span.offset != 0 {
            let head = bs - span.offset;
            let edge = Span {
                first: low,
                end: low + 1,
                offset: span.offset,
                len: head,
            };
            self.read_cached(&edge, &mut buf[..head], stream, false)?;
            low += 1;
            buf_low = head;
        }
        let mut high = span.end;
        let mut buf_high = span.len;
        let tail = (span.offset + span.len) % bs;
        if tail != 0 {
            high -= 1;
            buf_high -= tail;
            let edge = Span {
                first: high,
                end: high + 1,
                offset: 0,
                len: tail,
            };
            self.read_cached(&edge, &mut buf[buf_high..], stream, false)?;
        }
        if high > low {
            read_split(
                &mut self.device,
                low,
                &mut buf[buf_low..buf_high],
                &mut self.stats,
            )?;
        }
        Ok(())
    }
}

impl<D: BlockDevice> BlockCache for HotkernCache<D> {
    fn block_size(&self) -> usize {
        self.block_size
    }

    fn block_count(&self) -> u64 {
        self.block_count
    }

    fn read(&mut self, block: u64, offset: usize, buf: &mut [u8]) -> Result<(), IoError> {
        let span = Span::new(block, offset, buf.len(), self.block_size, self.block_count)?;
        self.stats.requests += 1;
        if span.len == 0 {
            return Ok(());
        }
        let (stream, sequential) = self.classify(&span);
        let result = if span.blocks() > self.io_cap {
            self.read_bypass(&span, buf, stream)
        } else {
            self.read_cached(&span, buf, stream, sequential)
        };
        self.follow(stream, &span);
        result
    }

    fn write(&mut self, block: u64, offset: usize, data: &[u8]) -> Result<(), IoError> {
        let bs = self.block_size;
        let span = Span::new(block, offset, data.len(), bs, self.block_count)?;
        self.stats.requests += 1;
        if span.len == 0 {
            return Ok(());
        }
        let merged;
        let whole: &[u8] = if span.aligned(bs) {
            data
        } else {
            let (index, cached, device, stats) =
                (&self.index, &self.data, &mut self.device, &mut self.stats);
            merged = merge_write(&span, bs, data, |b, into| match index.get(&b) {
                Some(&slot) => {
                    into.copy_from_slice(&cached[slot * bs..(slot + 1) * bs]);
                    Ok(())
                }
                None => read_split(device, b, into, stats),
            })?;
            &merged
        };
        let result = write_split(&mut self.device, span.first, whole, &mut self.stats);
        for (j, content) in whole.chunks(bs).enumerate() {
            let b = span.first + j as u64;
            let Some(&slot) = self.index.get(&b) else {
                continue;
            };
            if result.is_ok() {
                self.data[slot * bs..(slot + 1) * bs].copy_from_slice(content);
            } else {
                self.index.remove(&b);
                self.slots[slot] = Slot {
                    block: EMPTY,
                    readahead: false,
                };
            }
        }
        result
    }

    fn stats(&self) -> CacheStats {
        self.stats
    }

    fn reset_stats(&mut self) {
        self.stats = CacheStats::default();
    }

    fn name(&self) -> &'static str {
        "hotkern"
    }
}

#[cfg(test)]
mod tests;
