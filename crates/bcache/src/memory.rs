//! A disk held in memory.

use alloc::vec;
use alloc::vec::Vec;

use crate::device::{check_block_size, check_transfer, BlockDevice};
use crate::error::{ConfigError, IoError};

/// Default largest transfer of a [`MemoryDevice`]: 1 MiB worth of blocks.
const DEFAULT_MAX_TRANSFER_BYTES: usize = 1 << 20;

/// A disk whose blocks live in a byte vector.
///
/// ```
/// use hotkern_bcache::{BlockDevice, MemoryDevice};
/// let disk = MemoryDevice::new(vec![0u8; 4096 * 4], 4096).unwrap();
/// assert_eq!(disk.block_count(), 4);
/// assert!(MemoryDevice::new(vec![0u8; 1000], 512).is_err());
/// ```
#[derive(Debug, Clone)]
pub struct MemoryDevice {
    bytes: Vec<u8>,
    block_size: usize,
    max_transfer_blocks: u32,
}

impl MemoryDevice {
    /// A device over `bytes`, which must be a non-zero whole number of blocks.
    pub fn new(bytes: Vec<u8>, block_size: usize) -> Result<Self, ConfigError> {
        check_block_size(block_size)?;
        if bytes.is_empty() {
            return Err(ConfigError::Empty);
        }
        if bytes.len() % block_size != 0 {
            return Err(ConfigError::Length {
                len: bytes.len() as u64,
                block_size,
            });
        }
        Ok(MemoryDevice {
            bytes,
            block_size,
            max_transfer_blocks: (DEFAULT_MAX_TRANSFER_BYTES / block_size) as u32,
        })
    }

    /// A device of `blocks` zeroed blocks.
    pub fn zeroed(blocks: usize, block_size: usize) -> Result<Self, ConfigError> {
        check_block_size(block_size)?;
        let len = blocks.checked_mul(block_size).ok_or(ConfigError::Empty)?;
        Self::new(vec![0u8; len], block_size)
    }

    /// Sets the largest transfer, in blocks (at least 1).
    pub fn with_max_transfer(mut self, blocks: u32) -> Result<Self, ConfigError> {
        if blocks == 0 {
            return Err(ConfigError::Empty);
        }
        self.max_transfer_blocks = blocks;
        Ok(self)
    }

    /// The device's contents.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Gives the contents back.
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }
}

impl BlockDevice for MemoryDevice {
    fn block_size(&self) -> usize {
        self.block_size
    }

    fn block_count(&self) -> u64 {
        (self.bytes.len() / self.block_size) as u64
    }

    fn max_transfer_blocks(&self) -> u32 {
        self.max_transfer_blocks
    }

    fn read_blocks(&mut self, first: u64, buf: &mut [u8]) -> Result<(), IoError> {
        check_transfer(self, first, buf.len())?;
        let start = first as usize * self.block_size;
        buf.copy_from_slice(&self.bytes[start..start + buf.len()]);
        Ok(())
    }

    fn write_blocks(&mut self, first: u64, data: &[u8]) -> Result<(), IoError> {
        check_transfer(self, first, data.len())?;
        let start = first as usize * self.block_size;
        self.bytes[start..start + data.len()].copy_from_slice(data);
        Ok(())
    }
}
