//! MBR and GPT partition tables built in memory, and FAT volumes mounted
//! from the partitions they describe.

use hotkern_bcache::image::ImageBuilder;
use hotkern_bcache::{
    read_partitions, BlockCache, FatError, FatVolume, HotkernCache, MemoryDevice, PartitionError,
    PartitionScheme, PartitionType, GPT_TYPE_BASIC_DATA,
};

const VOLUME_BYTES: usize = 8 << 20;

fn volume() -> Vec<u8> {
    let mut image = ImageBuilder::new(VOLUME_BYTES, None).unwrap();
    image
        .add_file("boot/loader.conf", b"kernel=\"kernel\"\n")
        .unwrap();
    image
        .add_file("boot/kernel/kernel", &[0x7F; 70_000])
        .unwrap();
    image.finish()
}

fn mbr_entry(disk: &mut [u8], slot: usize, kind: u8, first: u32, blocks: u32) {
    let at = 446 + 16 * slot;
    disk[at + 4] = kind;
    disk[at + 8..at + 12].copy_from_slice(&first.to_le_bytes());
    disk[at + 12..at + 16].copy_from_slice(&blocks.to_le_bytes());
    disk[510] = 0x55;
    disk[511] = 0xAA;
}

/// A 16 MiB disk of 512-byte blocks with the volume in MBR slot 0 at 1 MiB.
fn mbr_disk() -> Vec<u8> {
    let mut disk = vec![0u8; 16 << 20];
    disk[1 << 20..(1 << 20) + VOLUME_BYTES].copy_from_slice(&volume());
    mbr_entry(&mut disk, 0, 0x0E, 2048, (VOLUME_BYTES / 512) as u32);
    disk
}

/// Where the GPT entries of a disk with `block` bytes per block are.
fn entries_at(block: usize) -> usize {
    2 * block
}

/// Recomputes the entry array's and then the header's CRC-32.
fn seal_gpt(disk: &mut [u8], block: usize) {
    let header = block;
    let entries = entries_at(block);
    let crc = crc32fast::hash(&disk[entries..entries + 128 * 128]);
    disk[header + 88..header + 92].copy_from_slice(&crc.to_le_bytes());
    disk[header + 16..header + 20].fill(0);
    let crc = crc32fast::hash(&disk[header..header + 92]);
    disk[header + 16..header + 20].copy_from_slice(&crc.to_le_bytes());
}

fn gpt_entry(disk: &mut [u8], block: usize, slot: usize, first: u64, last: u64) {
    let at = entries_at(block) + 128 * slot;
    disk[at..at + 16].copy_from_slice(&GPT_TYPE_BASIC_DATA);
    disk[at + 16..at + 32].fill(slot as u8 + 1);
    disk[at + 32..at + 40].copy_from_slice(&first.to_le_bytes());
    disk[at + 40..at + 48].copy_from_slice(&last.to_le_bytes());
}

/// A 16 MiB GPT disk with the volume in entry 0 at 1 MiB, its header and
/// entries sealed with their CRCs.
fn gpt_disk(block: usize) -> Vec<u8> {
    let total = (16 << 20) / block;
    let mut disk = vec![0u8; 16 << 20];
    mbr_entry(&mut disk, 0, 0xEE, 1, (total - 1) as u32);
    let h = block;
    disk[h..h + 8].copy_from_slice(b"EFI PART");
    disk[h + 8..h + 12].copy_from_slice(&0x0001_0000u32.to_le_bytes());
    disk[h + 12..h + 16].copy_from_slice(&92u32.to_le_bytes());
    disk[h + 24..h + 32].copy_from_slice(&1u64.to_le_bytes());
    disk[h + 32..h + 40].copy_from_slice(&(total as u64 - 1).to_le_bytes());
    let array_blocks = (128 * 128 / block) as u64;
    disk[h + 40..h + 48].copy_from_slice(&(2 + array_blocks).to_le_bytes());
    disk[h + 48..h + 56].copy_from_slice(&(total as u64 - 2 - array_blocks).to_le_bytes());
    disk[h + 56..h + 72].fill(0x42);
    disk[h + 72..h + 80].copy_from_slice(&2u64.to_le_bytes());
    disk[h + 80..h + 84].copy_from_slice(&128u32.to_le_bytes());
    disk[h + 84..h + 88].copy_from_slice(&128u32.to_le_bytes());
    let first = ((1 << 20) / block) as u64;
    gpt_entry(
        &mut disk,
        block,
        0,
        first,
        first + (VOLUME_BYTES / block) as u64 - 1,
    );
    disk[1 << 20..(1 << 20) + VOLUME_BYTES].copy_from_slice(&volume());
    seal_gpt(&mut disk, block);
    disk
}

fn cache(disk: Vec<u8>, block: usize) -> HotkernCache<MemoryDevice> {
    HotkernCache::new(MemoryDevice::new(disk, block).unwrap(), 64 << 10)
}

fn partitions(disk: Vec<u8>, block: usize) -> Result<Vec<(u64, u64)>, PartitionError> {
    let table = read_partitions(&mut cache(disk, block))?;
    Ok(table
        .partitions
        .iter()
        .map(|p| (p.first_block, p.blocks))
        .collect())
}

fn read_loader_conf(cache: &mut HotkernCache<MemoryDevice>) {
    let table = read_partitions(cache).unwrap();
    let mut volume = FatVolume::mount_partition(cache, &table.partitions[0]).unwrap();
    assert_eq!(
        volume.read_file("/boot/loader.conf", 512).unwrap(),
        b"kernel=\"kernel\"\n"
    );
    assert_eq!(
        volume.read_file("/boot/kernel/kernel", 4096).unwrap(),
        vec![0x7F; 70_000]
    );
}

#[test]
fn a_fat_partition_at_1_mib_of_an_mbr_disk_mounts() {
    let mut cache = cache(mbr_disk(), 512);
    // The disk's first block is the MBR, not the volume's boot sector.
    assert!(matches!(
        FatVolume::mount(&mut cache),
        Err(FatError::BadBootSector(_))
    ));
    let table = read_partitions(&mut cache).unwrap();
    assert_eq!(table.scheme, PartitionScheme::Mbr);
    assert_eq!(table.partitions.len(), 1);
    let partition = table.partitions[0];
    assert_eq!((partition.index, partition.first_block), (0, 2048));
    assert_eq!(partition.blocks, (VOLUME_BYTES / 512) as u64);
    assert_eq!(partition.kind, PartitionType::Mbr(0x0E));
    read_loader_conf(&mut cache);
}

#[test]
fn a_fat_partition_of_a_gpt_disk_mounts_with_512_and_4096_byte_blocks() {
    for block in [512, 4096] {
        let mut cache = cache(gpt_disk(block), block);
        let table = read_partitions(&mut cache).unwrap();
        assert_eq!(table.scheme, PartitionScheme::Gpt);
        assert_eq!(table.partitions.len(), 1);
        assert_eq!(table.partitions[0].first_block, ((1 << 20) / block) as u64);
        assert_eq!(
            table.partitions[0].kind,
            PartitionType::Gpt(GPT_TYPE_BASIC_DATA)
        );
        read_loader_conf(&mut cache);
    }
}

#[test]
fn corrupt_gpt_crcs_are_typed_errors() {
    let mut disk = gpt_disk(512);
    disk[512 + 40] ^= 1; // first usable block, under the header CRC
    assert!(matches!(
        partitions(disk, 512),
        Err(PartitionError::GptHeaderCrc { .. })
    ));
    let mut disk = gpt_disk(512);
    disk[entries_at(512) + 32] ^= 1; // entry 0's first block, under the entries CRC
    assert!(matches!(
        partitions(disk, 512),
        Err(PartitionError::GptEntriesCrc { .. })
    ));
    let mut disk = gpt_disk(512);
    disk[512..520].copy_from_slice(b"EFI FART");
    assert_eq!(
        partitions(disk, 512),
        Err(PartitionError::BadGptHeader("no EFI PART signature"))
    );
    // A header that claims a huge entry array, sealed with a correct CRC.
    let mut disk = gpt_disk(512);
    disk[512 + 80..512 + 84].copy_from_slice(&u32::MAX.to_le_bytes());
    seal_gpt(&mut disk, 512);
    assert_eq!(
        partitions(disk, 512),
        Err(PartitionError::BadGptHeader("entry array too large"))
    );
}

#[test]
fn overlapping_and_out_of_range_entries_are_refused() {
    let mut disk = mbr_disk();
    mbr_entry(&mut disk, 2, 0x83, 4096, 100);
    assert_eq!(
        partitions(disk, 512),
        Err(PartitionError::Overlap {
            first: 0,
            second: 2
        })
    );
    let mut disk = mbr_disk();
    mbr_entry(&mut disk, 1, 0x83, 32768 - 10, 11);
    assert_eq!(
        partitions(disk, 512),
        Err(PartitionError::OutOfRange {
            index: 1,
            end_block: 32769,
            limit: 32768
        })
    );
    let mut disk = mbr_disk();
    mbr_entry(&mut disk, 3, 0x83, 30000, 0);
    assert_eq!(
        partitions(disk, 512),
        Err(PartitionError::EmptyEntry { index: 3 })
    );
    // Adjacent partitions are fine.
    let mut disk = mbr_disk();
    mbr_entry(&mut disk, 1, 0x83, 2048 + (VOLUME_BYTES / 512) as u32, 100);
    assert_eq!(partitions(disk, 512).unwrap().len(), 2);

    let mut disk = gpt_disk(512);
    gpt_entry(&mut disk, 512, 5, 2048 + 100, 2048 + 200);
    seal_gpt(&mut disk, 512);
    assert_eq!(
        partitions(disk, 512),
        Err(PartitionError::Overlap {
            first: 0,
            second: 5
        })
    );
    let mut disk = gpt_disk(512);
    // Ends in the last 33 blocks, which hold the backup GPT.
    gpt_entry(&mut disk, 512, 1, 30000, 32767);
    seal_gpt(&mut disk, 512);
    assert!(matches!(
        partitions(disk, 512),
        Err(PartitionError::OutOfRange { index: 1, .. })
    ));
    let mut disk = gpt_disk(512);
    gpt_entry(&mut disk, 512, 1, 30000, 20000);
    seal_gpt(&mut disk, 512);
    assert_eq!(
        partitions(disk, 512),
        Err(PartitionError::EmptyEntry { index: 1 })
    );
}

#[test]
fn disks_without_a_table_say_so() {
    assert_eq!(
        partitions(vec![0u8; 1 << 20], 512),
        Err(PartitionError::NoTable)
    );
    // An MBR whose boot flag is neither 0x00 nor 0x80.
    let mut disk = mbr_disk();
    disk[446] = 0x12;
    assert_eq!(partitions(disk, 512), Err(PartitionError::NoTable));
}

#[test]
fn a_partition_past_the_disk_or_smaller_than_its_volume_does_not_mount() {
    let mut disk = mbr_disk();
    // The partition claims half the volume: the boot sector says more.
    mbr_entry(&mut disk, 0, 0x0E, 2048, (VOLUME_BYTES / 1024) as u32);
    let mut cache = cache(disk, 512);
    let table = read_partitions(&mut cache).unwrap();
    assert!(matches!(
        FatVolume::mount_partition(&mut cache, &table.partitions[0]),
        Err(FatError::Truncated { .. })
    ));
    let mut beyond = table.partitions[0];
    beyond.first_block = cache.block_count();
    assert!(matches!(
        FatVolume::mount_partition(&mut cache, &beyond),
        Err(FatError::Truncated { .. })
    ));
    assert_eq!(cache.stats().requests, 1 + 1, "the MBR and one boot sector");
}
