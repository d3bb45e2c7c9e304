//! Boot sectors written by hand, at the edges the FAT specification
//! draws: the cluster counts that separate FAT12, FAT16 and FAT32, the
//! smallest FAT that holds every cluster's entry, the largest cluster
//! count, fields that must not be zero. The reader's answer at mount is
//! compared with what the specification says of each.

use hotkern_bcache::{CacheKind, FatError, FatType, FatVolume, MemoryDevice};

/// One volume's boot-sector fields (512-byte sectors, one reserved sector,
/// one FAT, 512 root entries on FAT12/16 — 32 sectors — and the root at
/// cluster 2 on FAT32).
#[derive(Clone, Copy)]
struct Geometry {
    fat_type: FatType,
    sectors_per_cluster: u8,
    clusters: u64,
    fat_sectors: u64,
}

impl Geometry {
    /// A volume of `clusters` single-sector clusters whose FAT has room to
    /// spare (four bytes an entry, as FAT32's).
    fn roomy(fat_type: FatType, clusters: u64) -> Geometry {
        Geometry {
            fat_type,
            sectors_per_cluster: 1,
            clusters,
            fat_sectors: ((clusters + 2) * 4).div_ceil(512),
        }
    }

    fn root_sectors(&self) -> u64 {
        if self.fat_type == FatType::Fat32 {
            0
        } else {
            512 * 32 / 512
        }
    }

    fn total_sectors(&self) -> u64 {
        1 + self.fat_sectors
            + self.root_sectors()
            + self.clusters * u64::from(self.sectors_per_cluster)
    }

    /// The boot sector.
    fn sector(&self) -> [u8; 512] {
        let mut s = [0u8; 512];
        s[11..13].copy_from_slice(&512u16.to_le_bytes());
        s[13] = self.sectors_per_cluster;
        s[14..16].copy_from_slice(&1u16.to_le_bytes()); // reserved sectors
        s[16] = 1; // FATs
        let total = self.total_sectors();
        if self.fat_type == FatType::Fat32 {
            s[32..36].copy_from_slice(&(total as u32).to_le_bytes());
            s[36..40].copy_from_slice(&(self.fat_sectors as u32).to_le_bytes());
            s[44..48].copy_from_slice(&2u32.to_le_bytes()); // root cluster
        } else {
            s[17..19].copy_from_slice(&512u16.to_le_bytes()); // root entries
            if total < 0x10000 {
                s[19..21].copy_from_slice(&(total as u16).to_le_bytes());
            } else {
                s[32..36].copy_from_slice(&(total as u32).to_le_bytes());
            }
            s[22..24].copy_from_slice(&(self.fat_sectors as u16).to_le_bytes());
        }
        s[510] = 0x55;
        s[511] = 0xAA;
        s
    }

    /// Mounts a zeroed device of the volume's size with this boot sector;
    /// on success, the FAT type and cluster size.
    fn mount(&self) -> Result<(FatType, u64), FatError> {
        mount_sector(&self.sector(), self.total_sectors() as usize)
    }
}

fn mount_sector(sector: &[u8; 512], device_sectors: usize) -> Result<(FatType, u64), FatError> {
    let mut bytes = vec![0u8; device_sectors * 512];
    bytes[..512].copy_from_slice(sector);
    let disk = MemoryDevice::new(bytes, 512).unwrap();
    let mut cache = CacheKind::None.build(disk, 0);
    let volume = FatVolume::mount(&mut *cache)?;
    Ok((volume.fat_type(), volume.cluster_bytes()))
}

/// "A FAT12 volume cannot contain more than 4084 clusters. A FAT16 volume
/// cannot contain less than 4085 clusters or more than 65,524 clusters"
/// (Microsoft's FAT specification, fatgen103): the count alone decides
/// the type.
#[test]
fn the_cluster_count_alone_decides_the_fat_type() {
    let cases = [
        (1, FatType::Fat12),
        (4084, FatType::Fat12),
        (4085, FatType::Fat16),
        (65_524, FatType::Fat16),
        (65_525, FatType::Fat32),
        (70_000, FatType::Fat32),
    ];
    for (clusters, fat_type) in cases {
        let geometry = Geometry::roomy(fat_type, clusters);
        assert_eq!(geometry.mount(), Ok((fat_type, 512)), "{clusters} clusters");
    }
}

/// The reader looks up cluster c's entry at byte c × 1.5 (FAT12, two bytes
/// read), c × 2 or c × 4 of the FAT; the last cluster is number
/// `clusters + 1`. Each count below puts the end of the last entry one or
/// two bytes past a sector boundary, or right on one: the FAT needs the
/// sectors up to that end, and one sector fewer is refused.
#[test]
fn a_fat_one_sector_too_small_for_the_last_entry_is_refused() {
    let cases = [
        // 681 clusters: entry 682 at byte 1023, read 1023..1025.
        (FatType::Fat12, 681, 1025),
        // 5119 clusters: entry 5120 at byte 10 240, read 10 240..10 242.
        (FatType::Fat16, 5119, 10_242),
        // 5118 clusters: entry 5119 read 10 238..10 240, exactly 20 sectors.
        (FatType::Fat16, 5118, 10_240),
        // 65 535 clusters: entry 65 536 at byte 262 144, read ..262 148.
        (FatType::Fat32, 65_535, 262_148),
    ];
    for (fat_type, clusters, bytes_read) in cases {
        let enough = (bytes_read as u64).div_ceil(512);
        let mut geometry = Geometry {
            fat_type,
            sectors_per_cluster: 1,
            clusters,
            fat_sectors: enough,
        };
        assert_eq!(geometry.mount(), Ok((fat_type, 512)), "{fat_type:?}");
        geometry.fat_sectors = enough - 1;
        assert_eq!(
            geometry.mount(),
            Err(FatError::BadBootSector("FAT too small for the clusters")),
            "{fat_type:?}"
        );
    }
}

/// FAT32 cluster numbers have 28 bits, and 0x0FFF_FFF7 and up are marks:
/// 0x0FFF_FFF5 clusters (numbered 2 to 0x0FFF_FFF6) is the most a volume
/// may have. Such a volume passes the boot-sector checks and is then too
/// big for the one-megabyte device; one cluster more is refused as such.
#[test]
fn the_largest_fat32_cluster_count_is_accepted_and_one_more_refused() {
    let most = Geometry::roomy(FatType::Fat32, 0x0FFF_FFF5);
    match mount_sector(&most.sector(), 2048) {
        Err(FatError::Truncated {
            volume_bytes,
            device_bytes,
        }) => {
            assert_eq!(volume_bytes, most.total_sectors() * 512);
            assert_eq!(device_bytes, 1 << 20);
        }
        other => panic!("{other:?}"),
    }
    let too_many = Geometry::roomy(FatType::Fat32, 0x0FFF_FFF6);
    assert_eq!(
        mount_sector(&too_many.sector(), 2048),
        Err(FatError::BadBootSector("cluster count"))
    );
}

#[test]
fn clusters_of_128_sectors_are_the_largest_accepted() {
    let mut geometry = Geometry::roomy(FatType::Fat12, 10);
    geometry.sectors_per_cluster = 128;
    assert_eq!(geometry.mount(), Ok((FatType::Fat12, 128 * 512)));
    for bad in [0, 3, 96, 255] {
        geometry.sectors_per_cluster = bad;
        assert_eq!(
            geometry.mount(),
            Err(FatError::BadBootSector("sectors per cluster")),
            "{bad}"
        );
    }
}

/// Fields that must not be zero, each zeroed alone in a valid boot sector,
/// and a data area too small for one cluster: each is refused with its
/// own reason.
#[test]
fn each_zero_field_is_refused_for_its_own_reason() {
    let valid = Geometry::roomy(FatType::Fat16, 5000);
    assert!(valid.mount().is_ok());
    let sectors = valid.total_sectors() as usize;
    let zeroed = |range: core::ops::Range<usize>| {
        let mut sector = valid.sector();
        sector[range].fill(0);
        mount_sector(&sector, sectors)
    };
    let reserved = Err(FatError::BadBootSector("reserved sectors or FAT count"));
    assert_eq!(zeroed(14..16), reserved, "reserved sectors");
    assert_eq!(zeroed(16..17), reserved, "FAT count");
    assert_eq!(
        zeroed(17..19),
        Err(FatError::BadBootSector("empty root directory")),
        "FAT16 root entries"
    );
    let sizes = Err(FatError::BadBootSector("total sectors or FAT size"));
    assert_eq!(zeroed(19..21), sizes, "total sectors");
    assert_eq!(zeroed(22..24), sizes, "FAT size");
    // Two-sector clusters and one sector after the root directory: no
    // whole cluster fits.
    let mut small = Geometry::roomy(FatType::Fat12, 0);
    small.sectors_per_cluster = 2;
    let mut sector = small.sector();
    let total = small.total_sectors() + 1;
    sector[19..21].copy_from_slice(&(total as u16).to_le_bytes());
    assert_eq!(
        mount_sector(&sector, total as usize),
        Err(FatError::BadBootSector("cluster count"))
    );
}

/// A FAT32 root directory is a cluster chain: the fixed root's entry count
/// must be zero and the root's first cluster one of the volume's (2 to
/// `clusters + 1`).
#[test]
fn a_fat32_root_outside_the_clusters_is_refused() {
    let geometry = Geometry::roomy(FatType::Fat32, 70_000);
    let sectors = geometry.total_sectors() as usize;
    let with = |at: usize, value: &[u8]| {
        let mut sector = geometry.sector();
        sector[at..at + value.len()].copy_from_slice(value);
        mount_sector(&sector, sectors)
    };
    let root_cluster = |cluster: u32| with(44, &cluster.to_le_bytes());
    let refused = Err(FatError::BadBootSector("FAT32 root directory"));
    assert_eq!(
        with(17, &512u16.to_le_bytes()),
        refused,
        "fixed root entries"
    );
    for cluster in [0, 1, 70_002, 70_003, u32::MAX] {
        assert_eq!(root_cluster(cluster), refused, "root at {cluster}");
    }
    for cluster in [2, 3, 35_000, 70_001] {
        assert_eq!(
            root_cluster(cluster),
            Ok((FatType::Fat32, 512)),
            "root at {cluster}"
        );
    }
}
