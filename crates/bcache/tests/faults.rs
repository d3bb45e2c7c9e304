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
            let before = disk.snapshot();
            // Blocks 4..12 in transfers of 4 blocks: the first, at block 4, fails.
            assert_eq!(
                cache.write(4, 100, &new),
                Err(IoError::Medium { block: 4 }),
                "{kind}"
            );
            // Nothing landed, or the torn first half of the failed transfer
            // (blocks 4 and 5 of the merged blocks 4..8); nothing else moved.
            let device_now = disk.snapshot();
            let mut landed = before.clone();
            if torn {
                landed[4 * 512 + 100..6 * 512].copy_from_slice(&new[..2 * 512 - 100]);
            }
            assert!(
                device_now == landed,
                "{kind} (torn: {torn}): the device holds the wrong bytes"
            );
            // Whatever landed, reads agree with it.
            let mut back = vec![0u8; 4096];
            for (i, piece) in back.chunks_mut(512).enumerate() {
                cache.read(4 + i as u64, 0, piece).unwrap();
            }
            assert!(
                back[..] == device_now[4 * 512..4 * 512 + 4096],
                "{kind} (torn: {torn}) claims data the device lacks"
            );
            // A successful retry puts the new data on the device, and reads show it.
            cache.write(4, 100, &new).unwrap();
            let mut written = before.clone();
            written[4 * 512 + 100..4 * 512 + 100 + new.len()].copy_from_slice(&new);
            assert!(disk.snapshot() == written, "{kind} (torn: {torn})");
            cache.read(4, 100, &mut back[..new.len()]).unwrap();
            assert!(back[..new.len()] == new[..], "{kind}");
        }
    }
}

/// What one run of [`random_faults`] did, for the shares its property
/// must reach.
#[derive(Default)]
struct FaultRun {
    requests: u64,
    failed: u64,
    served: u64,
    writes: u64,
    /// Failed writes: where a write must touch nothing beyond its blocks.
    failed_writes: u64,
    /// Served reads overlapping bytes a request failed on since they were
    /// last served: where a cache that kept a failed transfer would show it.
    served_after_failure: u64,
}

fn random_faults(seed: u64, read_rate: u32, write_rate: u32, budget_blocks: usize) -> FaultRun {
    let mut run = FaultRun::default();
    for kind in CacheKind::ALL {
        let disk = SharedDisk::new(128, 512, 8, seed);
        let mut faulty = FaultyDevice::new(disk.clone());
        faulty.fail_at_rate(read_rate, write_rate, seed);
        faulty.tear_writes(seed % 2 == 0);
        let mut cache = kind.build(faulty, budget_blocks * 512);
        let mut rng = rng(seed);
        let total = 128 * 512u64;
        let mut failed_ranges: Vec<(u64, u64)> = Vec::new();
        for step in 0..1500u64 {
            let at = if rng.random_range(0..3) == 0 {
                rng.random_range(0..total)
            } else {
                (step * 512) % total
            };
            let len = rng.random_range(1..=3000).min(total - at) as usize;
            let end = at + len as u64;
            let (block, offset) = (at / 512, (at % 512) as usize);
            run.requests += 1;
            let outcome = if rng.random_range(0..5) == 0 {
                run.writes += 1;
                let data = pattern(len, step);
                let before = disk.snapshot();
                let outcome = cache.write(block, offset, &data);
                let now = disk.snapshot();
                if outcome.is_ok() {
                    let mut expected = before;
                    expected[at as usize..end as usize].copy_from_slice(&data);
                    assert!(
                        now == expected,
                        "{kind}: a successful write at step {step} left the device wrong (seed {seed})"
                    );
                } else {
                    run.failed_writes += 1;
                    // Torn or not, a failed write touches only the blocks it covers.
                    let (low, high) = (block as usize * 512, end.next_multiple_of(512) as usize);
                    assert!(
                        now[..low] == before[..low] && now[high..] == before[high..],
                        "{kind}: a failed write at step {step} touched other blocks (seed {seed})"
                    );
                }
                outcome
            } else {
                let mut buf = vec![0u8; len];
                let outcome = cache.read(block, offset, &mut buf);
                if outcome.is_ok() {
                    run.served += 1;
                    let overlaps = |&(l, h): &(u64, u64)| l < end && at < h;
                    if failed_ranges.iter().any(overlaps) {
                        run.served_after_failure += 1;
                        failed_ranges.retain(|r| !overlaps(r));
                    }
                    let truth = disk.snapshot();
                    assert!(
                        buf[..] == truth[at as usize..end as usize],
                        "{kind}: wrong bytes at step {step} (seed {seed})"
                    );
                }
                outcome
            };
            if let Err(error) = outcome {
                assert!(matches!(error, IoError::Medium { .. }), "{kind}: {error}");
                run.failed += 1;
                failed_ranges.push((at, end));
            }
        }
    }
    run
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
        // Every run must inject faults (6 to 30 % of requests fail at
        // these rates) and still serve most reads, and reads must come back
        // to bytes that failed (almost every failure is re-read soon: the
        // walk is mostly sequential and wraps every 128 blocks).
        let run = random_faults(seed, read_rate, write_rate, budget_blocks);
        let share = |n: u64| n as f64 / run.requests as f64;
        // A write fails when any of its transfers does (its edge reads
        // included), so at least 5 % of writes fail.
        let failed_writes = run.failed_writes as f64 / run.writes.max(1) as f64;
        println!(
            "{} requests: {:.1} % failed, {:.1} % served, {:.1} % served after a failure there, \
             {:.1} % of {} writes failed",
            run.requests,
            100.0 * share(run.failed),
            100.0 * share(run.served),
            100.0 * share(run.served_after_failure),
            100.0 * failed_writes,
            run.writes
        );
        prop_assert!(share(run.failed) >= 0.03);
        prop_assert!(share(run.served) >= 0.30);
        prop_assert!(share(run.served_after_failure) >= 0.03);
        prop_assert!(failed_writes >= 0.025);
    }
}

#[test]
fn a_bad_sector_fails_only_the_reads_that_cover_it() {
    let shared = SharedDisk::new(32, 512, 8, 1);
    let truth = shared.snapshot();
    let mut disk = FaultyDevice::new(shared);
    disk.fail_block(7);
    let mut buf = vec![0u8; 512 * 4];
    // Four-block reads starting at 4..=7 cover block 7; those at 3 and 8
    // end just before it and start just after it.
    for first in 4..=7u64 {
        assert_eq!(
            disk.read_blocks(first, &mut buf),
            Err(IoError::Medium { block: first })
        );
    }
    for first in [3u64, 8] {
        buf.fill(0);
        disk.read_blocks(first, &mut buf).unwrap();
        let at = first as usize * 512;
        assert!(buf[..] == truth[at..at + buf.len()], "block {first}");
    }
    assert_eq!(disk.failures(), 4);
}
