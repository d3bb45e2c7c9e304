//! The 2016 FreeBSD baseline's policies, observed through its counters:
//! its size, where read-ahead stops, which requests bypass it, what a
//! write invalidates. (How much it reads ahead is in `readahead.rs`.)

mod common;

use common::SharedDisk;
use hotkern_bcache::{BlockCache, FreeBsd2016Cache};

fn fresh(blocks: usize, budget: usize) -> FreeBsd2016Cache<SharedDisk> {
    FreeBsd2016Cache::new(SharedDisk::new(blocks, 512, 1024, 4), budget)
}

/// The stats a read of `blocks` blocks at `block` added.
fn read(cache: &mut FreeBsd2016Cache<SharedDisk>, block: u64, blocks: usize) -> (u64, u64) {
    let before = cache.stats();
    cache.read(block, 0, &mut vec![0u8; blocks * 512]).unwrap();
    let after = cache.stats();
    (
        after.device_ops - before.device_ops,
        after.readahead_issued - before.readahead_issued,
    )
}

#[test]
fn the_budget_rounds_down_to_a_power_of_two_of_at_least_32_blocks() {
    let slots = |block_size: usize, budget: usize| {
        FreeBsd2016Cache::new(SharedDisk::new(64, block_size, 8, 1), budget).slots()
    };
    assert_eq!(slots(512, 64 << 10), 128);
    assert_eq!(slots(512, 100 << 10), 128); // 200 blocks
    assert_eq!(slots(512, 255 * 512), 128);
    assert_eq!(slots(512, 256 * 512), 256);
    assert_eq!(slots(4096, 1 << 20), 256);
    assert_eq!(slots(4096, 64 << 10), 32); // 16 blocks: the minimum
    assert_eq!(slots(512, 0), 32);
}

/// Read-ahead fills the cache up to its last slot and no further, and
/// stops at the device's last block.
#[test]
fn read_ahead_stops_at_the_end_of_the_cache_and_of_the_device() {
    // 128 slots; block b in slot b mod 128.
    let mut cache = fresh(300, 64 << 10);
    assert_eq!(read(&mut cache, 0, 1), (1, 127), "slots 1..128");
    assert_eq!(read(&mut cache, 126, 2), (0, 0), "read ahead");
    let mut cache = fresh(300, 64 << 10);
    assert_eq!(read(&mut cache, 127, 1), (1, 0), "the last slot: no room");
    assert_eq!(read(&mut cache, 126, 1), (1, 1), "room for one");
    // Block 290 in slot 34: room for 93 blocks, but only 9 on the device.
    let mut cache = fresh(300, 64 << 10);
    assert_eq!(read(&mut cache, 290, 1), (1, 9));
    assert_eq!(read(&mut cache, 291, 9), (0, 0));
    let stats = cache.stats();
    assert_eq!(
        (stats.readahead_consumed, stats.block_hits),
        (9, 9),
        "{stats}"
    );
}

/// Long misses halve the read-ahead down to `BCACHE_MINREADAHEAD` (32),
/// never below.
#[test]
fn long_misses_never_shrink_read_ahead_below_32() {
    // 512 slots: requests at multiples of 512 have the cache to read into.
    let mut cache = fresh(8192, 256 << 10);
    let issued: Vec<u64> = (0..5).map(|i| read(&mut cache, i * 1024, 33).1).collect();
    assert_eq!(issued, [128, 64, 32, 32, 32]);
}

/// Each read-ahead block counts as consumed once, the first time a
/// request uses it; blocks read because they were asked for never do.
#[test]
fn read_ahead_is_consumed_once() {
    let mut cache = fresh(4096, 64 << 10);
    read(&mut cache, 0, 1);
    for block in [1, 2, 3, 4, 1, 0, 2] {
        assert_eq!(read(&mut cache, block, 1), (0, 0));
    }
    let stats = cache.stats();
    assert_eq!(stats.readahead_consumed, 4, "{stats}");
    assert_eq!(stats.block_hits, 7, "{stats}");
    assert_eq!(stats.block_misses, 1, "{stats}");
}

/// Requests over half the cache that start on a block boundary bypass it
/// (they are counted, and leave nothing cached); others go through it.
#[test]
fn only_aligned_requests_over_half_the_cache_bypass_it() {
    let disk = SharedDisk::new(8192, 512, 1024, 5);
    let truth = disk.snapshot();
    let mut cache = FreeBsd2016Cache::new(disk, 64 << 10);
    assert_eq!(read(&mut cache, 1024, 64), (1, 64), "half: cached");
    assert_eq!(cache.stats().bypasses, 0);
    assert_eq!(read(&mut cache, 2048, 65), (1, 0));
    assert_eq!(cache.stats().bypasses, 1);
    assert_eq!(read(&mut cache, 2048, 1).0, 1, "nothing kept");
    let mut buf = vec![0u8; 65 * 512];
    cache.read(3072, 1, &mut buf).unwrap();
    assert!(buf[..] == truth[3072 * 512 + 1..][..buf.len()]);
    assert_eq!(cache.stats().bypasses, 1, "unaligned: through the cache");
    cache.write(4096, 0, &vec![7; 65 * 512]).unwrap();
    assert_eq!(cache.stats().bypasses, 2);
    cache.write(4096, 0, &vec![7; 64 * 512]).unwrap();
    assert_eq!(cache.stats().bypasses, 2);
}

/// A write invalidates the blocks it covers and only those: the block
/// sharing a written block's slot stays cached.
#[test]
fn a_write_invalidates_only_the_blocks_it_covers() {
    let disk = SharedDisk::new(4096, 512, 1024, 6);
    let mut cache = FreeBsd2016Cache::new(disk.clone(), 64 << 10);
    read(&mut cache, 0, 1); // blocks 0..128
    cache.write(130, 0, &[9; 512]).unwrap(); // slot 2, holding block 2
    cache.write(5, 0, &[8; 512]).unwrap();
    assert_eq!(read(&mut cache, 2, 1).0, 0, "block 2 kept");
    assert_eq!(read(&mut cache, 6, 1).0, 0, "block 6 kept");
    let mut back = [0u8; 512];
    let before = cache.stats().device_ops;
    cache.read(5, 0, &mut back).unwrap();
    assert_eq!(back, [8; 512]);
    assert!(cache.stats().device_ops > before, "block 5 was invalidated");
    assert!(disk.snapshot()[130 * 512..131 * 512] == [9; 512]);
}

/// A request whose first blocks are cached reads from its first missing
/// block: the read-ahead is the room left after that one block.
#[test]
fn a_request_that_starts_with_hits_reads_from_its_first_missing_block() {
    let mut cache = fresh(4096, 64 << 10);
    read(&mut cache, 0, 1); // blocks 0..128
    cache.write(6, 0, &[3; 512]).unwrap(); // block 6 no longer cached
    let before = cache.stats();
    // Block 5 hits; block 6, in slot 6, misses with 121 slots after it.
    assert_eq!(read(&mut cache, 5, 2), (1, 121));
    let stats = cache.stats();
    assert_eq!(stats.block_hits - before.block_hits, 1);
    assert_eq!(stats.block_misses - before.block_misses, 1);
    assert_eq!(stats.device_bytes - before.device_bytes, 122 * 512);
}
