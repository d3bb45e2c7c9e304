//! Making FAT images in memory, for tests and benchmarks (`std` only).
//!
//! Uses the `fatfs` crate to format and write, so images come from an
//! implementation independent of this crate's reader.

use std::io::{self, Cursor, Write};
use std::vec;
use std::vec::Vec;

use crate::fat::FatType;

/// A FAT volume being filled in memory.
///
/// ```
/// use hotkern_bcache::image::ImageBuilder;
/// let mut image = ImageBuilder::new(4 << 20, None).unwrap();
/// image.add_file("a/b/c.txt", b"hello").unwrap();
/// assert_eq!(image.finish().len(), 4 << 20);
/// ```
#[derive(Debug)]
pub struct ImageBuilder {
    bytes: Vec<u8>,
}

fn fatfs_type(fat_type: FatType) -> fatfs::FatType {
    match fat_type {
        FatType::Fat12 => fatfs::FatType::Fat12,
        FatType::Fat16 => fatfs::FatType::Fat16,
        FatType::Fat32 => fatfs::FatType::Fat32,
    }
}

impl ImageBuilder {
    /// A freshly formatted volume of `volume_bytes` (a multiple of 512),
    /// of the given FAT type (or the one `fatfs` picks for the size).
    pub fn new(volume_bytes: usize, fat_type: Option<FatType>) -> io::Result<Self> {
        Self::with_cluster(volume_bytes, fat_type, None)
    }

    /// Same, with a chosen cluster size in bytes.
    pub fn with_cluster(
        volume_bytes: usize,
        fat_type: Option<FatType>,
        cluster_bytes: Option<u32>,
    ) -> io::Result<Self> {
        if volume_bytes % 512 != 0 || volume_bytes == 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "volume size must be a non-zero multiple of 512",
            ));
        }
        let mut bytes = vec![0u8; volume_bytes];
        let mut options = fatfs::FormatVolumeOptions::new();
        if let Some(fat_type) = fat_type {
            options = options.fat_type(fatfs_type(fat_type));
        }
        if let Some(cluster) = cluster_bytes {
            options = options.bytes_per_cluster(cluster);
        }
        fatfs::format_volume(Cursor::new(&mut bytes[..]), options)?;
        Ok(ImageBuilder { bytes })
    }

    fn mount(&mut self) -> io::Result<fatfs::FileSystem<Cursor<&mut [u8]>>> {
        fatfs::FileSystem::new(Cursor::new(&mut self.bytes[..]), fatfs::FsOptions::new())
    }

    /// Writes a file, creating the directories on its path.
    pub fn add_file(&mut self, path: &str, data: &[u8]) -> io::Result<()> {
        self.add_interleaved(&[(path, data)], data.len().max(1))
    }

    /// Writes several files a chunk at a time in turn, so that their
    /// clusters interleave on disk (fragmented files).
    pub fn add_interleaved(&mut self, files: &[(&str, &[u8])], chunk: usize) -> io::Result<()> {
        let chunk = chunk.max(1);
        let fs = self.mount()?;
        let root = fs.root_dir();
        let mut open = Vec::new();
        for (path, data) in files {
            let mut dir = root.clone();
            let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
            let Some((name, parents)) = parts.split_last() else {
                return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty path"));
            };
            for parent in parents {
                dir = dir.create_dir(parent)?;
            }
            let mut file = dir.create_file(name)?;
            file.truncate()?;
            open.push((file, *data));
        }
        let rounds = files
            .iter()
            .map(|(_, d)| d.len().div_ceil(chunk))
            .max()
            .unwrap_or(0);
        for round in 0..rounds {
            for (file, data) in &mut open {
                let start = (round * chunk).min(data.len());
                let end = (start + chunk).min(data.len());
                file.write_all(&data[start..end])?;
            }
        }
        for (mut file, _) in open {
            file.flush()?;
        }
        drop(root);
        fs.unmount()
    }

    /// The image's bytes so far.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The finished image.
    pub fn finish(self) -> Vec<u8> {
        self.bytes
    }
}
