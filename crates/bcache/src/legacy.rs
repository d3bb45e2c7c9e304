//! `legacy`: FreeBSD's loader cache before 2016, as a baseline.
//!
//! One global cache of 16 KiB (32 blocks of 512 bytes) for all devices;
//! each lookup scans every entry; a miss evicts the entry with the oldest
//! use stamp (LRU by a global counter, found by a second linear scan);
//! requests whose size is over half the cache (8 KiB) bypass it; the whole
//! cache is flushed whenever a request (bypassed or not) names a different
//! device unit than the previous one; no read-ahead. Partial-block requests read the whole
//! blocks into a bounce buffer and copy the piece, as the old file systems'
//! private buffers did.
//!
//! Three deliberate differences, all in the baseline's favour or neutral:
//! entries do not expire after 2 s (the original asked the BIOS clock on
//! every lookup and dropped older entries, which could only lose hits), and
//! a bypassed large write invalidates the blocks it covers (the original
//! left them, so a later read could return stale data), and an insertion
//! checks every entry for the block (the original skipped entry 0).

use alloc::rc::Rc;
use alloc::vec;
use alloc::vec::Vec;
use core::cell::RefCell;

use crate::cache::{
    merge_write_from_device, read_split, read_uncached, write_split, BlockCache, Span,
};
use crate::device::BlockDevice;
use crate::error::{ConfigError, IoError};
use crate::stats::CacheStats;

/// Size of the one global cache.
pub const LEGACY_CACHE_BYTES: usize = 16 << 10;

const INVALID: u64 = u64::MAX;

#[derive(Debug)]
struct Store {
    block_size: usize,
    data: Vec<u8>,
    blkno: Vec<u64>,
    stamp: Vec<u64>,
    clock: u64,
    unit: Option<u32>,
    next_unit: u32,
}

impl Store {
    fn blocks(&self) -> usize {
        self.blkno.len()
    }

    fn flush(&mut self) {
        self.blkno.fill(INVALID);
        self.stamp.fill(0);
    }

    fn lookup(&self, block: u64) -> Option<usize> {
        self.blkno.iter().position(|&b| b == block)
    }

    fn insert(&mut self, block: u64, content: &[u8]) {
        let mut candidate = 0;
        let mut oldest = self.stamp[0];
        for i in 0..self.blocks() {
            if self.blkno[i] == block {
                candidate = i;
                break;
            }
            if self.stamp[i] < oldest {
                oldest = self.stamp[i];
                candidate = i;
            }
        }
        let bs = self.block_size;
        self.data[candidate * bs..(candidate + 1) * bs].copy_from_slice(content);
        self.blkno[candidate] = block;
        self.clock += 1;
        self.stamp[candidate] = self.clock;
    }

    fn invalidate(&mut self, block: u64) {
        if let Some(i) = self.lookup(block) {
            self.blkno[i] = INVALID;
            self.stamp[i] = 0;
        }
    }
}

/// One device's view of the global legacy cache.
///
/// ```
/// use hotkern_bcache::{BlockCache, LegacyCache, MemoryDevice};
/// let a = LegacyCache::new(MemoryDevice::zeroed(64, 512).unwrap());
/// let mut b = a.sharing(MemoryDevice::zeroed(64, 512).unwrap()).unwrap();
/// let mut a = a;
/// let mut buf = [0u8; 512];
/// a.read(0, 0, &mut buf).unwrap();
/// a.read(0, 0, &mut buf).unwrap();
/// assert_eq!(a.stats().block_hits, 1);
/// b.read(0, 0, &mut buf).unwrap(); // another unit: the cache is flushed
/// a.read(0, 0, &mut buf).unwrap();
/// assert_eq!(a.stats().block_misses, 2);
/// ```
#[derive(Debug)]
pub struct LegacyCache<D> {
    device: D,
    unit: u32,
    store: Rc<RefCell<Store>>,
    bounce: Vec<u8>,
    missing: Vec<bool>,
    stats: CacheStats,
}

impl<D: BlockDevice> LegacyCache<D> {
    /// A new global cache, with `device` as its first unit.
    pub fn new(device: D) -> Self {
        let block_size = device.block_size();
        let blocks = (LEGACY_CACHE_BYTES / block_size).max(1);
        let store = Store {
            block_size,
            data: vec![0u8; blocks * block_size],
            blkno: vec![INVALID; blocks],
            stamp: vec![0; blocks],
            clock: 0,
            unit: None,
            next_unit: 1,
        };
        LegacyCache {
            device,
            unit: 0,
            store: Rc::new(RefCell::new(store)),
            bounce: Vec::new(),
            missing: Vec::new(),
            stats: CacheStats::default(),
        }
    }

    /// Another unit sharing this one's global cache (same block size).
    pub fn sharing<E: BlockDevice>(&self, device: E) -> Result<LegacyCache<E>, ConfigError> {
        let mut store = self.store.borrow_mut();
        if device.block_size() != store.block_size {
            return Err(ConfigError::MismatchedMembers);
        }
        let unit = store.next_unit;
        store.next_unit += 1;
        Ok(LegacyCache {
            device,
            unit,
            store: Rc::clone(&self.store),
            bounce: Vec::new(),
            missing: Vec::new(),
            stats: CacheStats::default(),
        })
    }

    /// The device behind.
    pub fn device(&self) -> &D {
        &self.device
    }

    fn select_unit(&self) {
        let mut store = self.store.borrow_mut();
        if store.unit != Some(self.unit) {
            store.flush();
            store.unit = Some(self.unit);
        }
    }
}

impl<D: BlockDevice> BlockCache for LegacyCache<D> {
    fn block_size(&self) -> usize {
        self.device.block_size()
    }

    fn block_count(&self) -> u64 {
        self.device.block_count()
    }

    fn read(&mut self, block: u64, offset: usize, buf: &mut [u8]) -> Result<(), IoError> {
        let bs = self.block_size();
        let span = Span::new(block, offset, buf.len(), bs, self.block_count())?;
        self.stats.requests += 1;
        if span.len == 0 {
            return Ok(());
        }
        let nblk = span.blocks() as usize;
        let cache_blocks = self.store.borrow().blocks();
        // The unit check comes first: even a bypassed request flushes.
        self.select_unit();
        if nblk * 2 > cache_blocks {
            self.stats.bypasses += 1;
            return read_uncached(
                &mut self.device,
                &span,
                buf,
                &mut self.bounce,
                &mut self.stats,
            );
        }
        let aligned = span.aligned(bs);
        let covered = nblk * bs;
        if !aligned && self.bounce.len() < covered {
            self.bounce.resize(covered, 0);
        }
        let target: &mut [u8] = if aligned {
            buf
        } else {
            &mut self.bounce[..covered]
        };
        self.missing.clear();
        self.missing.resize(nblk, false);
        {
            let store = self.store.borrow();
            for i in 0..nblk {
                match store.lookup(span.first + i as u64) {
                    Some(slot) => {
                        target[i * bs..(i + 1) * bs]
                            .copy_from_slice(&store.data[slot * bs..(slot + 1) * bs]);
                        self.stats.block_hits += 1;
                    }
                    None => {
                        self.missing[i] = true;
                        self.stats.block_misses += 1;
                    }
                }
            }
        }
        // Fill each run of misses with one transfer, then remember its blocks.
        let mut i = 0;
        while i < nblk {
            if !self.missing[i] {
                i += 1;
                continue;
            }
            let start = i;
            while i < nblk && self.missing[i] {
                i += 1;
            }
            let run = &mut target[start * bs..i * bs];
            read_split(
                &mut self.device,
                span.first + start as u64,
                run,
                &mut self.stats,
            )?;
            let mut store = self.store.borrow_mut();
            for (j, content) in run.chunks(bs).enumerate() {
                store.insert(span.first + (start + j) as u64, content);
            }
        }
        if !aligned {
            buf.copy_from_slice(&self.bounce[span.offset..span.offset + span.len]);
        }
        Ok(())
    }

    fn write(&mut self, block: u64, offset: usize, data: &[u8]) -> Result<(), IoError> {
        let bs = self.block_size();
        let span = Span::new(block, offset, data.len(), bs, self.block_count())?;
        self.stats.requests += 1;
        if span.len == 0 {
            return Ok(());
        }
        let nblk = span.blocks() as usize;
        self.select_unit();
        let bypass = nblk * 2 > self.store.borrow().blocks();
        if bypass {
            self.stats.bypasses += 1;
        }
        let whole = merge_write_from_device(&mut self.device, &span, data, &mut self.stats)?;
        {
            let mut store = self.store.borrow_mut();
            for b in span.first..span.end {
                store.invalidate(b);
            }
        }
        write_split(&mut self.device, span.first, &whole, &mut self.stats)?;
        if !bypass {
            let mut store = self.store.borrow_mut();
            for (j, content) in whole.chunks(bs).enumerate() {
                store.insert(span.first + j as u64, content);
            }
        }
        Ok(())
    }

    fn stats(&self) -> CacheStats {
        self.stats
    }

    fn reset_stats(&mut self) {
        self.stats = CacheStats::default();
    }

    fn name(&self) -> &'static str {
        "legacy"
    }
}
