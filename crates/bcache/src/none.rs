//! `none`: no cache at all; every request goes to the device.

use alloc::vec::Vec;

use crate::cache::{merge_write_from_device, read_uncached, write_split, BlockCache, Span};
use crate::device::BlockDevice;
use crate::error::IoError;
use crate::stats::CacheStats;

/// Sends every request to the device as one transfer of the blocks it
/// covers (split only at the device's largest transfer).
#[derive(Debug)]
pub struct NoCache<D> {
    device: D,
    bounce: Vec<u8>,
    stats: CacheStats,
}

impl<D: BlockDevice> NoCache<D> {
    /// Puts nothing in front of `device`.
    pub fn new(device: D) -> Self {
        NoCache {
            device,
            bounce: Vec::new(),
            stats: CacheStats::default(),
        }
    }

    /// The device behind.
    pub fn device(&self) -> &D {
        &self.device
    }
}

impl<D: BlockDevice> BlockCache for NoCache<D> {
    fn block_size(&self) -> usize {
        self.device.block_size()
    }

    fn block_count(&self) -> u64 {
        self.device.block_count()
    }

    fn read(&mut self, block: u64, offset: usize, buf: &mut [u8]) -> Result<(), IoError> {
        let span = Span::new(
            block,
            offset,
            buf.len(),
            self.block_size(),
            self.block_count(),
        )?;
        self.stats.requests += 1;
        if span.len == 0 {
            return Ok(());
        }
        self.stats.bypasses += 1;
        self.stats.block_misses += span.blocks();
        read_uncached(
            &mut self.device,
            &span,
            buf,
            &mut self.bounce,
            &mut self.stats,
        )
    }

    fn write(&mut self, block: u64, offset: usize, data: &[u8]) -> Result<(), IoError> {
        let bs = self.block_size();
        let span = Span::new(block, offset, data.len(), bs, self.block_count())?;
        self.stats.requests += 1;
        if span.len == 0 {
            return Ok(());
        }
        let whole = merge_write_from_device(&mut self.device, &span, data, &mut self.stats)?;
        write_split(&mut self.device, span.first, &whole, &mut self.stats)
    }

    fn stats(&self) -> CacheStats {
        self.stats
    }

    fn reset_stats(&mut self) {
        self.stats = CacheStats::default();
    }

    fn name(&self) -> &'static str {
        "none"
    }
}
