//! The GUID partition table: header at block 1, entry array where it says,
//! both guarded by CRC-32 (UEFI specification, chapter 5).

use alloc::vec;
use alloc::vec::Vec;

use super::{
    check_placement, u32_at, u64_at, Partition, PartitionError, PartitionScheme, PartitionTable,
    PartitionType,
};
use crate::cache::BlockCache;
use crate::crc32::crc32;

/// The smallest header the specification defines.
const HEADER_BYTES: usize = 92;
/// The entry array a loader accepts at most: the specification's usual
/// 128 entries of 128 bytes is 16 KiB; this leaves room for larger tables
/// while bounding what a corrupt header can make it allocate.
const MAX_ENTRY_ARRAY_BYTES: u64 = 1 << 20;

pub(super) fn read<C: BlockCache + ?Sized>(
    cache: &mut C,
) -> Result<PartitionTable, PartitionError> {
    let bad = PartitionError::BadGptHeader;
    let block_size = cache.block_size();
    let device_blocks = cache.block_count();
    if device_blocks < 3 {
        return Err(bad("disk too small for a GPT"));
    }
    let mut header = vec![0u8; block_size];
    cache.read(1, 0, &mut header)?;
    if &header[..8] != b"EFI PART" {
        return Err(bad("no EFI PART signature"));
    }
    let header_bytes = u32_at(&header, 12) as usize;
    if !(HEADER_BYTES..=block_size).contains(&header_bytes) {
        return Err(bad("header size"));
    }
    let stored = u32_at(&header, 16);
    // The CRC covers the header with its own CRC field taken as zero.
    let computed = crc32(&[&header[..16], &[0; 4], &header[20..header_bytes]]);
    if stored != computed {
        return Err(PartitionError::GptHeaderCrc { stored, computed });
    }
    if u64_at(&header, 24) != 1 {
        return Err(bad("the header does not place itself at block 1"));
    }
    let first_usable = u64_at(&header, 40);
    let last_usable = u64_at(&header, 48);
    if first_usable > last_usable || last_usable >= device_blocks {
        return Err(bad("usable blocks outside the disk"));
    }
    let entries_block = u64_at(&header, 72);
    let count = u64::from(u32_at(&header, 80));
    let entry_bytes = u64::from(u32_at(&header, 84));
    if entry_bytes < 128 || !entry_bytes.is_power_of_two() {
        return Err(bad("entry size"));
    }
    let array_bytes = count * entry_bytes;
    if array_bytes > MAX_ENTRY_ARRAY_BYTES {
        return Err(bad("entry array too large"));
    }
    let array_blocks = array_bytes.div_ceil(block_size as u64);
    if entries_block < 2 || entries_block.saturating_add(array_blocks) > device_blocks {
        return Err(bad("entry array outside the disk"));
    }
    let mut array = vec![0u8; array_bytes as usize];
    cache.read(entries_block, 0, &mut array)?;
    let stored = u32_at(&header, 88);
    let computed = crc32(&[&array]);
    if stored != computed {
        return Err(PartitionError::GptEntriesCrc { stored, computed });
    }
    let mut partitions = Vec::new();
    for (index, entry) in array.chunks_exact(entry_bytes as usize).enumerate() {
        let kind: [u8; 16] = entry[..16].try_into().unwrap_or([0; 16]);
        if kind == [0; 16] {
            continue;
        }
        let first_block = u64_at(entry, 32);
        let last_block = u64_at(entry, 40);
        if last_block < first_block {
            return Err(PartitionError::EmptyEntry { index });
        }
        partitions.push(Partition {
            index,
            first_block,
            // `last_block` is inclusive; saturating keeps a wild value an
            // out-of-range error rather than an overflow.
            blocks: (last_block - first_block).saturating_add(1),
            kind: PartitionType::Gpt(kind),
        });
    }
    check_placement(&partitions, first_usable, last_usable + 1)?;
    Ok(PartitionTable {
        scheme: PartitionScheme::Gpt,
        partitions,
    })
}
