//! Cluster chains patched into cross-links, early ends and looping
//! directories: the reader must answer with the specific error, never with
//! wrong bytes. (Loops in files: `fat_loops.rs`.)

mod common;

use common::fat::{build, entry, find_short_entry, with_volume, CLUSTER, TYPES};
use common::pattern;
use hotkern_bcache::FatError;

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
