//! A device that fails on purpose, for tests of the caches' error paths.

use alloc::vec::Vec;

use crate::device::{check_transfer, BlockDevice};
use crate::error::IoError;

/// Byte a failed read leaves in the caller's buffer, so that a cache that
/// kept a failed transfer's buffer would be caught serving it.
pub const GARBAGE: u8 = 0xA5;

/// Wraps a device and fails chosen operations, or a share of them.
///
/// A failed read scribbles [`GARBAGE`] over the buffer; a failed write may
/// be *torn*: its first half reaches the device before the error, as on a
/// real disk that loses power or link mid-transfer.
///
/// ```
/// use hotkern_bcache::{BlockDevice, FaultyDevice, MemoryDevice};
/// let mut disk = FaultyDevice::new(MemoryDevice::zeroed(16, 512).unwrap());
/// disk.fail_read_op(1);
/// let mut buf = [0u8; 512];
/// assert!(disk.read_blocks(0, &mut buf).is_ok());
/// assert!(disk.read_blocks(0, &mut buf).is_err());
/// assert!(disk.read_blocks(0, &mut buf).is_ok());
/// ```
#[derive(Debug)]
pub struct FaultyDevice<D> {
    inner: D,
    read_ops: u64,
    write_ops: u64,
    failing_reads: Vec<u64>,
    failing_writes: Vec<u64>,
    bad_blocks: Vec<u64>,
    read_rate_per_million: u32,
    write_rate_per_million: u32,
    rng: u64,
    torn_writes: bool,
    failures: u64,
}

impl<D: BlockDevice> FaultyDevice<D> {
    /// Wraps `inner`, failing nothing yet.
    pub fn new(inner: D) -> Self {
        FaultyDevice {
            inner,
            read_ops: 0,
            write_ops: 0,
            failing_reads: Vec::new(),
            failing_writes: Vec::new(),
            bad_blocks: Vec::new(),
            read_rate_per_million: 0,
            write_rate_per_million: 0,
            rng: 0x9E37_79B9_7F4A_7C15,
            torn_writes: false,
            failures: 0,
        }
    }

    /// Fails the `n`-th read operation (counting from 0).
    pub fn fail_read_op(&mut self, n: u64) {
        self.failing_reads.push(n);
    }

    /// Fails the `n`-th write operation (counting from 0).
    pub fn fail_write_op(&mut self, n: u64) {
        self.failing_writes.push(n);
    }

    /// Fails every read that covers `block` (a bad sector).
    pub fn fail_block(&mut self, block: u64) {
        self.bad_blocks.push(block);
    }

    /// Fails reads and writes at random, at the given rates per million
    /// operations, from a generator seeded with `seed`.
    pub fn fail_at_rate(&mut self, reads_per_million: u32, writes_per_million: u32, seed: u64) {
        self.read_rate_per_million = reads_per_million;
        self.write_rate_per_million = writes_per_million;
        self.rng = seed | 1;
    }

    /// Lets failed writes land their first half before failing.
    pub fn tear_writes(&mut self, torn: bool) {
        self.torn_writes = torn;
    }

    /// Operations failed so far.
    pub fn failures(&self) -> u64 {
        self.failures
    }

    /// The wrapped device.
    pub fn inner(&self) -> &D {
        &self.inner
    }

    /// The wrapped device, mutably (to compare or repair behind the cache).
    pub fn inner_mut(&mut self) -> &mut D {
        &mut self.inner
    }

    fn roll(&mut self, rate_per_million: u32) -> bool {
        if rate_per_million == 0 {
            return false;
        }
        // xorshift64*: deterministic, no dependency, good enough for tests.
        self.rng ^= self.rng >> 12;
        self.rng ^= self.rng << 25;
        self.rng ^= self.rng >> 27;
        let draw = self.rng.wrapping_mul(0x2545_F491_4F6C_DD1D) % 1_000_000;
        draw < u64::from(rate_per_million)
    }

    fn covers_bad_block(&self, first: u64, blocks: u64) -> bool {
        self.bad_blocks
            .iter()
            .any(|&b| b >= first && b - first < blocks)
    }
}

impl<D: BlockDevice> BlockDevice for FaultyDevice<D> {
    fn block_size(&self) -> usize {
        self.inner.block_size()
    }

    fn block_count(&self) -> u64 {
        self.inner.block_count()
    }

    fn max_transfer_blocks(&self) -> u32 {
        self.inner.max_transfer_blocks()
    }

    fn read_blocks(&mut self, first: u64, buf: &mut [u8]) -> Result<(), IoError> {
        let blocks = check_transfer(self, first, buf.len())?;
        let op = self.read_ops;
        self.read_ops += 1;
        let rate = self.read_rate_per_million;
        if self.failing_reads.contains(&op)
            || self.covers_bad_block(first, blocks)
            || self.roll(rate)
        {
            self.failures += 1;
            // Half the buffer may already hold data when the error comes.
            let half = buf.len() / 2;
            let _ = self
                .inner
                .read_blocks(first, &mut buf[..half - half % self.block_size()]);
            buf[half..].fill(GARBAGE);
            return Err(IoError::Medium { block: first });
        }
        self.inner.read_blocks(first, buf)
    }

    fn write_blocks(&mut self, first: u64, data: &[u8]) -> Result<(), IoError> {
        let blocks = check_transfer(self, first, data.len())?;
        let op = self.write_ops;
        self.write_ops += 1;
        let rate = self.write_rate_per_million;
        if self.failing_writes.contains(&op) || self.roll(rate) {
            self.failures += 1;
            if self.torn_writes {
                let landed = (blocks / 2) as usize * self.block_size();
                let _ = self.inner.write_blocks(first, &data[..landed]);
            }
            return Err(IoError::Medium { block: first });
        }
        self.inner.write_blocks(first, data)
    }
}
