//! The interface every cache design offers, and what they share: request
//! validation and the transfers they send to the device.

#[cfg(feature = "baselines")]
use alloc::borrow::Cow;
use alloc::vec;
use alloc::vec::Vec;

use crate::device::BlockDevice;
use crate::error::IoError;
use crate::stats::CacheStats;

/// A block cache in front of one device (or a striped set).
///
/// Requests name a block, a byte offset from it and a length: any length,
/// so a file system reads a 4-byte FAT entry or a 512-byte piece of a
/// cluster without a buffer of its own, as the offset argument Toomas
/// Soome's 2016 redesign of FreeBSD's loader cache added to `dv_strategy()`
/// lets dosfs do. Only the bytes asked for are copied to the caller.
///
/// ```
/// use hotkern_bcache::{BlockCache, HotkernCache, MemoryDevice};
/// let mut cache = HotkernCache::new(MemoryDevice::zeroed(64, 512).unwrap(), 16 << 10);
/// cache.write(3, 510, &[1, 2, 3, 4]).unwrap();
/// let mut back = [0u8; 4];
/// cache.read(4, 0, &mut back[2..]).unwrap();
/// assert_eq!(back, [0, 0, 3, 4]);
/// assert_eq!(cache.stats().requests, 2);
/// ```
pub trait BlockCache {
    /// Bytes per block of the device behind the cache.
    fn block_size(&self) -> usize;
    /// Blocks of the device behind the cache.
    fn block_count(&self) -> u64;
    /// Fills `buf` from the bytes starting `offset` bytes into `block`.
    /// On error `buf` holds unspecified bytes and the cache holds nothing
    /// of the failed transfer.
    fn read(&mut self, block: u64, offset: usize, buf: &mut [u8]) -> Result<(), IoError>;
    /// Writes `data` at `offset` bytes into `block`, through to the device.
    /// On error the cache holds nothing the device might not.
    fn write(&mut self, block: u64, offset: usize, data: &[u8]) -> Result<(), IoError>;
    /// The counters so far.
    fn stats(&self) -> CacheStats;
    /// Zeroes the counters.
    fn reset_stats(&mut self);
    /// The design's name (`none`, `legacy`, `freebsd2016`, `hotkern`).
    fn name(&self) -> &'static str;
}

impl<C: BlockCache + ?Sized> BlockCache for alloc::boxed::Box<C> {
    fn block_size(&self) -> usize {
        (**self).block_size()
    }
    fn block_count(&self) -> u64 {
        (**self).block_count()
    }
    fn read(&mut self, block: u64, offset: usize, buf: &mut [u8]) -> Result<(), IoError> {
        (**self).read(block, offset, buf)
    }
    fn write(&mut self, block: u64, offset: usize, data: &[u8]) -> Result<(), IoError> {
        (**self).write(block, offset, data)
    }
    fn stats(&self) -> CacheStats {
        (**self).stats()
    }
    fn reset_stats(&mut self) {
        (**self).reset_stats()
    }
    fn name(&self) -> &'static str {
        (**self).name()
    }
}

/// A validated request: blocks `first..end`, starting `offset` bytes into
/// `first`, `len` bytes long.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    pub first: u64,
    pub end: u64,
    pub offset: usize,
    pub len: usize,
}

impl Span {
    /// Normalises (`offset` may exceed a block) and checks the request
    /// against the device; no arithmetic here can overflow.
    pub fn new(
        block: u64,
        offset: usize,
        len: usize,
        block_size: usize,
        block_count: u64,
    ) -> Result<Span, IoError> {
        let bs = block_size as u64;
        let out_of_range = IoError::OutOfRange {
            block,
            blocks: (len as u64).div_ceil(bs),
            device_blocks: block_count,
        };
        let first = block.checked_add(offset as u64 / bs).ok_or(out_of_range)?;
        let offset = offset % block_size;
        let end_byte = (offset as u64)
            .checked_add(len as u64)
            .ok_or(out_of_range)?;
        let end = first
            .checked_add(end_byte.div_ceil(bs))
            .ok_or(out_of_range)?;
        if end > block_count || (len == 0 && first > block_count) {
            return Err(out_of_range);
        }
        Ok(Span {
            first,
            end,
            offset,
            len,
        })
    }

    /// Blocks covered.
    pub fn blocks(&self) -> u64 {
        self.end - self.first
    }

    /// Whether the request is whole blocks.
    pub fn aligned(&self, block_size: usize) -> bool {
        self.offset == 0 && self.len % block_size == 0
    }

    /// The piece of block `block` the request covers.
    pub fn piece(&self, block: u64, block_size: usize) -> Piece {
        let index = (block - self.first) as usize;
        let (in_block, in_buf) = if index == 0 {
            (self.offset, 0)
        } else {
            (0, index * block_size - self.offset)
        };
        let len = (block_size - in_block).min(self.len - in_buf);
        Piece {
            in_block,
            in_buf,
            len,
        }
    }
}

/// The part of one block a request covers, from [`Span::piece`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Piece {
    /// Where it starts in the block.
    pub in_block: usize,
    /// Where it starts in the caller's buffer.
    pub in_buf: usize,
    /// Its length in bytes.
    pub len: usize,
}

/// Reads whole blocks in operations no larger than the device accepts,
/// counting each in `stats`.
pub(crate) fn read_split<D: BlockDevice + ?Sized>(
    device: &mut D,
    first: u64,
    buf: &mut [u8],
    stats: &mut CacheStats,
) -> Result<(), IoError> {
    let chunk = device.max_transfer_blocks().max(1) as usize * device.block_size();
    let mut block = first;
    for piece in buf.chunks_mut(chunk) {
        stats.device_ops += 1;
        stats.device_bytes += piece.len() as u64;
        device.read_blocks(block, piece)?;
        block += (piece.len() / device.block_size()) as u64;
    }
    Ok(())
}

/// Writes whole blocks in operations no larger than the device accepts.
pub(crate) fn write_split<D: BlockDevice + ?Sized>(
    device: &mut D,
    first: u64,
    data: &[u8],
    stats: &mut CacheStats,
) -> Result<(), IoError> {
    let chunk = device.max_transfer_blocks().max(1) as usize * device.block_size();
    let mut block = first;
    for piece in data.chunks(chunk) {
        stats.device_ops += 1;
        stats.device_bytes += piece.len() as u64;
        device.write_blocks(block, piece)?;
        block += (piece.len() / device.block_size()) as u64;
    }
    Ok(())
}

/// Reads a request straight from the device: into the caller's buffer when
/// it is whole blocks, through `bounce` otherwise.
#[cfg(feature = "baselines")]
pub(crate) fn read_uncached<D: BlockDevice + ?Sized>(
    device: &mut D,
    span: &Span,
    buf: &mut [u8],
    bounce: &mut Vec<u8>,
    stats: &mut CacheStats,
) -> Result<(), IoError> {
    let bs = device.block_size();
    if span.aligned(bs) {
        return read_split(device, span.first, buf, stats);
    }
    let covered = span.blocks() as usize * bs;
    if bounce.len() < covered {
        bounce.resize(covered, 0);
    }
    read_split(device, span.first, &mut bounce[..covered], stats)?;
    buf.copy_from_slice(&bounce[span.offset..span.offset + span.len]);
    Ok(())
}

/// Builds the whole blocks a write covers: the caller's data in the middle
/// and, for partial first and last blocks, the rest of those blocks as
/// `edge` provides them (from the cache or the device).
pub(crate) fn merge_write(
    span: &Span,
    block_size: usize,
    data: &[u8],
    mut edge: impl FnMut(u64, &mut [u8]) -> Result<(), IoError>,
) -> Result<Vec<u8>, IoError> {
    let covered = span.blocks() as usize * block_size;
    let mut merged = vec![0u8; covered];
    if span.offset != 0 {
        edge(span.first, &mut merged[..block_size])?;
    }
    let tail = (span.offset + span.len) % block_size;
    if tail != 0 && (span.blocks() > 1 || span.offset == 0) {
        edge(span.end - 1, &mut merged[covered - block_size..])?;
    }
    merged[span.offset..span.offset + span.len].copy_from_slice(data);
    Ok(merged)
}

/// The whole blocks a write covers, for a design that keeps no copy of
/// the blocks its edges share: `data` itself when it is whole blocks,
/// otherwise `data` merged with the rest of its first and last blocks as
/// read from the device.
#[cfg(feature = "baselines")]
pub(crate) fn merge_write_from_device<'a, D: BlockDevice + ?Sized>(
    device: &mut D,
    span: &Span,
    data: &'a [u8],
    stats: &mut CacheStats,
) -> Result<Cow<'a, [u8]>, IoError> {
    let bs = device.block_size();
    if span.aligned(bs) {
        return Ok(Cow::Borrowed(data));
    }
    let merged = merge_write(span, bs, data, |b, into| read_split(device, b, into, stats))?;
    Ok(Cow::Owned(merged))
}
