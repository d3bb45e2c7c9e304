//! Cluster chains patched into loops, cross-links and early ends: the
//! reader must answer with the specific error, never with wrong bytes.

mod common;

use common::pattern;
use hotkern_bcache::image::ImageBuilder;
use hotkern_bcache::{CacheKind, DirEntry, FatError, FatType, FatVolume, MemoryDevice};

const CLUSTER: usize = 512;

/// The first FAT of an image, read and patched independently of the
/// reader under test.
struct Fat {
    fat_type: FatType,
    offset: usize,
}

impl Fat {
    fn of(image: &[u8], fat_type: FatType) -> Fat {
        let sector = usize::from(u16::from_le_bytes([image[11], image[12]]));
        let reserved = usize::from(u16::from_le_bytes([image[14], image[15]]));
        Fat {
            fat_type,
            offset: reserved * sector,
        }
    }

    fn end_of_chain(&self) -> u32 {
        match self.fat_type {
            FatType::Fat12 => 0xFFF,
            FatType::Fat16 => 0xFFFF,
            FatType::Fat32 => 0x0FFF_FFFF,
        }
    }

    fn get(&self, image: &[u8], cluster: u32) -> u32 {
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

    fn set(&self, image: &mut [u8], cluster: u32, value: u32) {
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
    fn chain(&self, image: &[u8], first: u32) -> Vec<u32> {
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

fn with_volume<T>(
    image: &[u8],
    f: impl FnOnce(&mut FatVolume<'_, dyn hotkern_bcache::BlockCache + '_>) -> T,
) -> T {
    let disk = MemoryDevice::new(image.to_vec(), 512).unwrap();
    let mut cache = CacheKind::Hotkern.build(disk, 64 << 10);
    let mut volume = FatVolume::mount(&mut *cache).expect("mount");
    f(&mut volume)
}

fn entry(image: &[u8], path: &str) -> DirEntry {
    with_volume(image, |volume| volume.lookup(path).unwrap())
}

/// An image with 512-byte clusters holding `files`, and its FAT.
fn build(fat_type: FatType, files: &[(&str, &[u8])]) -> (Vec<u8>, Fat) {
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

const TYPES: [FatType; 3] = [FatType::Fat12, FatType::Fat16, FatType::Fat32];

/// Links chain index `from` back to chain index `to` (`to <= from`), for
/// every pair in a 16-cluster file: the file repeats a cluster unless the
/// link is its last cluster's, and only then may the read succeed.
#[test]
fn every_backward_link_in_a_file_is_a_loop_unless_past_its_size() {
    let data = pattern(16 * CLUSTER - 100, 1);
    for fat_type in TYPES {
        let (mut image, fat) = build(fat_type, &[("f.bin", &data)]);
        let first = entry(&image, "f.bin").first_cluster;
        let chain = fat.chain(&image, first);
        assert_eq!(chain.len(), 16);
        for from in 0..chain.len() {
            let link = fat.get(&image, chain[from]);
            for to in 0..=from {
                fat.set(&mut image, chain[from], chain[to]);
                with_volume(&image, |volume| {
                    let file = volume.lookup("f.bin").unwrap();
                    let mut out = vec![7u8; 3];
                    let read = volume.read_entry(&file, CLUSTER, &mut out);
                    let expected = if from + 1 < chain.len() {
                        Err(FatError::ChainLoops {
                            first_cluster: first,
                        })
                    } else {
                        // The loop starts after the file's last cluster.
                        Ok(())
                    };
                    assert_eq!(read, expected, "{fat_type:?}: {from} -> {to}");
                    if read.is_ok() {
                        assert!(out == data, "{fat_type:?}: {from} -> {to}");
                    } else {
                        assert!(out.is_empty(), "no partial file is left behind");
                    }
                    // Following the whole chain always meets the loop.
                    assert_eq!(
                        volume.fragments(&file),
                        Err(FatError::ChainLoops {
                            first_cluster: first
                        })
                    );
                    assert_eq!(volume.walk("/", 100, |_, _| {}).map(|_| ()), expected);
                });
            }
            fat.set(&mut image, chain[from], link);
        }
    }
}

#[test]
fn a_three_cluster_loop_inside_a_long_file_is_an_error_on_every_path() {
    for fat_type in TYPES {
        let data = pattern(100 * CLUSTER, 2);
        let (mut image, fat) = build(fat_type, &[("dir/f.bin", &data)]);
        let first = entry(&image, "dir/f.bin").first_cluster;
        let chain = fat.chain(&image, first);
        // 5 → 6 → 7 → 5, as chain indices.
        fat.set(&mut image, chain[7], chain[5]);
        let loops = Err(FatError::ChainLoops {
            first_cluster: first,
        });
        with_volume(&image, |volume| {
            assert_eq!(volume.read_file("dir/f.bin", 4096).map(|_| ()), loops);
            let file = volume.lookup("dir/f.bin").unwrap();
            assert_eq!(volume.fragments(&file).map(|_| ()), loops);
            assert_eq!(volume.walk("/", 512, |_, _| {}).map(|_| ()), loops);
            let error = volume.read_file("dir/f.bin", 512).unwrap_err();
            assert!(error
                .to_string()
                .contains(&format!("cluster {first} loops")));
        });
    }
}

/// A loop closing just before the file's end: Brent's method has not met
/// it by the last cluster, the check after the read must.
#[test]
fn a_long_loop_closing_near_the_end_of_the_file_is_found() {
    let data = pattern(100 * CLUSTER, 3);
    let (mut image, fat) = build(FatType::Fat16, &[("f.bin", &data)]);
    let first = entry(&image, "f.bin").first_cluster;
    let chain = fat.chain(&image, first);
    // Cluster index 99 would be index 50 again: the last 49 clusters of
    // the read would repeat earlier ones.
    fat.set(&mut image, chain[98], chain[50]);
    with_volume(&image, |volume| {
        assert_eq!(
            volume.read_file("f.bin", 512),
            Err(FatError::ChainLoops {
                first_cluster: first
            })
        );
    });
}

#[test]
fn cross_links_between_two_files() {
    for fat_type in TYPES {
        let (a, b) = (pattern(20 * CLUSTER, 4), pattern(20 * CLUSTER, 5));
        let (image, fat) = build(fat_type, &[("a.bin", &a), ("b.bin", &b)]);
        let first_a = entry(&image, "a.bin").first_cluster;
        let first_b = entry(&image, "b.bin").first_cluster;
        let (chain_a, chain_b) = (fat.chain(&image, first_a), fat.chain(&image, first_b));
        // a0..a4 → b2..b7 → a1: each file's chain runs into the other's
        // and back into itself within its 20 clusters.
        let mut looped = image.clone();
        fat.set(&mut looped, chain_a[4], chain_b[2]);
        fat.set(&mut looped, chain_b[7], chain_a[1]);
        with_volume(&looped, |volume| {
            assert_eq!(
                volume.read_file("a.bin", 512),
                Err(FatError::ChainLoops {
                    first_cluster: first_a
                })
            );
            assert_eq!(
                volume.read_file("b.bin", 512),
                Err(FatError::ChainLoops {
                    first_cluster: first_b
                })
            );
        });
        // Only the first link: a's chain ends with b's, 5 + 18 clusters
        // long, which is more than a needs; b is untouched.
        let mut crossed = image.clone();
        fat.set(&mut crossed, chain_a[4], chain_b[2]);
        with_volume(&crossed, |volume| {
            let read = volume.read_file("a.bin", 512).unwrap();
            assert!(read[..5 * CLUSTER] == a[..5 * CLUSTER]);
            assert!(read[5 * CLUSTER..] == b[2 * CLUSTER..17 * CLUSTER]);
            assert!(volume.read_file("b.bin", 512).unwrap() == b);
        });
        // Into b's tail instead: too few clusters for a.
        let mut short = image.clone();
        fat.set(&mut short, chain_a[4], chain_b[15]);
        with_volume(&short, |volume| {
            assert_eq!(
                volume.read_file("a.bin", 512),
                Err(FatError::ChainTooShort {
                    first_cluster: first_a,
                    clusters: 10,
                    needed: 20
                })
            );
        });
    }
}

#[test]
fn a_chain_ending_before_the_size_is_an_error_and_one_ending_after_is_read_to_the_size() {
    for fat_type in TYPES {
        let data = pattern(10 * CLUSTER + 1, 6);
        let (image, fat) = build(fat_type, &[("f.bin", &data), ("spare", b"s")]);
        let first = entry(&image, "f.bin").first_cluster;
        let chain = fat.chain(&image, first);
        assert_eq!(chain.len(), 11);
        for (end_after, &cluster) in chain[..chain.len() - 1].iter().enumerate() {
            let mut bad = image.clone();
            fat.set(&mut bad, cluster, fat.end_of_chain());
            with_volume(&bad, |volume| {
                let file = volume.lookup("f.bin").unwrap();
                let mut out = Vec::new();
                assert_eq!(
                    volume.read_entry(&file, 700, &mut out),
                    Err(FatError::ChainTooShort {
                        first_cluster: first,
                        clusters: end_after as u64 + 1,
                        needed: 11
                    })
                );
                assert!(out.is_empty());
            });
        }
        // A file whose size needs clusters but which has none.
        let mut none = image.clone();
        let at = find_short_entry(&none, b"F       BIN");
        none[at + 26..at + 28].fill(0);
        none[at + 20..at + 22].fill(0);
        with_volume(&none, |volume| {
            assert_eq!(
                volume.read_file("f.bin", 512),
                Err(FatError::ChainTooShort {
                    first_cluster: 0,
                    clusters: 0,
                    needed: 11
                })
            );
        });
        // Longer than the size: one more cluster (the spare file's, ending
        // its chain), or a tail that loops on itself, or one that runs
        // into a free cluster — the file is still its first 11 clusters.
        let spare = entry(&image, "spare").first_cluster;
        for (tail, last_link) in [
            (spare, fat.end_of_chain()),
            (spare, spare),
            (spare, chain[10]),
            (spare, 0),
        ] {
            let mut long = image.clone();
            fat.set(&mut long, chain[10], tail);
            fat.set(&mut long, tail, last_link);
            with_volume(&long, |volume| {
                assert!(volume.read_file("f.bin", 512).unwrap() == data);
            });
        }
    }
}

/// Where the 8.3 name `name` (11 bytes, space-padded) is in the image.
fn find_short_entry(image: &[u8], name: &[u8; 11]) -> usize {
    let found: Vec<usize> = (0..image.len() - 32)
        .step_by(32)
        .filter(|&at| &image[at..at + 11] == name)
        .collect();
    assert_eq!(found.len(), 1, "{}", String::from_utf8_lossy(name));
    found[0]
}

#[test]
fn a_looping_directory_chain_is_an_error() {
    for fat_type in TYPES {
        let files: Vec<(String, Vec<u8>)> = (0..60)
            .map(|i| (format!("big/file-number-{i}.txt"), pattern(10, i)))
            .collect();
        let borrowed: Vec<(&str, &[u8])> = files
            .iter()
            .map(|(p, d)| (p.as_str(), d.as_slice()))
            .collect();
        let (mut image, fat) = build(fat_type, &borrowed);
        let dir = entry(&image, "big");
        let chain = fat.chain(&image, dir.first_cluster);
        assert!(
            chain.len() >= 4,
            "the directory spans {} clusters",
            chain.len()
        );
        // The last cluster ends the listing with an unused entry before
        // its link is read: the loop closes one cluster earlier.
        let full = chain.len() - 2;
        fat.set(&mut image, chain[full], chain[1]);
        with_volume(&image, |volume| {
            let loops = Err(FatError::ChainLoops {
                first_cluster: dir.first_cluster,
            });
            assert_eq!(volume.read_dir(&dir).map(|_| ()), loops);
            assert_eq!(volume.lookup("big/nothing").map(|_| ()), loops);
            assert_eq!(volume.walk("/", 512, |_, _| {}).map(|_| ()), loops);
        });
    }
}

#[test]
fn a_directory_containing_its_ancestor_is_an_error() {
    for fat_type in TYPES {
        let (mut image, _) = build(fat_type, &[("a/b/c/file", b"data")]);
        let ancestor = entry(&image, "a").first_cluster;
        let at = find_short_entry(&image, b"C          ");
        image[at + 26..at + 28].copy_from_slice(&(ancestor as u16).to_le_bytes());
        image[at + 20..at + 22].copy_from_slice(&((ancestor >> 16) as u16).to_le_bytes());
        with_volume(&image, |volume| {
            assert_eq!(
                volume.walk("/", 512, |_, _| {}),
                Err(FatError::DirectoryRevisited(String::from("/a/b/c")))
            );
            // The path still resolves, one level at a time.
            assert!(volume.lookup("a/b/c/b/c/b").unwrap().is_dir);
        });
    }
}
