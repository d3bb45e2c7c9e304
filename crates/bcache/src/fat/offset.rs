//! Reading part of a file at a byte offset into the caller's buffer: what a
//! loader placing ELF segments does (FreeBSD's loader reads each segment
//! with `lseek` + `read` into the memory the segment will run from).

use super::chain::LoopDetector;
use super::{DirEntry, FatError, FatVolume};
use crate::cache::BlockCache;

impl<C: BlockCache + ?Sized> FatVolume<'_, C> {
    /// Reads the bytes of file `entry` from byte `offset` on into `buf`,
    /// and returns how many it read: `buf.len()`, or fewer when the file
    /// ends first; 0 at or past the end of the file, or for an empty
    /// `buf` (which costs no disk access). Every access goes through the
    /// cache.
    ///
    /// The cluster chain is followed from the file's first cluster to the
    /// one holding `offset` (a lookup per cluster, as in FreeBSD's dosfs),
    /// then through the clusters `buf` covers. A chain that ends early is
    /// [`FatError::ChainTooShort`]; a chain seen to loop on the way is
    /// [`FatError::ChainLoops`]. On error `buf` holds unspecified bytes.
    ///
    /// ```
    /// # #[cfg(feature = "std")] {
    /// use hotkern_bcache::{image::ImageBuilder, FatVolume, HotkernCache, MemoryDevice};
    /// let contents: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
    /// let mut image = ImageBuilder::new(8 << 20, None).unwrap();
    /// image.add_file("boot/kernel", &contents).unwrap();
    /// let disk = MemoryDevice::new(image.finish(), 512).unwrap();
    /// let mut cache = HotkernCache::new(disk, 1 << 20);
    /// let mut volume = FatVolume::mount(&mut cache).unwrap();
    /// let kernel = volume.lookup("/boot/kernel").unwrap();
    /// let mut segment = [0u8; 100];
    /// assert_eq!(volume.read_at(&kernel, 4_000, &mut segment).unwrap(), 100);
    /// assert_eq!(segment[..], contents[4_000..4_100]);
    /// // Near the end, only what the file has.
    /// assert_eq!(volume.read_at(&kernel, 9_950, &mut segment).unwrap(), 50);
    /// assert_eq!(volume.read_at(&kernel, 20_000, &mut segment).unwrap(), 0);
    /// # }
    /// ```
    pub fn read_at(
        &mut self,
        entry: &DirEntry,
        offset: u64,
        buf: &mut [u8],
    ) -> Result<usize, FatError> {
        if entry.is_dir {
            return Err(FatError::NotAFile(entry.name.clone()));
        }
        let size = u64::from(entry.size);
        if offset >= size || buf.is_empty() {
            return Ok(0);
        }
        let cluster_bytes = self.layout.cluster_bytes;
        let needed = size.div_ceil(cluster_bytes);
        let Some(first_cluster) = self.chain_start(entry, needed)? else {
            return Ok(0); // not reached: `offset < size` makes `needed` at least 1
        };
        let len = (buf.len() as u64).min(size - offset);
        let mut detector = LoopDetector::new(first_cluster);
        let mut cluster = first_cluster;
        // Chain index of `cluster`.
        let mut index = 0u64;
        let mut position = offset;
        let end = offset + len;
        while position < end {
            let wanted = position / cluster_bytes;
            while index < wanted {
                cluster = self.chain_link(cluster, index, first_cluster, needed, &mut detector)?;
                index += 1;
            }
            let in_cluster = position % cluster_bytes;
            let n = (cluster_bytes - in_cluster).min(end - position);
            let at = self.layout.cluster_offset(cluster) + in_cluster;
            let from = (position - offset) as usize;
            self.read_volume(at, &mut buf[from..from + n as usize])?;
            position += n;
        }
        Ok(len as usize)
    }
}
