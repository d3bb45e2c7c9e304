//! The volume's geometry as the boot sector gives it, read back through
//! the reader's answers: cluster size, the last cluster of the volume,
//! sizes no volume can hold.

mod common;

use common::fat::{find_short_entry, Fat, CLUSTER, TYPES};
use common::pattern;
use hotkern_bcache::image::ImageBuilder;
use hotkern_bcache::{BlockCache, CacheKind, DirEntry, FatError, FatType, FatVolume, MemoryDevice};

/// The boot sector's numbers, read by hand (offsets from the FAT
/// specification's BPB table).
struct Bpb {
    bytes_per_sector: u64,
    sectors_per_cluster: u64,
    /// First sector after the reserved sectors, the FATs and the FAT12/16
    /// root directory.
    first_data_sector: u64,
    total_sectors: u64,
}

impl Bpb {
    fn of(image: &[u8]) -> Bpb {
        let u16_at = |at: usize| u64::from(u16::from_le_bytes([image[at], image[at + 1]]));
        let u32_at =
            |at: usize| u64::from(u32::from_le_bytes(image[at..at + 4].try_into().unwrap()));
        let bytes_per_sector = u16_at(11);
        let fat_sectors = if u16_at(22) != 0 {
            u16_at(22)
        } else {
            u32_at(36)
        };
        let root_sectors = (u16_at(17) * 32).div_ceil(bytes_per_sector);
        Bpb {
            bytes_per_sector,
            sectors_per_cluster: u64::from(image[13]),
            first_data_sector: u16_at(14) + u64::from(image[16]) * fat_sectors + root_sectors,
            total_sectors: if u16_at(19) != 0 {
                u16_at(19)
            } else {
                u32_at(32)
            },
        }
    }

    fn cluster_bytes(&self) -> u64 {
        self.bytes_per_sector * self.sectors_per_cluster
    }

    fn clusters(&self) -> u64 {
        (self.total_sectors - self.first_data_sector) / self.sectors_per_cluster
    }

    /// Byte offset of cluster `cluster` (clusters are numbered from 2).
    fn cluster_offset(&self, cluster: u32) -> usize {
        let sector = self.first_data_sector + u64::from(cluster - 2) * self.sectors_per_cluster;
        (sector * self.bytes_per_sector) as usize
    }
}

fn mounted<T>(image: Vec<u8>, f: impl FnOnce(&mut FatVolume<'_, dyn BlockCache + '_>) -> T) -> T {
    let disk = MemoryDevice::new(image, 512).unwrap();
    let mut cache = CacheKind::Hotkern.build(disk, 64 << 10);
    let mut volume = FatVolume::mount(&mut *cache).expect("mount");
    f(&mut volume)
}

#[test]
fn cluster_size_is_the_boot_sectors() {
    let cases = [
        (FatType::Fat12, 1 << 20, 512),
        (FatType::Fat12, 4 << 20, 2048),
        (FatType::Fat16, 8 << 20, 512),
        (FatType::Fat16, 32 << 20, 4096),
        (FatType::Fat32, 40 << 20, 512),
    ];
    for (fat_type, volume_bytes, cluster) in cases {
        let image =
            ImageBuilder::with_cluster(volume_bytes, Some(fat_type), Some(cluster)).unwrap();
        let image = image.finish();
        let bpb = Bpb::of(&image);
        assert_eq!(
            bpb.cluster_bytes(),
            u64::from(cluster),
            "fatfs honours the size"
        );
        mounted(image, |volume| {
            assert_eq!(volume.fat_type(), fat_type);
            assert_eq!(volume.cluster_bytes(), u64::from(cluster), "{fat_type:?}");
        });
    }
}

/// A file that takes every cluster of a FAT12 or FAT16 volume (whose root
/// directory lies outside the clusters) ends on the volume's last byte:
/// the reader must read right up to the end of the volume, and accept a
/// file that needs every cluster there is.
#[test]
fn a_file_filling_the_volume_reads_to_its_last_byte() {
    for (fat_type, volume_bytes) in [(FatType::Fat12, 1 << 20), (FatType::Fat16, 8 << 20)] {
        let empty = ImageBuilder::with_cluster(volume_bytes, Some(fat_type), Some(512)).unwrap();
        let bpb = Bpb::of(empty.bytes());
        // One sector per cluster: the clusters run to the last sector.
        assert_eq!(bpb.first_data_sector + bpb.clusters(), bpb.total_sectors);
        assert_eq!(bpb.total_sectors * 512, volume_bytes as u64);
        let data = pattern(bpb.clusters() as usize * CLUSTER, 11);
        let mut image = empty;
        image.add_file("all.bin", &data).unwrap();
        let image = image.finish();
        assert!(image[volume_bytes - CLUSTER..] == data[data.len() - CLUSTER..]);
        mounted(image, |volume| {
            let read = volume.read_file("all.bin", 4096).unwrap();
            assert!(read == data, "{fat_type:?}");
        });
    }
}

/// The smallest volume of `fat_type` fatfs formats with 512-byte clusters
/// (FAT32 needs 65 525 clusters), holding `data` as `f.bin`.
fn one_file_image(fat_type: FatType, data: &[u8]) -> Vec<u8> {
    let volume_bytes = match fat_type {
        FatType::Fat12 => 1 << 20,
        FatType::Fat16 => 8 << 20,
        FatType::Fat32 => 40 << 20,
    };
    let mut image = ImageBuilder::with_cluster(volume_bytes, Some(fat_type), Some(512)).unwrap();
    image.add_file("f.bin", data).unwrap();
    image.finish()
}

/// A size needing more clusters than the volume has is corrupt whatever
/// the chain says, and is refused before any read (or any buffer of that
/// size): the chain could not hold it.
#[test]
fn a_size_beyond_the_volume_is_refused_before_any_read() {
    for fat_type in TYPES {
        let image = one_file_image(fat_type, &pattern(3 * CLUSTER, 12));
        let clusters = Bpb::of(&image).clusters();
        mounted(image, |volume| {
            let file = volume.lookup("f.bin").unwrap();
            for size in [
                (clusters + 1) * 512,
                (clusters + 1) * 512 - 511,
                u64::from(u32::MAX),
            ] {
                let huge = DirEntry {
                    size: size as u32,
                    ..file.clone()
                };
                let before = volume.cache().stats().requests;
                let mut out = vec![1u8; 5];
                assert_eq!(
                    volume.read_entry(&huge, 512, &mut out),
                    Err(FatError::Corrupt("file larger than the volume")),
                    "{fat_type:?}: {size} bytes"
                );
                assert!(out.is_empty());
                assert_eq!(volume.cache().stats().requests, before, "{fat_type:?}");
            }
        });
    }
}

/// FAT32 directory entries keep a first cluster's high 16 bits at bytes
/// 20..22 and its low 16 bits at 26..28. A file moved by hand to clusters
/// 70 000 and 70 001 (high word 1) must read from there; FAT12 and FAT16
/// have no high word, so the same bytes, set to garbage, must be ignored.
#[test]
fn first_clusters_use_the_high_word_on_fat32_only() {
    let data = pattern(2 * CLUSTER, 13);
    for fat_type in TYPES {
        let mut image = one_file_image(fat_type, &data);
        let at = find_short_entry(&image, b"F       BIN");
        if fat_type == FatType::Fat32 {
            let bpb = Bpb::of(&image);
            assert!(bpb.clusters() > 70_001 - 2);
            let fat = Fat::of(&image, fat_type);
            let (first, second) = (70_000u32, 70_001u32);
            assert_eq!(
                (fat.get(&image, first), fat.get(&image, second)),
                (0, 0),
                "free"
            );
            fat.set(&mut image, first, second);
            fat.set(&mut image, second, fat.end_of_chain());
            for (i, cluster) in [first, second].into_iter().enumerate() {
                let to = bpb.cluster_offset(cluster);
                image[to..to + CLUSTER].copy_from_slice(&data[i * CLUSTER..(i + 1) * CLUSTER]);
            }
            image[at + 20..at + 22].copy_from_slice(&((first >> 16) as u16).to_le_bytes());
            image[at + 26..at + 28].copy_from_slice(&(first as u16).to_le_bytes());
        } else {
            image[at + 20..at + 22].copy_from_slice(&[0xFF, 0xFF]);
        }
        mounted(image, |volume| {
            let file = volume.lookup("f.bin").unwrap();
            if fat_type == FatType::Fat32 {
                assert_eq!(file.first_cluster, 70_000);
            }
            assert!(
                volume.read_file("f.bin", 512).unwrap() == data,
                "{fat_type:?}"
            );
        });
    }
}

/// Clusters are numbered 2 to `clusters + 1`. A chain may link to the last
/// one and a directory entry may start there; one past it is outside the
/// volume, however the boot sector's other numbers would let it be read.
#[test]
fn the_last_cluster_is_valid_and_the_one_after_it_is_not() {
    let data = pattern(2 * CLUSTER, 14);
    for fat_type in TYPES {
        let mut image = one_file_image(fat_type, &data);
        let volume_bytes = image.len();
        let bpb = Bpb::of(&image);
        let fat = Fat::of(&image, fat_type);
        let last = (bpb.clusters() + 1) as u32;
        // The clusters fill the volume up to its last sector.
        assert_eq!(bpb.cluster_offset(last) + 512, volume_bytes);
        let tail = pattern(CLUSTER, 15);
        image[volume_bytes - CLUSTER..].copy_from_slice(&tail);
        let at = find_short_entry(&image, b"F       BIN");
        let first = u32::from(u16::from_le_bytes([image[at + 26], image[at + 27]]))
            | u32::from(u16::from_le_bytes([image[at + 20], image[at + 21]])) << 16;
        let with_link = |link: u32| {
            let mut patched = image.clone();
            fat.set(&mut patched, first, link);
            fat.set(&mut patched, last, fat.end_of_chain());
            mounted(patched, |volume| volume.read_file("f.bin", 512))
        };
        // Linked to the last cluster: the file's second half is its bytes.
        let read = with_link(last).unwrap();
        assert!(
            read[..CLUSTER] == data[..CLUSTER] && read[CLUSTER..] == tail,
            "{fat_type:?}"
        );
        assert_eq!(
            with_link(last + 1),
            Err(FatError::Corrupt(
                "cluster chain links to a free, bad or missing cluster"
            )),
            "{fat_type:?}"
        );
        // A file starting at the last cluster, or one past it.
        let starting_at = |cluster: u32| {
            let mut patched = image.clone();
            patched[at + 26..at + 28].copy_from_slice(&(cluster as u16).to_le_bytes());
            patched[at + 28..at + 32].copy_from_slice(&(CLUSTER as u32).to_le_bytes());
            if fat_type == FatType::Fat32 {
                patched[at + 20..at + 22].copy_from_slice(&((cluster >> 16) as u16).to_le_bytes());
            }
            fat.set(&mut patched, last, fat.end_of_chain());
            mounted(patched, |volume| volume.read_file("f.bin", 512))
        };
        assert!(starting_at(last).unwrap() == tail, "{fat_type:?}");
        assert_eq!(
            starting_at(last + 1),
            Err(FatError::Corrupt("file cluster outside the volume")),
            "{fat_type:?}"
        );
    }
}
