//! Reading files from FAT12/16/32 volumes, every disk access going through
//! a [`BlockCache`].
//!
//! Written for this crate rather than taken from the `fatfs` crate: `fatfs`
//! 0.3 trusts cluster numbers from directory entries and FAT links (a
//! corrupted image makes it compute `cluster - 2` on cluster 0 or 1 and
//! multiply cluster numbers without overflow checks — a panic in a debug
//! build, a read at a wrapped offset in a release build), and it needs
//! `std`. This reader is `no_std`, validates every number before using it,
//! watches every chain walk for a revisited cluster (so a cyclic chain is an
//! error, not a hang or a file's bytes read twice) and returns a typed
//! [`FatError`] for anything wrong. It reads the way FreeBSD's loader
//! (dosfs over the 2016 loader cache) does: a file in requests of a chosen
//! size, one FAT lookup per cluster, FAT entries and directory records read
//! as the few bytes they are, leaving block-sized I/O to the cache.
//! (`fatfs` is still used, with `std`, to *make* test images.)

mod chain;
mod entry;
mod file;
mod layout;
mod offset;

use alloc::collections::BTreeSet;
use alloc::string::String;
use alloc::vec::Vec;
use core::fmt;

use chain::LoopDetector;
pub use entry::DirEntry;
use entry::{Decoder, Record};
use layout::Layout;

use crate::cache::BlockCache;
use crate::error::IoError;
use crate::partition::Partition;

/// The three FAT variants, told apart by cluster count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FatType {
    /// Fewer than 4085 clusters.
    Fat12,
    /// Fewer than 65525 clusters.
    Fat16,
    /// The rest.
    Fat32,
}

/// Why a FAT operation failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum FatError {
    /// The device failed.
    Device(IoError),
    /// The first sector is not a FAT boot sector (the reason given).
    BadBootSector(&'static str),
    /// The boot sector describes a volume larger than the device.
    Truncated {
        /// Bytes the boot sector claims.
        volume_bytes: u64,
        /// Bytes the device has.
        device_bytes: u64,
    },
    /// Structures inside the volume contradict each other (the reason given).
    Corrupt(&'static str),
    /// No entry has this name.
    NotFound(String),
    /// The cluster chain starting at `first_cluster` comes back to a
    /// cluster it already went through.
    ChainLoops {
        /// The chain's first cluster (the file's or directory's).
        first_cluster: u32,
    },
    /// A file's cluster chain ends before the file's size is covered.
    ChainTooShort {
        /// The chain's first cluster (0 for a file with no clusters).
        first_cluster: u32,
        /// Clusters in the chain.
        clusters: u64,
        /// Clusters the file's size needs.
        needed: u64,
    },
    /// A directory tree walk reached the same directory twice, through
    /// this path (a directory containing an ancestor, or two entries
    /// sharing one directory).
    DirectoryRevisited(String),
    /// A path component that should be a directory is a file.
    NotADirectory(String),
    /// The path names a directory where a file was expected.
    NotAFile(String),
    /// A request size of zero bytes.
    ZeroRequest,
}

impl fmt::Display for FatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FatError::Device(e) => write!(f, "device error: {e}"),
            FatError::BadBootSector(why) => write!(f, "not a FAT volume: {why}"),
            FatError::Truncated {
                volume_bytes,
                device_bytes,
            } => write!(
                f,
                "truncated image: the volume claims {volume_bytes} bytes, the device has {device_bytes}"
            ),
            FatError::Corrupt(why) => write!(f, "corrupted volume: {why}"),
            FatError::ChainLoops { first_cluster } => write!(
                f,
                "corrupted volume: the cluster chain from cluster {first_cluster} loops"
            ),
            FatError::ChainTooShort {
                first_cluster,
                clusters,
                needed,
            } => write!(
                f,
                "corrupted volume: the cluster chain from cluster {first_cluster} has {clusters} clusters, the file's size needs {needed}"
            ),
            FatError::DirectoryRevisited(path) => write!(
                f,
                "corrupted volume: {path} leads back to a directory already walked"
            ),
            FatError::NotFound(name) => write!(f, "{name}: no such file or directory"),
            FatError::NotADirectory(name) => write!(f, "{name}: not a directory"),
            FatError::NotAFile(name) => write!(f, "{name}: is a directory"),
            FatError::ZeroRequest => f.write_str("request size must be at least one byte"),
        }
    }
}

impl core::error::Error for FatError {}

impl From<IoError> for FatError {
    fn from(e: IoError) -> Self {
        FatError::Device(e)
    }
}

/// What [`FatVolume::walk`] read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WalkSummary {
    /// Directories listed (the starting one included).
    pub directories: u64,
    /// Files read.
    pub files: u64,
    /// Bytes read from them.
    pub bytes: u64,
}

/// A mounted FAT volume on a cache.
///
/// ```
/// use hotkern_bcache::{FatError, FatVolume, HotkernCache, MemoryDevice};
/// let blank = MemoryDevice::zeroed(128, 512).unwrap();
/// let mut cache = HotkernCache::new(blank, 64 << 10);
/// // A zeroed disk has no boot sector: an error, not a panic.
/// assert!(matches!(FatVolume::mount(&mut cache), Err(FatError::BadBootSector(_))));
/// ```
pub struct FatVolume<'c, C: BlockCache + ?Sized> {
    cache: &'c mut C,
    layout: Layout,
    /// Byte offset of the volume on the disk (its partition's start).
    base: u64,
    block_size: u64,
}

impl<'c, C: BlockCache + ?Sized> FatVolume<'c, C> {
    /// Reads and checks the boot sector of a volume filling the disk from
    /// its first block (an unpartitioned disk, a floppy image).
    pub fn mount(cache: &'c mut C) -> Result<Self, FatError> {
        let device_bytes = cache
            .block_count()
            .saturating_mul(cache.block_size() as u64);
        Self::mount_at(cache, 0, device_bytes)
    }

    /// Reads and checks the boot sector of the volume in `partition` (from
    /// [`read_partitions`](crate::read_partitions) on the same cache): the
    /// volume reads through the disk's cache at the partition's offset,
    /// and may not reach past the partition's end.
    ///
    /// ```
    /// # #[cfg(feature = "std")] {
    /// use hotkern_bcache::{image::ImageBuilder, read_partitions, FatVolume, HotkernCache, MemoryDevice};
    /// let mut image = ImageBuilder::new(4 << 20, None).unwrap();
    /// image.add_file("loader.conf", b"autoboot_delay=1").unwrap();
    /// // A disk with an MBR and the volume at 1 MiB (block 2048).
    /// let mut disk = vec![0u8; 1 << 20];
    /// disk[446 + 4] = 0x0E;
    /// disk[446 + 8..446 + 12].copy_from_slice(&2048u32.to_le_bytes());
    /// disk[446 + 12..446 + 16].copy_from_slice(&8192u32.to_le_bytes());
    /// disk[510..512].copy_from_slice(&[0x55, 0xAA]);
    /// disk.extend(image.finish());
    /// let mut cache = HotkernCache::new(MemoryDevice::new(disk, 512).unwrap(), 64 << 10);
    /// let table = read_partitions(&mut cache).unwrap();
    /// let mut volume = FatVolume::mount_partition(&mut cache, &table.partitions[0]).unwrap();
    /// assert_eq!(volume.read_file("loader.conf", 512).unwrap(), b"autoboot_delay=1");
    /// # }
    /// ```
    pub fn mount_partition(cache: &'c mut C, partition: &Partition) -> Result<Self, FatError> {
        let block_size = cache.block_size() as u64;
        let device_bytes = cache.block_count().saturating_mul(block_size);
        let base = partition.first_block.saturating_mul(block_size);
        let end = partition.end_block().saturating_mul(block_size);
        if end > device_bytes {
            return Err(FatError::Truncated {
                volume_bytes: end,
                device_bytes,
            });
        }
        Self::mount_at(cache, base, end - base)
    }

    fn mount_at(cache: &'c mut C, base: u64, device_bytes: u64) -> Result<Self, FatError> {
        let block_size = cache.block_size() as u64;
        if device_bytes < 512 {
            return Err(FatError::BadBootSector("device smaller than a boot sector"));
        }
        let mut sector = [0u8; 512];
        cache.read(base / block_size, (base % block_size) as usize, &mut sector)?;
        let layout = Layout::parse(&sector, device_bytes)?;
        Ok(FatVolume {
            cache,
            layout,
            base,
            block_size,
        })
    }

    /// FAT12, FAT16 or FAT32.
    pub fn fat_type(&self) -> FatType {
        self.layout.fat_type
    }

    /// Bytes per cluster.
    pub fn cluster_bytes(&self) -> u64 {
        self.layout.cluster_bytes
    }

    /// The cache underneath (for its statistics).
    pub fn cache(&mut self) -> &mut C {
        self.cache
    }

    fn read_volume(&mut self, byte: u64, buf: &mut [u8]) -> Result<(), FatError> {
        let end = byte
            .checked_add(buf.len() as u64)
            .ok_or(FatError::Corrupt("offset overflow"))?;
        if end > self.layout.volume_bytes {
            return Err(FatError::Corrupt("read past the end of the volume"));
        }
        // `byte + base` stays within the partition, itself on the disk.
        let byte = byte + self.base;
        let block = byte / self.block_size;
        let offset = (byte % self.block_size) as usize;
        self.cache.read(block, offset, buf)?;
        Ok(())
    }

    fn next_cluster(&mut self, cluster: u32) -> Result<Option<u32>, FatError> {
        if !self.layout.valid_cluster(cluster) {
            return Err(FatError::Corrupt("cluster number outside the volume"));
        }
        let (at, len) = self.layout.entry_location(cluster);
        let mut raw = [0u8; 4];
        self.read_volume(at, &mut raw[..len])?;
        self.layout.decode_entry(cluster, raw)
    }

    /// The root directory, as an entry to pass to [`read_dir`](Self::read_dir).
    pub fn root(&self) -> DirEntry {
        DirEntry {
            name: String::from("/"),
            short_name: String::from("/"),
            is_dir: true,
            size: 0,
            first_cluster: self.layout.root_cluster,
        }
    }

    /// The entries of directory `dir`, in on-disk order.
    pub fn read_dir(&mut self, dir: &DirEntry) -> Result<Vec<DirEntry>, FatError> {
        if !dir.is_dir {
            return Err(FatError::NotADirectory(dir.name.clone()));
        }
        let mut entries = Vec::new();
        let mut decoder = Decoder::default();
        let mut raw = [0u8; 32];
        let fat_type = self.layout.fat_type;
        if dir.first_cluster == 0 {
            if fat_type == FatType::Fat32 {
                return Err(FatError::Corrupt("directory without clusters"));
            }
            // The FAT12/16 root: a fixed region after the FATs.
            for i in 0..self.layout.root_entries {
                self.read_volume(self.layout.root_offset + i * 32, &mut raw)?;
                match decoder.decode(&raw, fat_type) {
                    Record::End => break,
                    Record::Skip => {}
                    Record::Entry(e) => entries.push(e),
                }
            }
            return Ok(entries);
        }
        let per_cluster = self.layout.cluster_bytes / 32;
        let mut cluster = dir.first_cluster;
        if !self.layout.valid_cluster(cluster) {
            return Err(FatError::Corrupt("directory starts outside the volume"));
        }
        let mut detector = LoopDetector::new(cluster);
        loop {
            let base = self.layout.cluster_offset(cluster);
            for i in 0..per_cluster {
                self.read_volume(base + i * 32, &mut raw)?;
                match decoder.decode(&raw, fat_type) {
                    Record::End => return Ok(entries),
                    Record::Skip => {}
                    Record::Entry(e) => entries.push(e),
                }
            }
            match self.next_cluster(cluster)? {
                Some(next) => cluster = next,
                None => return Ok(entries),
            }
            if detector.step(cluster).is_some() {
                return Err(FatError::ChainLoops {
                    first_cluster: dir.first_cluster,
                });
            }
        }
    }

    /// The entry at `path` (`/`-separated, case-insensitive; empty or `/`
    /// is the root).
    pub fn lookup(&mut self, path: &str) -> Result<DirEntry, FatError> {
        let mut current = self.root();
        for component in path.split(['/', '\\']).filter(|c| !c.is_empty()) {
            if !current.is_dir {
                return Err(FatError::NotADirectory(current.name));
            }
            let entries = self.read_dir(&current)?;
            current = entries
                .into_iter()
                .find(|e| e.is_named(component))
                .ok_or_else(|| FatError::NotFound(String::from(component)))?;
            // `..` of a first-level directory points at cluster 0: the root.
            if current.is_dir && current.first_cluster == 0 {
                current = self.root();
            }
        }
        Ok(current)
    }

    /// Lists `path` and every directory under it and reads every file,
    /// `request_bytes` at a time, handing each to `visit(path, contents)`.
    pub fn walk(
        &mut self,
        path: &str,
        request_bytes: usize,
        mut visit: impl FnMut(&str, &[u8]),
    ) -> Result<WalkSummary, FatError> {
        let start = self.lookup(path)?;
        let mut summary = WalkSummary::default();
        // Each directory is listed once: one reached again (an ancestor, or
        // a cross-link) would make the walk loop or repeat whole subtrees.
        // The set grows with the tree, as `pending` does.
        let mut listed = BTreeSet::new();
        listed.insert(start.first_cluster);
        let mut pending = alloc::vec![(String::from(path.trim_end_matches('/')), start)];
        let mut contents = Vec::new();
        while let Some((dir_path, dir)) = pending.pop() {
            summary.directories += 1;
            let entries = self.read_dir(&dir)?;
            let mut subdirectories = Vec::new();
            for entry in &entries {
                if entry.is_dot() {
                    continue;
                }
                let mut child = dir_path.clone();
                child.push('/');
                child.push_str(&entry.name);
                if entry.is_dir {
                    if !listed.insert(entry.first_cluster) {
                        return Err(FatError::DirectoryRevisited(child));
                    }
                    subdirectories.push((child, entry.clone()));
                } else {
                    self.read_entry(entry, request_bytes, &mut contents)?;
                    summary.files += 1;
                    summary.bytes += contents.len() as u64;
                    visit(&child, &contents);
                }
            }
            // Depth first, in on-disk order.
            pending.extend(subdirectories.into_iter().rev());
        }
        Ok(summary)
    }
}

#[cfg(test)]
mod tests {
    use alloc::string::ToString;

    use super::*;

    #[test]
    fn error_messages_name_the_cause() {
        let error: &dyn core::error::Error = &FatError::Device(IoError::ReadOnly);
        assert_eq!(error.to_string(), "device error: the device is read-only");
        assert_eq!(
            FatError::ChainLoops { first_cluster: 7 }.to_string(),
            "corrupted volume: the cluster chain from cluster 7 loops"
        );
        assert_eq!(
            FatError::NotFound("KERNEL".into()).to_string(),
            "KERNEL: no such file or directory"
        );
    }
}
