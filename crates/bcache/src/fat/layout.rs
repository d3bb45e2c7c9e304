//! The boot sector: where the FATs, the root directory and the clusters
//! are, checked so that no later computation can overflow or point outside
//! the volume.

use super::{FatError, FatType};

/// What the boot sector says, validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Layout {
    pub fat_type: FatType,
    pub cluster_bytes: u64,
    /// Byte offset of the first FAT.
    pub fat_offset: u64,
    /// Byte offset and entry count of the FAT12/16 root directory.
    pub root_offset: u64,
    pub root_entries: u64,
    /// FAT32 root directory's first cluster.
    pub root_cluster: u32,
    /// Byte offset of cluster 2.
    pub data_offset: u64,
    /// Number of data clusters (valid cluster numbers are 2..clusters+2).
    pub clusters: u32,
    /// Bytes the boot sector says the volume has.
    pub volume_bytes: u64,
}

fn u16_at(sector: &[u8; 512], at: usize) -> u64 {
    u64::from(u16::from_le_bytes([sector[at], sector[at + 1]]))
}

fn u32_at(sector: &[u8; 512], at: usize) -> u64 {
    u64::from(u32::from_le_bytes([
        sector[at],
        sector[at + 1],
        sector[at + 2],
        sector[at + 3],
    ]))
}

impl Layout {
    /// Parses the first 512 bytes of a volume of `device_bytes` bytes.
    pub fn parse(sector: &[u8; 512], device_bytes: u64) -> Result<Layout, FatError> {
        let bad = FatError::BadBootSector;
        if sector[510] != 0x55 || sector[511] != 0xAA {
            return Err(bad("no boot signature"));
        }
        let bytes_per_sector = u16_at(sector, 11);
        if !bytes_per_sector.is_power_of_two() || !(512..=4096).contains(&bytes_per_sector) {
            return Err(bad("bytes per sector"));
        }
        let sectors_per_cluster = u64::from(sector[13]);
        if !sectors_per_cluster.is_power_of_two() || sectors_per_cluster > 128 {
            return Err(bad("sectors per cluster"));
        }
        let reserved = u16_at(sector, 14);
        let fats = u64::from(sector[16]);
        let root_entries = u16_at(sector, 17);
        let total16 = u16_at(sector, 19);
        let fat16_sectors = u16_at(sector, 22);
        let total32 = u32_at(sector, 32);
        let fat32_sectors = u32_at(sector, 36);
        if reserved == 0 || fats == 0 {
            return Err(bad("reserved sectors or FAT count"));
        }
        let total = if total16 != 0 { total16 } else { total32 };
        let fat_sectors = if fat16_sectors != 0 {
            fat16_sectors
        } else {
            fat32_sectors
        };
        if total == 0 || fat_sectors == 0 {
            return Err(bad("total sectors or FAT size"));
        }
        let root_sectors = (root_entries * 32).div_ceil(bytes_per_sector);
        // All terms are below 2^32 × 2^8, so u64 cannot overflow.
        let first_data = reserved + fats * fat_sectors + root_sectors;
        if first_data >= total {
            return Err(bad("no room for data clusters"));
        }
        let clusters = (total - first_data) / sectors_per_cluster;
        let fat_type = if clusters < 4085 {
            FatType::Fat12
        } else if clusters < 65525 {
            FatType::Fat16
        } else {
            FatType::Fat32
        };
        if clusters == 0 || clusters > 0x0FFF_FFF5 {
            return Err(bad("cluster count"));
        }
        let fat_needed = match fat_type {
            FatType::Fat12 => (clusters + 2) * 3 / 2 + 1,
            FatType::Fat16 => (clusters + 2) * 2,
            FatType::Fat32 => (clusters + 2) * 4,
        };
        if fat_sectors * bytes_per_sector < fat_needed {
            return Err(bad("FAT too small for the clusters"));
        }
        let (root_entries, root_cluster) = match fat_type {
            FatType::Fat32 => {
                let root_cluster = u32_at(sector, 44);
                if root_entries != 0 || root_cluster < 2 || root_cluster >= clusters + 2 {
                    return Err(bad("FAT32 root directory"));
                }
                (0, root_cluster as u32)
            }
            _ if root_entries == 0 => return Err(bad("empty root directory")),
            _ => (root_entries, 0),
        };
        let volume_bytes = total * bytes_per_sector;
        if volume_bytes > device_bytes {
            return Err(FatError::Truncated {
                volume_bytes,
                device_bytes,
            });
        }
        Ok(Layout {
            fat_type,
            cluster_bytes: sectors_per_cluster * bytes_per_sector,
            fat_offset: reserved * bytes_per_sector,
            root_offset: (reserved + fats * fat_sectors) * bytes_per_sector,
            root_entries,
            root_cluster,
            data_offset: first_data * bytes_per_sector,
            clusters: clusters as u32,
            volume_bytes,
        })
    }

    /// Whether `cluster` names a data cluster.
    pub fn valid_cluster(&self, cluster: u32) -> bool {
        cluster >= 2 && u64::from(cluster) < u64::from(self.clusters) + 2
    }

    /// Byte offset of a valid cluster.
    pub fn cluster_offset(&self, cluster: u32) -> u64 {
        self.data_offset + u64::from(cluster - 2) * self.cluster_bytes
    }

    /// Where a cluster's FAT entry lies: byte offset and length.
    pub fn entry_location(&self, cluster: u32) -> (u64, usize) {
        let c = u64::from(cluster);
        match self.fat_type {
            FatType::Fat12 => (self.fat_offset + c + c / 2, 2),
            FatType::Fat16 => (self.fat_offset + c * 2, 2),
            FatType::Fat32 => (self.fat_offset + c * 4, 4),
        }
    }

    /// Decodes a FAT entry: `Ok(Some(next))`, `Ok(None)` at the end of the
    /// chain, an error for a free, bad or out-of-range link.
    pub fn decode_entry(&self, cluster: u32, raw: [u8; 4]) -> Result<Option<u32>, FatError> {
        let value = match self.fat_type {
            FatType::Fat12 => {
                let pair = u32::from(u16::from_le_bytes([raw[0], raw[1]]));
                if cluster % 2 == 1 {
                    pair >> 4
                } else {
                    pair & 0xFFF
                }
            }
            FatType::Fat16 => u32::from(u16::from_le_bytes([raw[0], raw[1]])),
            FatType::Fat32 => u32::from_le_bytes(raw) & 0x0FFF_FFFF,
        };
        let end_of_chain = match self.fat_type {
            FatType::Fat12 => 0xFF8,
            FatType::Fat16 => 0xFFF8,
            FatType::Fat32 => 0x0FFF_FFF8,
        };
        // A link back to `cluster` itself is left to the chain walks, which
        // catch it as they catch every longer loop.
        if value >= end_of_chain {
            Ok(None)
        } else if self.valid_cluster(value) {
            Ok(Some(value))
        } else {
            Err(FatError::Corrupt(
                "cluster chain links to a free, bad or missing cluster",
            ))
        }
    }
}
