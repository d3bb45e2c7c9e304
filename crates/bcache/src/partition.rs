//! Finding the partitions of a disk: the MBR's four primary entries, or,
//! behind a protective MBR, the GPT header and its entry array, both
//! checked against their CRC-32 as the UEFI specification requires.
//!
//! Like FreeBSD's stand/common/part.c this reads through the disk's block
//! cache (so the loader's one cache per disk also serves the partition
//! table), and a FAT partition is then mounted with
//! [`FatVolume::mount_partition`](crate::FatVolume::mount_partition), which
//! reads through the same cache at the partition's offset. Unlike it, it
//! does not follow MBR extended partitions (their entries are reported
//! with their type, 0x05 or 0x0F) nor fall back to the backup GPT header
//! at the end of the disk: a damaged primary GPT is an error.

mod gpt;

use alloc::vec::Vec;
use core::fmt;

use crate::cache::BlockCache;
use crate::error::IoError;

/// The MBR partition type of a protective MBR, which says a GPT follows.
pub const MBR_TYPE_PROTECTIVE: u8 = 0xEE;

/// How a partition's type is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PartitionType {
    /// The MBR's one-byte type (0x0C FAT32 LBA, 0x0E FAT16 LBA, 0xEF EFI
    /// system, ...).
    Mbr(u8),
    /// The GPT type GUID, in its on-disk byte order.
    Gpt([u8; 16]),
}

/// The GPT type GUID of an EFI system partition
/// (C12A7328-F81F-11D2-BA4B-00A0C93EC93B), in its on-disk byte order.
pub const GPT_TYPE_EFI_SYSTEM: [u8; 16] = [
    0x28, 0x73, 0x2A, 0xC1, 0x1F, 0xF8, 0xD2, 0x11, 0xBA, 0x4B, 0x00, 0xA0, 0xC9, 0x3E, 0xC9, 0x3B,
];

/// The GPT type GUID of a Microsoft basic data partition (FAT or NTFS)
/// (EBD0A0A2-B9E5-4433-87C0-68B6B72699C7), in its on-disk byte order.
pub const GPT_TYPE_BASIC_DATA: [u8; 16] = [
    0xA2, 0xA0, 0xD0, 0xEB, 0xE5, 0xB9, 0x33, 0x44, 0x87, 0xC0, 0x68, 0xB6, 0xB7, 0x26, 0x99, 0xC7,
];

/// Which table described the partitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PartitionScheme {
    /// The master boot record's four entries.
    Mbr,
    /// A GUID partition table behind a protective MBR.
    Gpt,
}

/// One partition: a run of the disk's blocks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Partition {
    /// Its slot in the table (0-based: MBR entry 0..4, GPT entry number).
    pub index: usize,
    /// Its first block, in the disk's blocks.
    pub first_block: u64,
    /// Its length in blocks (never 0).
    pub blocks: u64,
    /// Its type.
    pub kind: PartitionType,
}

impl Partition {
    /// The block after its last.
    ///
    /// ```
    /// use hotkern_bcache::{Partition, PartitionType};
    /// let efi = Partition { index: 0, first_block: 2048, blocks: 1024, kind: PartitionType::Mbr(0xEF) };
    /// assert_eq!(efi.end_block(), 3072);
    /// ```
    pub fn end_block(&self) -> u64 {
        self.first_block + self.blocks
    }
}

/// The partitions of a disk, in table order (unused slots left out).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionTable {
    /// MBR or GPT.
    pub scheme: PartitionScheme,
    /// The used entries.
    pub partitions: Vec<Partition>,
}

/// Why a disk's partition table could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PartitionError {
    /// The disk failed.
    Device(IoError),
    /// The first block carries no MBR: no 0x55AA signature, or entries
    /// whose boot flag is neither 0x00 nor 0x80 (a FAT boot sector of an
    /// unpartitioned disk, whose boot code lies where the entries would).
    NoTable,
    /// An entry with a type but no blocks, or that ends before it starts.
    EmptyEntry {
        /// The entry's slot.
        index: usize,
    },
    /// An entry reaching past the disk (or, in a GPT, outside the usable
    /// blocks the header names).
    OutOfRange {
        /// The entry's slot.
        index: usize,
        /// The block after its last.
        end_block: u64,
        /// The block after the last it may use.
        limit: u64,
    },
    /// Two entries share blocks.
    Overlap {
        /// One entry's slot.
        first: usize,
        /// The other's.
        second: usize,
    },
    /// The GPT header is malformed (the reason given).
    BadGptHeader(&'static str),
    /// The GPT header's CRC-32 does not match its bytes.
    GptHeaderCrc {
        /// The CRC the header carries.
        stored: u32,
        /// The CRC of its bytes.
        computed: u32,
    },
    /// The GPT entry array's CRC-32 does not match its bytes.
    GptEntriesCrc {
        /// The CRC the header carries.
        stored: u32,
        /// The CRC of the array's bytes.
        computed: u32,
    },
}

impl fmt::Display for PartitionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            PartitionError::Device(e) => write!(f, "device error: {e}"),
            PartitionError::NoTable => f.write_str("no partition table in the first block"),
            PartitionError::EmptyEntry { index } => {
                write!(f, "partition entry {index} has a type but no blocks")
            }
            PartitionError::OutOfRange {
                index,
                end_block,
                limit,
            } => write!(
                f,
                "partition entry {index} ends at block {end_block}, past the limit {limit}"
            ),
            PartitionError::Overlap { first, second } => {
                write!(f, "partition entries {first} and {second} overlap")
            }
            PartitionError::BadGptHeader(why) => write!(f, "bad GPT header: {why}"),
            PartitionError::GptHeaderCrc { stored, computed } => write!(
                f,
                "GPT header CRC-32 is {stored:#010x}, its bytes give {computed:#010x}"
            ),
            PartitionError::GptEntriesCrc { stored, computed } => write!(
                f,
                "GPT entries CRC-32 is {stored:#010x}, their bytes give {computed:#010x}"
            ),
        }
    }
}

impl core::error::Error for PartitionError {}

impl From<IoError> for PartitionError {
    fn from(e: IoError) -> Self {
        PartitionError::Device(e)
    }
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from(u32_at(bytes, at)) | (u64::from(u32_at(bytes, at + 4)) << 32)
}

/// Reads the partition table of the disk behind `cache`: the MBR, or the
/// GPT a protective MBR announces. Every entry is checked to lie on the
/// disk and not to overlap another; anything wrong is a typed
/// [`PartitionError`].
///
/// Blocks are the disk's own (a GPT on a 4096-byte-block disk counts in
/// 4096-byte blocks, as the UEFI specification says).
///
/// ```
/// use hotkern_bcache::{read_partitions, HotkernCache, MemoryDevice, PartitionScheme, PartitionType};
/// let mut disk = vec![0u8; 8 << 20];
/// // One FAT32 (LBA) partition from 1 MiB (block 2048) to the end.
/// disk[446 + 4] = 0x0C;
/// disk[446 + 8..446 + 12].copy_from_slice(&2048u32.to_le_bytes());
/// disk[446 + 12..446 + 16].copy_from_slice(&(16384u32 - 2048).to_le_bytes());
/// disk[510..512].copy_from_slice(&[0x55, 0xAA]);
/// let mut cache = HotkernCache::new(MemoryDevice::new(disk, 512).unwrap(), 64 << 10);
/// let table = read_partitions(&mut cache).unwrap();
/// assert_eq!(table.scheme, PartitionScheme::Mbr);
/// assert_eq!(table.partitions[0].first_block, 2048);
/// assert_eq!(table.partitions[0].kind, PartitionType::Mbr(0x0C));
/// ```
pub fn read_partitions<C: BlockCache + ?Sized>(
    cache: &mut C,
) -> Result<PartitionTable, PartitionError> {
    let device_blocks = cache.block_count();
    let mut mbr = [0u8; 512];
    if device_blocks == 0 {
        return Err(PartitionError::NoTable);
    }
    cache.read(0, 0, &mut mbr)?;
    if mbr[510] != 0x55 || mbr[511] != 0xAA {
        return Err(PartitionError::NoTable);
    }
    let entries: [&[u8]; 4] = core::array::from_fn(|i| &mbr[446 + 16 * i..462 + 16 * i]);
    if entries.iter().any(|e| e[0] != 0x00 && e[0] != 0x80) {
        return Err(PartitionError::NoTable);
    }
    if entries.iter().any(|e| e[4] == MBR_TYPE_PROTECTIVE) {
        return gpt::read(cache);
    }
    let mut partitions = Vec::new();
    for (index, entry) in entries.iter().enumerate() {
        let kind = entry[4];
        if kind == 0 {
            continue;
        }
        let first_block = u64::from(u32_at(entry, 8));
        let blocks = u64::from(u32_at(entry, 12));
        if blocks == 0 || first_block == 0 {
            return Err(PartitionError::EmptyEntry { index });
        }
        partitions.push(Partition {
            index,
            first_block,
            blocks,
            kind: PartitionType::Mbr(kind),
        });
    }
    check_placement(&partitions, 1, device_blocks)?;
    Ok(PartitionTable {
        scheme: PartitionScheme::Mbr,
        partitions,
    })
}

/// Checks that every partition lies within blocks `first..limit` and that
/// no two overlap.
fn check_placement(partitions: &[Partition], first: u64, limit: u64) -> Result<(), PartitionError> {
    for p in partitions {
        // Starts and lengths come from 32- or 64-bit fields: saturate.
        let end_block = p.first_block.saturating_add(p.blocks);
        if p.first_block < first || end_block > limit {
            return Err(PartitionError::OutOfRange {
                index: p.index,
                end_block,
                limit,
            });
        }
    }
    let mut order: Vec<&Partition> = partitions.iter().collect();
    order.sort_by_key(|p| p.first_block);
    for pair in order.windows(2) {
        if pair[0].end_block() > pair[1].first_block {
            let (a, b) = (pair[0].index, pair[1].index);
            return Err(PartitionError::Overlap {
                first: a.min(b),
                second: a.max(b),
            });
        }
    }
    Ok(())
}
