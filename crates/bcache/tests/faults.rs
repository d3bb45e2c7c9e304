//! Fault injection: failed transfers leave nothing wrong in any cache.

mod common;

use common::{pattern, rng, SharedDisk};
use hotkern_bcache::{BlockCache, BlockDevice, CacheKind, FaultyDevice, IoError, GARBAGE};
use proptest::prelude::*;
use rand::Rng;

#[test]
fn a_failed_read_leaves_nothing_half_filled() {
    for kind in CacheKind::ALL {
        let disk = SharedDisk::new(256, 512, 16, 5);
        let truth = disk.snapshot();
        let mut faulty = FaultyDevice::new(disk.clone());
        // The very first transfer fails after scribbling garbage.
        faulty.fail_read_op(0);
        let mut cache = kind.build(faulty, 64 * 512);
        let mut buf = vec![0u8; 1024];
        let err = cache.read(10, 100, &mut buf).unwrap_err();
        assert_eq!(err, IoError::Medium { block: 10 }, "{kind}");
        // The same bytes again, and every block a read-ahead would have
        // covered: all must come from the device, none from the failed buffer.
        for block in 10..60u64 {
            let mut again = vec![0u8; 512];
            cache.read(block, 0, &mut again).unwrap();
            let at = block as usize * 512;
            assert!(
                again[..] == truth[at..at + 512],
                "{kind} served a failed transfer"
            );
            assert!(again.iter().any(|&b| b != GARBAGE));
        }
    }
}

#[test]
fn a_failed_write_never_leaves_the_cache_claiming_data_the_device_lacks() {
    for kind in CacheKind::ALL {
        for torn in [false, true] {
            let disk = SharedDisk::new(64, 512, 4, 9);
            let mut faulty = FaultyDevice::new(disk.clone());
            faulty.tear_writes(torn);
            faulty.fail_write_op(0);
            let mut cache = kind.build(faulty, 32 * 512);
            // Warm the cache so the blocks about to be written are cached
            // (block by block: a large read would bypass the cache).
            let mut warm = vec![0u8; 512];
            for block in 4..12 {
                cache.read(block, 0, &mut warm).unwrap();
            }
            assert!(cache.stats().block_hits + cache.stats().block_misses >= 8);
            let new = pattern(4096 - 200, 77);
            assert!(cache.write(4, 100, &new).is_err(), "{kind}");
            // Whatever landed (nothing, or a torn half), reads agree with it.
            let device_now = disk.snapshot();
            let mut back = vec![0u8; 4096];
            for (i, piece) in back.chunks_mut(512).enumerate() {
                cache.read(4 + i as u64, 0, piece).unwrap();
            }
            assert!(
                back[..] == device_now[4 * 512..4 * 512 + 4096],
                "{kind} (torn: {torn}) claims data the device lacks"
            );
            // A successful retry shows the new data.
            cache.write(4, 100, &new).unwrap();
            cache.read(4, 100, &mut back[..new.len()]).unwrap();
            assert!(back[..new.len()] == new[..], "{kind}");
        }
    }
}

fn random_faults(seed: u64, read_rate: u32, write_rate: u32, budget_blocks: usize) {
    for kind in CacheKind::ALL {
        let disk = SharedDisk::new(128, 512, 8, seed);
        let mut faulty = FaultyDevice::new(disk.clone());
        faulty.fail_at_rate(read_rate, write_rate, seed);
        faulty.tear_writes(seed % 2 == 0);
        let mut cache = kind.build(faulty, budget_blocks * 512);
        let mut rng = rng(seed);
        let total = 128 * 512u64;
        let (mut failed, mut served) = (0, 0);
        for step in 0..1500u64 {
            let at = if rng.random_range(0..3) == 0 {
                rng.random_range(0..total)
            } else {
                (step * 512) % total
            };
            let len = rng.random_range(1..=3000).min(total - at) as usize;
            let (block, offset) = (at / 512, (at % 512) as usize);
            if rng.random_range(0..5) == 0 {
                let data = pattern(len, step);
                if cache.write(block, offset, &data).is_err() {
                    failed += 1;
                }
            } else {
                let mut buf = vec![0u8; len];
                match cache.read(block, offset, &mut buf) {
                    Ok(()) => {
                        served += 1;
                        let truth = disk.snapshot();
                        assert!(
                            buf[..] == truth[at as usize..at as usize + len],
                            "{kind}: wrong bytes at step {step} (seed {seed})"
                        );
                    }
                    Err(_) => failed += 1,
                }
            }
        }
        assert!(
            failed > 10 && served > 200,
            "{kind}: {failed} failed, {served} served"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn random_faults_never_produce_a_wrong_byte(
        seed in any::<u64>(),
        read_rate in 50_000u32..300_000,
        write_rate in 50_000u32..300_000,
        budget_blocks in 8usize..64,
    ) {
        random_faults(seed, read_rate, write_rate, budget_blocks);
    }
}

#[test]
fn a_bad_sector_fails_only_the_reads_that_cover_it() {
    let mut disk = FaultyDevice::new(SharedDisk::new(32, 512, 8, 1));
    disk.fail_block(7);
    let mut buf = vec![0u8; 512 * 4];
    assert!(disk.read_blocks(4, &mut buf).is_err());
    assert!(disk.read_blocks(8, &mut buf).is_ok());
    assert_eq!(disk.failures(), 1);
}
