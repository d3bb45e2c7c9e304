//! `freebsd2016`: FreeBSD's loader cache as of 2016 (Toomas Soome's
//! redesign of the loader's bcache), as a baseline.
//!
//! One cache per device; its size a power of two in blocks (the total split
//! by the device count rounded up to a power of two); direct-mapped, block
//! `b` lives in slot `b & (nblks - 1)`, so contiguous blocks sit in
//! contiguous slots: a hit is one copy and a miss one device read straight
//! into the cache. A miss reads from the first missing block to the end of
//! the request plus read-ahead; read-ahead never wraps past the end of the
//! cache (near the end it shrinks, down to nothing), is halved by a miss of
//! more than `BCACHE_MINREADAHEAD` blocks and doubled back by every request
//! served entirely from the cache. Requests over half the cache that start
//! on a block boundary bypass it;
//! writes invalidate the blocks they cover.
//!
//! Deliberate differences: the original had no idea of the disk's size and
//! let read-ahead run past its end (the driver then failed or truncated the
//! read); here read-ahead stops at the last block. A bypassed write also
//! invalidates what it covers (the original skipped the cache entirely).

use alloc::vec;
use alloc::vec::Vec;

use crate::cache::{
    merge_write_from_device, read_split, read_uncached, write_split, BlockCache, Span,
};
use crate::device::BlockDevice;
use crate::error::IoError;
use crate::stats::CacheStats;

/// Largest read-ahead, in blocks (`BCACHE_READAHEAD`).
pub const FREEBSD_READAHEAD: u64 = 256;
/// Misses shorter than this leave the read-ahead alone (`BCACHE_MINREADAHEAD`).
pub const FREEBSD_MIN_READAHEAD: u64 = 32;
/// The smallest cache the original allocates, in blocks.
const MIN_BLOCKS: usize = 32;

const INVALID: u64 = u64::MAX;

/// The 2016 direct-mapped per-device cache.
///
/// ```
/// use hotkern_bcache::{BlockCache, FreeBsd2016Cache, MemoryDevice};
/// let mut cache = FreeBsd2016Cache::new(MemoryDevice::zeroed(4096, 512).unwrap(), 64 << 10);
/// assert_eq!(cache.slots(), 128);
/// let mut buf = [0u8; 512];
/// cache.read(0, 0, &mut buf).unwrap(); // one miss, 127 blocks of read-ahead (up to the cache's end)
/// cache.read(1, 0, &mut buf).unwrap();
/// assert_eq!(cache.stats().block_hits, 1);
/// assert_eq!(cache.stats().readahead_issued, 127);
/// ```
#[derive(Debug)]
pub struct FreeBsd2016Cache<D> {
    device: D,
    block_size: usize,
    nblks: usize,
    data: Vec<u8>,
    blkno: Vec<u64>,
    readahead_pending: Vec<bool>,
    ra: u64,
    bounce: Vec<u8>,
    stats: CacheStats,
}

impl<D: BlockDevice> FreeBsd2016Cache<D> {
    /// A cache of `budget_bytes` (rounded down to a power of two of blocks,
    /// at least 32 blocks) in front of `device`.
    pub fn new(device: D, budget_bytes: usize) -> Self {
        let block_size = device.block_size();
        let wanted = (budget_bytes / block_size).max(MIN_BLOCKS);
        let nblks = 1usize << (usize::BITS - 1 - wanted.leading_zeros());
        FreeBsd2016Cache {
            device,
            block_size,
            nblks,
            data: vec![0u8; nblks * block_size],
            blkno: vec![INVALID; nblks],
            readahead_pending: vec![false; nblks],
            ra: FREEBSD_READAHEAD,
            bounce: Vec::new(),
            stats: CacheStats::default(),
        }
    }

    /// Number of slots (blocks) in the cache.
    pub fn slots(&self) -> usize {
        self.nblks
    }

    /// The device behind.
    pub fn device(&self) -> &D {
        &self.device
    }

    fn slot(&self, block: u64) -> usize {
        (block & (self.nblks as u64 - 1)) as usize
    }

    fn present(&self, block: u64) -> bool {
        self.blkno[self.slot(block)] == block
    }

    /// `read_strategy`: blocks `blk..blk+nblk`, which never wrap the cache.
    fn read_chunk(
        &mut self,
        blk: u64,
        nblk: u64,
        offset: usize,
        out: &mut [u8],
    ) -> Result<(), IoError> {
        let bs = self.block_size;
        let mut complete = true;
        let mut first_missing = nblk;
        for i in 0..nblk {
            if !self.present(blk + i) {
                self.stats.block_misses += nblk - i;
                complete = false;
                if nblk - i > FREEBSD_MIN_READAHEAD && self.ra > FREEBSD_MIN_READAHEAD {
                    self.ra >>= 1;
                }
                first_missing = i;
                break;
            }
            self.note_hit(blk + i);
        }
        if complete {
            if self.ra < FREEBSD_READAHEAD {
                self.ra <<= 1;
            }
        } else {
            let p_blk = blk + first_missing;
            let p_slot = self.slot(p_blk);
            let mut p_size = (self.nblks - p_slot) as u64;
            p_size = p_size.min(nblk - first_missing);
            // Read-ahead room before the end of the cache; none when the
            // read itself reaches the end (the slot after it wraps to 0).
            let room = (self.nblks - self.slot(p_blk + p_size)) as u64;
            let mut ra = 0;
            if room != self.nblks as u64 {
                ra = self.ra.min(room);
            }
            ra = ra.min(self.device.block_count() - (p_blk + p_size));
            p_size += ra;
            for i in 0..p_size as usize {
                self.blkno[p_slot + i] = INVALID;
                self.readahead_pending[p_slot + i] = false;
            }
            let region = &mut self.data[p_slot * bs..(p_slot + p_size as usize) * bs];
            read_split(&mut self.device, p_blk, region, &mut self.stats)?;
            for i in 0..p_size {
                self.blkno[p_slot + i as usize] = p_blk + i;
                self.readahead_pending[p_slot + i as usize] = i >= p_size - ra;
            }
            self.stats.readahead_issued += ra;
        }
        let start = self.slot(blk) * bs + offset;
        out.copy_from_slice(&self.data[start..start + out.len()]);
        Ok(())
    }

    fn note_hit(&mut self, block: u64) {
        self.stats.block_hits += 1;
        let slot = self.slot(block);
        if self.readahead_pending[slot] {
            self.readahead_pending[slot] = false;
            self.stats.readahead_consumed += 1;
        }
    }
}

impl<D: BlockDevice> BlockCache for FreeBsd2016Cache<D> {
    fn block_size(&self) -> usize {
        self.block_size
    }

    fn block_count(&self) -> u64 {
        self.device.block_count()
    }

    fn read(&mut self, block: u64, offset: usize, buf: &mut [u8]) -> Result<(), IoError> {
        let bs = self.block_size;
        let span = Span::new(block, offset, buf.len(), bs, self.block_count())?;
        self.stats.requests += 1;
        if span.len == 0 {
            return Ok(());
        }
        if span.offset == 0 && span.len * 2 / bs > self.nblks {
            self.stats.bypasses += 1;
            return read_uncached(
                &mut self.device,
                &span,
                buf,
                &mut self.bounce,
                &mut self.stats,
            );
        }
        // Cut the request where it would wrap past the end of the cache.
        let mut blk = span.first;
        let mut offset = span.offset;
        let mut done = 0;
        while done < span.len {
            let left = span.end - blk;
            let nblk = ((self.nblks - self.slot(blk)) as u64).min(left);
            let bytes = (nblk as usize * bs - offset).min(span.len - done);
            self.read_chunk(blk, nblk, offset, &mut buf[done..done + bytes])?;
            done += bytes;
            blk += nblk;
            offset = 0;
        }
        Ok(())
    }

    fn write(&mut self, block: u64, offset: usize, data: &[u8]) -> Result<(), IoError> {
        let bs = self.block_size;
        let span = Span::new(block, offset, data.len(), bs, self.block_count())?;
        self.stats.requests += 1;
        if span.len == 0 {
            return Ok(());
        }
        if span.offset == 0 && span.len * 2 / bs > self.nblks {
            self.stats.bypasses += 1;
        }
        let whole = merge_write_from_device(&mut self.device, &span, data, &mut self.stats)?;
        for b in span.first..span.end {
            if self.present(b) {
                let slot = self.slot(b);
                self.blkno[slot] = INVALID;
                self.readahead_pending[slot] = false;
            }
        }
        write_split(&mut self.device, span.first, &whole, &mut self.stats)
    }

    fn stats(&self) -> CacheStats {
        self.stats
    }

    fn reset_stats(&mut self) {
        self.stats = CacheStats::default();
    }

    fn name(&self) -> &'static str {
        "freebsd2016"
    }
}
