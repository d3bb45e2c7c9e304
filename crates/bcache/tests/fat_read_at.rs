//! `FatVolume::read_at`: part of a file at an offset, into the caller's
//! buffer, through the cache.

mod common;

use common::fat::{build, Fat, CLUSTER, TYPES};
use common::pattern;
use hotkern_bcache::image::ImageBuilder;
use hotkern_bcache::{BlockCache, FatError, FatType, FatVolume, HotkernCache, MemoryDevice};
use proptest::prelude::*;

/// A fragmented FAT16 image with 2 KiB clusters: `a.bin` and `b.bin`
/// interleaved cluster by cluster, plus an empty file.
fn image() -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let a = pattern(300_000, 11);
    let b = pattern(70_001, 12);
    let mut builder =
        ImageBuilder::with_cluster(16 << 20, Some(FatType::Fat16), Some(2048)).unwrap();
    builder
        .add_interleaved(&[("a.bin", &a), ("dir/b.bin", &b)], 2048)
        .unwrap();
    builder.add_file("empty", &[]).unwrap();
    (builder.finish(), a, b)
}

fn with_cache<T>(image: &[u8], f: impl FnOnce(&mut HotkernCache<MemoryDevice>) -> T) -> T {
    let disk = MemoryDevice::new(image.to_vec(), 512).unwrap();
    let mut cache = HotkernCache::new(disk, 128 << 10);
    f(&mut cache)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    #[test]
    fn random_pieces_match_the_whole_file(
        reads in proptest::collection::vec((0u64..320_000, 0usize..20_000, any::<bool>()), 1..24)
    ) {
        let (image, a, b) = image();
        with_cache(&image, |cache| {
            let mut volume = FatVolume::mount(cache).unwrap();
            let entry_a = volume.lookup("a.bin").unwrap();
            let entry_b = volume.lookup("dir/b.bin").unwrap();
            for (offset, len, pick_a) in reads {
                let (entry, whole) = if pick_a { (&entry_a, &a) } else { (&entry_b, &b) };
                // A marker past what may be written shows no overrun.
                let mut buf = vec![0xA5u8; len + 8];
                let n = volume.read_at(entry, offset, &mut buf[..len]).unwrap();
                let start = (offset as usize).min(whole.len());
                let expected = &whole[start..(start + len).min(whole.len())];
                prop_assert_eq!(n, expected.len());
                prop_assert_eq!(&buf[..n], expected);
                prop_assert!(buf[len..].iter().all(|&x| x == 0xA5));
            }
            Ok(())
        })?;
    }
}

#[test]
fn reads_at_and_past_the_end_and_zero_length() {
    let (image, a, _) = image();
    with_cache(&image, |cache| {
        let mut volume = FatVolume::mount(cache).unwrap();
        let entry = volume.lookup("a.bin").unwrap();
        let mut buf = [7u8; 64];
        let size = a.len() as u64;
        assert_eq!(volume.read_at(&entry, size - 10, &mut buf).unwrap(), 10);
        assert_eq!(buf[..10], a[a.len() - 10..]);
        assert_eq!(buf[10..], [7u8; 54], "bytes past the end are left alone");
        assert_eq!(volume.read_at(&entry, size, &mut buf).unwrap(), 0);
        assert_eq!(volume.read_at(&entry, u64::MAX, &mut buf).unwrap(), 0);
        let empty = volume.lookup("empty").unwrap();
        assert_eq!(volume.read_at(&empty, 0, &mut buf).unwrap(), 0);
        let dir = volume.lookup("dir").unwrap();
        assert!(matches!(
            volume.read_at(&dir, 0, &mut buf),
            Err(FatError::NotAFile(_))
        ));
    });
}

#[test]
fn reads_go_through_the_cache_and_a_zero_length_read_costs_nothing() {
    let (image, a, _) = image();
    with_cache(&image, |cache| {
        let mut volume = FatVolume::mount(cache).unwrap();
        let entry = volume.lookup("a.bin").unwrap();
        volume.cache().reset_stats();
        assert_eq!(volume.read_at(&entry, 5, &mut []).unwrap(), 0);
        assert_eq!(volume.cache().stats().requests, 0);

        let mut piece = vec![0u8; 5000];
        volume.read_at(&entry, 100_000, &mut piece).unwrap();
        assert_eq!(piece[..], a[100_000..105_000]);
        let first = volume.cache().stats();
        assert!(first.requests > 0 && first.block_misses > 0);
        // Reading the same piece again finds every block in the cache.
        volume.cache().reset_stats();
        volume.read_at(&entry, 100_000, &mut piece).unwrap();
        let again = volume.cache().stats();
        assert_eq!(again.requests, first.requests);
        assert_eq!(again.block_misses, 0);
        assert_eq!(again.device_ops, 0);
        assert!(again.block_hits > 0);
    });
}

#[test]
fn a_broken_chain_is_a_typed_error() {
    for fat_type in TYPES {
        let data = pattern(CLUSTER * 6, 3);
        let (mut image, fat) = build(fat_type, &[("f.bin", &data)]);
        let first = common::fat::entry(&image, "f.bin").first_cluster;
        let chain = fat.chain(&image, first);
        // Cut the chain after its second cluster.
        fat.set(&mut image, chain[1], fat.end_of_chain());
        check_short(&image, &fat, &data);
        // Make the second cluster point to itself.
        let (mut image, fat) = build(fat_type, &[("f.bin", &data)]);
        fat.set(&mut image, chain[1], chain[1]);
        common::fat::with_volume(&image, |volume| {
            let entry = volume.lookup("f.bin").unwrap();
            let mut buf = vec![0u8; CLUSTER * 6];
            assert!(matches!(
                volume.read_at(&entry, 0, &mut buf),
                Err(FatError::ChainLoops { .. })
            ));
        });
    }
}

fn check_short(image: &[u8], _fat: &Fat, data: &[u8]) {
    common::fat::with_volume(image, |volume| {
        let entry = volume.lookup("f.bin").unwrap();
        let mut buf = vec![0u8; 100];
        // The first two clusters still read.
        assert_eq!(volume.read_at(&entry, 10, &mut buf).unwrap(), 100);
        assert_eq!(buf[..], data[10..110]);
        assert!(matches!(
            volume.read_at(&entry, (CLUSTER * 3) as u64, &mut buf),
            Err(FatError::ChainTooShort { clusters: 2, .. })
        ));
    });
}
