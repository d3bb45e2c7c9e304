//! FAT images with 512-byte clusters and their first FAT, read and
//! patched by hand, for the tests that corrupt cluster chains.

use hotkern_bcache::image::ImageBuilder;
use hotkern_bcache::{BlockCache, CacheKind, DirEntry, FatType, FatVolume, MemoryDevice};

pub const CLUSTER: usize = 512;

/// The first FAT of an image, read and patched independently of the
/// reader under test.
pub struct Fat {
    fat_type: FatType,
    offset: usize,
}

impl Fat {
    pub fn of(image: &[u8], fat_type: FatType) -> Fat {
        let sector = usize::from(u16::from_le_bytes([image[11], image[12]]));
        let reserved = usize::from(u16::from_le_bytes([image[14], image[15]]));
        Fat {
            fat_type,
            offset: reserved * sector,
        }
    }

    pub fn end_of_chain(&self) -> u32 {
        match self.fat_type {
            FatType::Fat12 => 0xFFF,
            FatType::Fat16 => 0xFFFF,
            FatType::Fat32 => 0x0FFF_FFFF,
        }
    }

    pub fn get(&self, image: &[u8], cluster: u32) -> u32 {
        let c = cluster as usize;
        match self.fat_type {
            FatType::Fat12 => {
                let at = self.offset + c + c / 2;
                let pair = u32::from(u16::from_le_bytes([image[at], image[at + 1]]));
                if c % 2 == 1 {
                    pair >> 4
                } else {
                    pair & 0xFFF
                }
            }
            FatType::Fat16 => {
                let at = self.offset + c * 2;
                u32::from(u16::from_le_bytes([image[at], image[at + 1]]))
            }
            FatType::Fat32 => {
                let at = self.offset + c * 4;
                u32::from_le_bytes(image[at..at + 4].try_into().unwrap()) & 0x0FFF_FFFF
            }
        }
    }

    pub fn set(&self, image: &mut [u8], cluster: u32, value: u32) {
        let c = cluster as usize;
        match self.fat_type {
            FatType::Fat12 => {
                let at = self.offset + c + c / 2;
                let pair = u16::from_le_bytes([image[at], image[at + 1]]);
                let pair = if c % 2 == 1 {
                    (pair & 0x000F) | ((value as u16) << 4)
                } else {
                    (pair & 0xF000) | (value as u16 & 0xFFF)
                };
                image[at..at + 2].copy_from_slice(&pair.to_le_bytes());
            }
            FatType::Fat16 => {
                let at = self.offset + c * 2;
                image[at..at + 2].copy_from_slice(&(value as u16).to_le_bytes());
            }
            FatType::Fat32 => {
                let at = self.offset + c * 4;
                image[at..at + 4].copy_from_slice(&value.to_le_bytes());
            }
        }
    }

    /// The chain from `first` to its end-of-chain mark.
    pub fn chain(&self, image: &[u8], first: u32) -> Vec<u32> {
        let mut chain = vec![first];
        loop {
            let next = self.get(image, *chain.last().unwrap());
            if next >= self.end_of_chain() - 7 {
                return chain;
            }
            assert!(chain.len() < 100_000, "the unpatched image has a loop");
            chain.push(next);
        }
    }
}

pub fn with_volume<T>(
    image: &[u8],
    f: impl FnOnce(&mut FatVolume<'_, dyn BlockCache + '_>) -> T,
) -> T {
    let disk = MemoryDevice::new(image.to_vec(), 512).unwrap();
    let mut cache = CacheKind::Hotkern.build(disk, 64 << 10);
    let mut volume = FatVolume::mount(&mut *cache).expect("mount");
    f(&mut volume)
}

pub fn entry(image: &[u8], path: &str) -> DirEntry {
    with_volume(image, |volume| volume.lookup(path).unwrap())
}

/// An image with 512-byte clusters holding `files`, and its FAT.
pub fn build(fat_type: FatType, files: &[(&str, &[u8])]) -> (Vec<u8>, Fat) {
    let volume_bytes = match fat_type {
        FatType::Fat12 => 1 << 20,
        FatType::Fat16 => 8 << 20,
        FatType::Fat32 => 40 << 20,
    };
    let mut builder =
        ImageBuilder::with_cluster(volume_bytes, Some(fat_type), Some(CLUSTER as u32)).unwrap();
    for (path, data) in files {
        builder.add_file(path, data).unwrap();
    }
    let image = builder.finish();
    let fat = Fat::of(&image, fat_type);
    (image, fat)
}

pub const TYPES: [FatType; 3] = [FatType::Fat12, FatType::Fat16, FatType::Fat32];

/// Where the 8.3 name `name` (11 bytes, space-padded) is in the image.
pub fn find_short_entry(image: &[u8], name: &[u8; 11]) -> usize {
    let found: Vec<usize> = (0..image.len() - 32)
        .step_by(32)
        .filter(|&at| &image[at..at + 11] == name)
        .collect();
    assert_eq!(found.len(), 1, "{}", String::from_utf8_lossy(name));
    found[0]
}
