//! The interface a boot loader or kernel implements for each disk.

use alloc::boxed::Box;

use crate::error::{ConfigError, IoError};

/// A disk: fixed-size blocks read and written whole.
///
/// Transfers name their first block and carry a buffer whose length is a
/// whole number of blocks, at most [`max_transfer_blocks`](Self::max_transfer_blocks)
/// of them; anything else is refused with a typed [`IoError`] before the
/// device is touched.
///
/// ```
/// use hotkern_bcache::{BlockDevice, MemoryDevice};
/// let mut disk = MemoryDevice::zeroed(8, 512).unwrap();
/// disk.write_blocks(2, &[7u8; 1024]).unwrap();
/// let mut back = [0u8; 512];
/// disk.read_blocks(3, &mut back).unwrap();
/// assert_eq!(back, [7u8; 512]);
/// assert!(disk.read_blocks(8, &mut back).is_err());
/// ```
pub trait BlockDevice {
    /// Bytes per block: a power of two from 512 to 4096.
    fn block_size(&self) -> usize;
    /// Number of blocks.
    fn block_count(&self) -> u64;
    /// The largest transfer the device accepts, in blocks (at least 1).
    fn max_transfer_blocks(&self) -> u32;
    /// Reads `buf.len() / block_size` blocks starting at `first`.
    fn read_blocks(&mut self, first: u64, buf: &mut [u8]) -> Result<(), IoError>;
    /// Writes `data.len() / block_size` blocks starting at `first`.
    fn write_blocks(&mut self, first: u64, data: &[u8]) -> Result<(), IoError>;
}

impl<D: BlockDevice + ?Sized> BlockDevice for &mut D {
    fn block_size(&self) -> usize {
        (**self).block_size()
    }
    fn block_count(&self) -> u64 {
        (**self).block_count()
    }
    fn max_transfer_blocks(&self) -> u32 {
        (**self).max_transfer_blocks()
    }
    fn read_blocks(&mut self, first: u64, buf: &mut [u8]) -> Result<(), IoError> {
        (**self).read_blocks(first, buf)
    }
    fn write_blocks(&mut self, first: u64, data: &[u8]) -> Result<(), IoError> {
        (**self).write_blocks(first, data)
    }
}

impl<D: BlockDevice + ?Sized> BlockDevice for Box<D> {
    fn block_size(&self) -> usize {
        (**self).block_size()
    }
    fn block_count(&self) -> u64 {
        (**self).block_count()
    }
    fn max_transfer_blocks(&self) -> u32 {
        (**self).max_transfer_blocks()
    }
    fn read_blocks(&mut self, first: u64, buf: &mut [u8]) -> Result<(), IoError> {
        (**self).read_blocks(first, buf)
    }
    fn write_blocks(&mut self, first: u64, data: &[u8]) -> Result<(), IoError> {
        (**self).write_blocks(first, data)
    }
}

/// Checks that `block_size` is a power of two from 512 to 4096.
pub fn check_block_size(block_size: usize) -> Result<(), ConfigError> {
    if block_size.is_power_of_two() && (512..=4096).contains(&block_size) {
        Ok(())
    } else {
        Err(ConfigError::BlockSize(block_size))
    }
}

/// Validates a transfer of `len` bytes at `first` against a device's
/// geometry and returns its length in blocks. Devices call this before
/// touching anything, so a refused transfer changes nothing.
pub fn check_transfer(
    device: &(impl BlockDevice + ?Sized),
    first: u64,
    len: usize,
) -> Result<u64, IoError> {
    let block_size = device.block_size();
    if len % block_size != 0 {
        return Err(IoError::Misaligned { len, block_size });
    }
    let blocks = (len / block_size) as u64;
    let max_blocks = device.max_transfer_blocks();
    if blocks > u64::from(max_blocks) {
        return Err(IoError::TooLarge { blocks, max_blocks });
    }
    let device_blocks = device.block_count();
    match first.checked_add(blocks) {
        Some(end) if end <= device_blocks => Ok(blocks),
        _ => Err(IoError::OutOfRange {
            block: first,
            blocks,
            device_blocks,
        }),
    }
}
