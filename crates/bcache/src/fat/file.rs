//! Reading whole files: a file's cluster chain followed from its first
//! cluster, `request_bytes` at a time as FreeBSD's loader reads, with a
//! loop check over the whole chain; and how fragmented a file is.

use alloc::vec::Vec;

use super::chain::LoopDetector;
use super::{DirEntry, FatError, FatVolume};
use crate::cache::BlockCache;

impl<C: BlockCache + ?Sized> FatVolume<'_, C> {
    /// Reads the file at `path`, `request_bytes` at a time.
    ///
    /// ```
    /// # #[cfg(feature = "std")] {
    /// use hotkern_bcache::{image::ImageBuilder, FatVolume, HotkernCache, MemoryDevice};
    /// let mut image = ImageBuilder::new(8 << 20, None).unwrap();
    /// image.add_file("boot/kernel", &[42u8; 10_000]).unwrap();
    /// let disk = MemoryDevice::new(image.finish(), 512).unwrap();
    /// let mut cache = HotkernCache::new(disk, 1 << 20);
    /// let mut volume = FatVolume::mount(&mut cache).unwrap();
    /// assert_eq!(volume.read_file("/BOOT/KERNEL", 512).unwrap(), vec![42u8; 10_000]);
    /// # }
    /// ```
    pub fn read_file(&mut self, path: &str, request_bytes: usize) -> Result<Vec<u8>, FatError> {
        let entry = self.lookup(path)?;
        let mut data = Vec::new();
        self.read_entry(&entry, request_bytes, &mut data)?;
        Ok(data)
    }

    /// Reads the file `entry` into `out` (replacing its contents),
    /// `request_bytes` at a time, one FAT lookup per cluster.
    ///
    /// The file is the first `size / cluster size` (rounded up) clusters of
    /// its chain: a chain that ends sooner is [`FatError::ChainTooShort`],
    /// one that repeats a cluster among them is [`FatError::ChainLoops`];
    /// links past the size are not followed, as FAT drivers do (beyond the
    /// few needed to rule out a loop). On error `out` is left empty.
    pub fn read_entry(
        &mut self,
        entry: &DirEntry,
        request_bytes: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), FatError> {
        let result = self.read_entry_into(entry, request_bytes, out);
        if result.is_err() {
            out.clear();
        }
        result
    }

    /// The first cluster of a file that spans `needed` clusters, checked
    /// against the volume before any of its chain is read; `None` for an
    /// empty file (which has none).
    pub(super) fn chain_start(
        &self,
        entry: &DirEntry,
        needed: u64,
    ) -> Result<Option<u32>, FatError> {
        if needed > u64::from(self.layout.clusters) {
            return Err(FatError::Corrupt("file larger than the volume"));
        }
        if needed == 0 {
            return Ok(None);
        }
        let first_cluster = entry.first_cluster;
        if first_cluster == 0 {
            return Err(FatError::ChainTooShort {
                first_cluster,
                clusters: 0,
                needed,
            });
        }
        if !self.layout.valid_cluster(first_cluster) {
            return Err(FatError::Corrupt("file cluster outside the volume"));
        }
        Ok(Some(first_cluster))
    }

    /// The cluster after `cluster`, the chain's `index`th from
    /// `first_cluster`, of a file that needs `needed`: a chain that ends
    /// there is [`FatError::ChainTooShort`], one that comes back to a
    /// cluster `detector` has seen is [`FatError::ChainLoops`].
    pub(super) fn chain_link(
        &mut self,
        cluster: u32,
        index: u64,
        first_cluster: u32,
        needed: u64,
        detector: &mut LoopDetector,
    ) -> Result<u32, FatError> {
        let next = self.next_cluster(cluster)?.ok_or(FatError::ChainTooShort {
            first_cluster,
            clusters: index + 1,
            needed,
        })?;
        if detector.step(next).is_some() {
            return Err(FatError::ChainLoops { first_cluster });
        }
        Ok(next)
    }

    fn read_entry_into(
        &mut self,
        entry: &DirEntry,
        request_bytes: usize,
        out: &mut Vec<u8>,
    ) -> Result<(), FatError> {
        if entry.is_dir {
            return Err(FatError::NotAFile(entry.name.clone()));
        }
        if request_bytes == 0 {
            return Err(FatError::ZeroRequest);
        }
        let size = u64::from(entry.size);
        let cluster_bytes = self.layout.cluster_bytes;
        let needed = size.div_ceil(cluster_bytes);
        let first_cluster = self.chain_start(entry, needed)?;
        out.clear();
        let Some(first_cluster) = first_cluster else {
            return Ok(());
        };
        out.resize(size as usize, 0);
        let mut detector = LoopDetector::new(first_cluster);
        let mut cluster = first_cluster;
        // Chain index of `cluster`.
        let mut index = 0u64;
        let mut position = 0u64;
        while position < size {
            let in_cluster = position % cluster_bytes;
            if position > 0 && in_cluster == 0 {
                cluster = self.chain_link(cluster, index, first_cluster, needed, &mut detector)?;
                index += 1;
            }
            let n = (request_bytes as u64)
                .min(cluster_bytes - in_cluster)
                .min(size - position);
            let at = self.layout.cluster_offset(cluster) + in_cluster;
            self.read_volume(at, &mut out[position as usize..(position + n) as usize])?;
            position += n;
        }
        self.check_no_repeat(first_cluster, cluster, needed, detector)
    }

    /// Whether the first `needed` clusters of the chain from
    /// `first_cluster` are distinct, given that they were walked up to
    /// `last` (index `needed - 1`) without `detector` seeing a loop — which
    /// Brent's method does not promise by that index.
    fn check_no_repeat(
        &mut self,
        first_cluster: u32,
        last: u32,
        needed: u64,
        mut detector: LoopDetector,
    ) -> Result<(), FatError> {
        // A chain that loops never reaches an end: a valid file's chain,
        // which ends right after its last cluster, costs one lookup here.
        // So does any link that stops the chain, broken or not.
        let mut cluster = last;
        let mut index = needed - 1;
        let length = loop {
            // A repeat below index `needed` shows by index 3 × needed.
            if index + 1 >= 3 * needed {
                return Ok(());
            }
            cluster = match self.next_cluster(cluster) {
                Ok(Some(next)) => next,
                Ok(None) | Err(FatError::Corrupt(_)) => return Ok(()),
                Err(e) => return Err(e),
            };
            index += 1;
            if let Some(length) = detector.step(cluster) {
                break length;
            }
        };
        // The cycle has `length` clusters; it starts at the first index i
        // where cluster i equals cluster i + length, and the file repeats a
        // cluster only if that repeat, i + length, is below `needed`.
        if length >= needed {
            return Ok(());
        }
        let mut behind = first_cluster;
        let mut ahead = first_cluster;
        for _ in 0..length {
            ahead = self.chain_step(ahead)?;
        }
        for _ in length..needed {
            if behind == ahead {
                return Err(FatError::ChainLoops { first_cluster });
            }
            behind = self.chain_step(behind)?;
            ahead = self.chain_step(ahead)?;
        }
        Ok(())
    }

    /// The next cluster of a chain already walked past this point.
    fn chain_step(&mut self, cluster: u32) -> Result<u32, FatError> {
        self.next_cluster(cluster)?
            .ok_or(FatError::Corrupt("cluster chain changed while read"))
    }

    /// How many runs of contiguous clusters the file `entry` occupies
    /// (1 for a file laid out in one piece, 0 for an empty one), following
    /// its whole chain.
    pub fn fragments(&mut self, entry: &DirEntry) -> Result<u64, FatError> {
        let first_cluster = entry.first_cluster;
        if first_cluster == 0 {
            return Ok(0);
        }
        let mut detector = LoopDetector::new(first_cluster);
        let mut cluster = first_cluster;
        let mut runs = 1;
        while let Some(next) = self.next_cluster(cluster)? {
            if detector.step(next).is_some() {
                return Err(FatError::ChainLoops { first_cluster });
            }
            if next != cluster + 1 {
                runs += 1;
            }
            cluster = next;
        }
        Ok(runs)
    }
}
