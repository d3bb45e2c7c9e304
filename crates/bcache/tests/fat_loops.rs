//! Cluster chains of files patched into loops: the reader must answer
//! `ChainLoops` exactly when the file's own clusters repeat, and read the
//! file's bytes otherwise.

mod common;

use std::collections::HashSet;

use common::fat::{build, entry, with_volume, Fat, CLUSTER, TYPES};
use common::{pattern, SharedDisk};
use hotkern_bcache::{BlockCache, CacheKind, DirEntry, FatError, FatType, FatVolume};

/// A volume holding `files` over a disk the test patches between reads:
/// no cache, so every read sees the patched FAT, and every read of the
/// reader is one request. Patching in place spares a copy of the image
/// (40 MiB for FAT32) per case.
fn patched_volume(
    fat_type: FatType,
    files: &[(&str, &[u8])],
    case: impl FnOnce(&mut FatVolume<'_, dyn BlockCache + '_>, &Patcher),
) {
    let (image, fat) = build(fat_type, files);
    let disk = SharedDisk::from_bytes(image, 512, 128);
    let mut cache = CacheKind::None.build(disk.clone(), 0);
    let mut volume = FatVolume::mount(&mut *cache).unwrap();
    case(&mut volume, &Patcher { fat, disk });
}

/// Reads and rewrites the FAT of a [`patched_volume`].
struct Patcher {
    fat: Fat,
    disk: SharedDisk,
}

impl Patcher {
    /// The chain of the file at `path`, found by hand.
    fn chain(&self, path: &str) -> Vec<u32> {
        let image = self.disk.bytes.borrow();
        self.fat.chain(&image, entry(&image, path).first_cluster)
    }

    fn get(&self, cluster: u32) -> u32 {
        self.fat.get(&self.disk.bytes.borrow(), cluster)
    }

    fn set(&self, cluster: u32, value: u32) {
        self.fat
            .set(&mut self.disk.bytes.borrow_mut(), cluster, value);
    }

    /// Runs `case` with `cluster` linked to `value`, then restores the link.
    fn with_link<T>(&self, cluster: u32, value: u32, case: impl FnOnce() -> T) -> T {
        let link = self.get(cluster);
        self.set(cluster, value);
        let result = case();
        self.set(cluster, link);
        result
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

/// A six-cluster file whose fifth cluster links back to its first: the
/// chain runs 0 1 2 3 4 0 1 2 …, so the file's sixth cluster would be its
/// first again. Brent's detector meets this cycle only at chain index 12
/// (its remembered cluster moves at indices 1, 3, 7, then matches 5 steps
/// after index 7), twice the file's clusters: a check that stopped at
/// `2 × needed` lookups would read the first cluster twice and call the
/// file valid. Links back from the fourth and fifth clusters to every
/// earlier one (or to themselves) loop the same way.
#[test]
fn a_six_cluster_file_whose_fifth_cluster_links_back_is_a_loop() {
    let data = pattern(6 * CLUSTER, 7);
    let files: [(&str, &[u8]); 2] = [("f.bin", &data), ("spare.bin", &[1; 2 * CLUSTER])];
    for fat_type in TYPES {
        patched_volume(fat_type, &files, |volume, fat| {
            let chain = fat.chain("f.bin");
            assert_eq!(chain.len(), 6);
            let file = volume.lookup("f.bin").unwrap();
            let loops = Err(FatError::ChainLoops {
                first_cluster: chain[0],
            });
            for (from, to) in [(4, 0), (4, 1), (4, 2), (4, 3), (4, 4), (3, 0), (3, 3)] {
                fat.with_link(chain[from], chain[to], || {
                    let at = format!("{fat_type:?}: {from} -> {to}");
                    assert_eq!(
                        volume.read_file("f.bin", CLUSTER).map(|_| ()),
                        loops,
                        "{at}"
                    );
                    assert_eq!(volume.read_file("f.bin", 100).map(|_| ()), loops, "{at}");
                    assert_eq!(volume.fragments(&file).map(|_| ()), loops, "{at}");
                    assert_eq!(volume.walk("/", 512, |_, _| {}).map(|_| ()), loops, "{at}");
                });
            }
            // A loop longer than the file: its last cluster runs on into the
            // spare file's two clusters and back to its first. The file's six
            // clusters are distinct, so it reads whole; only following the
            // whole chain meets the loop.
            let spare = fat.chain("spare.bin");
            fat.with_link(chain[5], spare[0], || {
                fat.with_link(spare[1], chain[0], || {
                    assert!(
                        volume.read_file("f.bin", CLUSTER).unwrap() == data,
                        "{fat_type:?}"
                    );
                    assert_eq!(volume.fragments(&file).map(|_| ()), loops, "{fat_type:?}");
                });
            });
            // Unpatched, the file reads whole and its chain ends.
            assert!(
                volume.read_file("f.bin", CLUSTER).unwrap() == data,
                "{fat_type:?}"
            );
            assert_eq!(volume.fragments(&file), Ok(1), "{fat_type:?}");
        });
    }
}

/// Clusters in the chain of the file the sweeps below patch.
const CHAIN: usize = 24;

/// Every link from chain index `from` back to index `to`, read as files of
/// every length from 1 to 24 clusters (the size given by the directory
/// entry handed to the reader): the reader must call it a loop exactly
/// when the file's clusters — the first `clusters` of the walk — repeat,
/// as a plain set of visited indices says, and must otherwise return the
/// file's bytes, leaving nothing behind on error. Loops that close before
/// the file's end, right at it, and long after it (a cycle longer than the
/// file, through clusters that are not the file's) are all covered.
/// Following the whole chain (`fragments`) always meets the loop, and a
/// walk of the volume fails exactly when the file at its own size does.
#[test]
fn every_link_back_is_a_loop_exactly_when_the_files_own_clusters_repeat() {
    let data = pattern(CHAIN * CLUSTER, 8);
    let (mut loops, mut whole, mut cycle_longer_than_file) = (0u32, 0u32, 0u32);
    for fat_type in TYPES {
        patched_volume(fat_type, &[("f.bin", &data)], |volume, fat| {
            let file = volume.lookup("f.bin").unwrap();
            let chain = fat.chain("f.bin");
            assert_eq!(chain.len(), CHAIN);
            let looped = Err(FatError::ChainLoops {
                first_cluster: file.first_cluster,
            });
            let mut out = vec![7u8; 3];
            for from in 0..CHAIN {
                for to in 0..=from {
                    fat.with_link(chain[from], chain[to], || {
                        let cycle = from + 1 - to;
                        for clusters in 1..=CHAIN {
                            // Mostly short of whole clusters: the last is partial.
                            let size = clusters * CLUSTER - clusters % 4 * 100;
                            let walk = (0..clusters).map(|i| {
                                if i <= from {
                                    i
                                } else {
                                    to + (i - to) % cycle
                                }
                            });
                            let repeats = walk.collect::<HashSet<_>>().len() < clusters;
                            let sized = DirEntry {
                                size: size as u32,
                                ..file.clone()
                            };
                            let read = volume.read_entry(&sized, CLUSTER, &mut out);
                            let at = format!("{fat_type:?}: {from} -> {to}, {clusters} clusters");
                            if repeats {
                                loops += 1;
                                assert_eq!(read, looped, "{at}");
                                assert!(out.is_empty(), "{at}: no partial file is left behind");
                            } else {
                                whole += 1;
                                cycle_longer_than_file += u32::from(cycle > clusters);
                                assert_eq!(read, Ok(()), "{at}");
                                // No repeat: the walk so far is indices 0, 1, 2, …
                                assert!(out == data[..size], "{at}");
                            }
                        }
                        let at = format!("{fat_type:?}: {from} -> {to}");
                        assert_eq!(volume.fragments(&file).map(|_| ()), looped, "{at}");
                        let walked = volume.walk("/", 100, |_, _| {}).map(|_| ());
                        let expected = if from + 1 < CHAIN {
                            looped.clone()
                        } else {
                            Ok(())
                        };
                        assert_eq!(walked, expected, "{at}");
                    });
                }
            }
        });
    }
    // Both answers must be well exercised (about 32 % loops, 68 % whole
    // reads, half of those through a cycle longer than the file).
    let cases = loops + whole;
    println!(
        "{cases} cases: {loops} loops, {whole} whole reads, \
         {cycle_longer_than_file} of them with a cycle longer than the file"
    );
    assert!(loops * 4 >= cases, "loops are {loops} of {cases} cases");
    assert!(
        whole * 3 >= cases,
        "whole reads are {whole} of {cases} cases"
    );
    assert!(
        cycle_longer_than_file * 4 >= whole,
        "{cycle_longer_than_file} of {whole} whole reads had a cycle longer than the file"
    );
}

/// Links past a file's size are followed only as far as ruling out a loop
/// among its clusters needs: for a file of `n` clusters, Brent's detector
/// has met any such loop by chain index 3n − 1, so the reader looks up no
/// cluster beyond that index (or the chain's end mark, if sooner). A chain
/// that ends right after the file costs one lookup past its last cluster.
#[test]
fn links_past_the_size_are_followed_no_further_than_ruling_out_a_loop_needs() {
    let data = pattern(CHAIN * CLUSTER, 9);
    patched_volume(FatType::Fat16, &[("f.bin", &data)], |volume, fat| {
        let file = volume.lookup("f.bin").unwrap();
        let chain = fat.chain("f.bin");
        let mut out = Vec::new();
        let mut lookups_for = |volume: &mut FatVolume<'_, dyn BlockCache + '_>, clusters: usize| {
            let sized = DirEntry {
                size: (clusters * CLUSTER) as u32,
                ..file.clone()
            };
            volume.cache().reset_stats();
            volume.read_entry(&sized, CLUSTER, &mut out).unwrap();
            assert!(out == data[..clusters * CLUSTER]);
            // One request per cluster of data, the rest are FAT lookups.
            volume.cache().stats().requests - clusters as u64
        };
        for clusters in 1..=CHAIN {
            // Lookups reach chain indices 1, 2, … up to 3n − 1, or up to
            // the last index and then the end mark stored there.
            let deepest = (3 * clusters - 1).min(CHAIN - 1);
            let end_mark = u64::from(3 * clusters - 1 > CHAIN - 1);
            let lookups = lookups_for(volume, clusters);
            assert_eq!(lookups, deepest as u64 + end_mark, "{clusters} clusters");
            let ended = fat.with_link(chain[clusters - 1], fat.fat.end_of_chain(), || {
                lookups_for(volume, clusters)
            });
            assert_eq!(ended, clusters as u64, "{clusters} clusters, ended");
        }
    });
}
