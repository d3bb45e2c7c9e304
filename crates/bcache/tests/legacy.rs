//! The pre-2016 FreeBSD baseline's policies, observed through its counters:
//! 32 entries of 512 bytes, the entry inserted longest ago evicted first,
//! requests over half the cache sent straight to the device, and the whole
//! cache flushed whenever another unit is used.

mod common;

use common::SharedDisk;
use hotkern_bcache::{BlockCache, LegacyCache};

fn read(cache: &mut dyn BlockCache, block: u64, blocks: usize) -> Vec<u8> {
    let mut buf = vec![0u8; blocks * cache.block_size()];
    cache.read(block, 0, &mut buf).unwrap();
    buf
}

/// Device operations a read costs.
fn ops(cache: &mut dyn BlockCache, block: u64, blocks: usize) -> u64 {
    let before = cache.stats().device_ops;
    read(cache, block, blocks);
    cache.stats().device_ops - before
}

/// Use stamps are given when a block is inserted (as the original's
/// `bcache_insert` did) and not when it is read again, so the block
/// inserted longest ago goes first however often it was read since.
#[test]
fn the_block_inserted_longest_ago_is_evicted_first() {
    let disk = SharedDisk::new(256, 512, 64, 1);
    let truth = disk.snapshot();
    let mut cache = LegacyCache::new(disk);
    for block in 0..32 {
        assert_eq!(ops(&mut cache, block, 1), 1, "block {block} first read");
    }
    for block in 0..32 {
        assert!(read(&mut cache, block, 1)[..] == truth[block as usize * 512..][..512]);
    }
    let stats = cache.stats();
    assert_eq!((stats.block_misses, stats.block_hits), (32, 32), "{stats}");
    assert_eq!(stats.device_ops, 32, "{stats}");
    // A 33rd block replaces block 0, the first inserted.
    assert_eq!(ops(&mut cache, 100, 1), 1);
    for block in 1..32 {
        assert_eq!(ops(&mut cache, block, 1), 0, "block {block} still cached");
    }
    assert_eq!(ops(&mut cache, 0, 1), 1, "block 0 was evicted");
    // Block 0 came back in place of block 1, the next oldest.
    assert_eq!(ops(&mut cache, 2, 1), 0);
    assert_eq!(ops(&mut cache, 1, 1), 1);
    assert_eq!(ops(&mut cache, 100, 1), 0);
    assert_eq!(cache.stats().requests, 32 + 32 + 1 + 31 + 4);
}

/// A request of more than half the cache (16 of 32 blocks) bypasses it:
/// read or written, its blocks are not kept; 16 blocks still go through.
#[test]
fn requests_over_half_the_cache_bypass_it() {
    let disk = SharedDisk::new(512, 512, 64, 2);
    let truth = disk.snapshot();
    let mut cache = LegacyCache::new(disk.clone());
    assert_eq!(ops(&mut cache, 100, 16), 1);
    assert_eq!(ops(&mut cache, 100, 16), 0, "16 blocks are cached");
    assert_eq!(cache.stats().bypasses, 0);
    assert!(read(&mut cache, 200, 17)[..] == truth[200 * 512..217 * 512]);
    assert_eq!(cache.stats().bypasses, 1);
    assert_eq!(ops(&mut cache, 200, 1), 1, "17 blocks are not");

    let data = vec![0x5a; 17 * 512];
    cache.write(300, 0, &data).unwrap();
    assert_eq!(cache.stats().bypasses, 2);
    assert_eq!(ops(&mut cache, 300, 1), 1, "a bypassed write is not kept");
    cache.write(400, 0, &data[..16 * 512]).unwrap();
    assert_eq!(cache.stats().bypasses, 2);
    assert_eq!(ops(&mut cache, 400, 16), 0, "a written block is kept");
    assert!(read(&mut cache, 400, 16)[..] == data[..16 * 512]);
    assert!(disk.snapshot()[300 * 512..317 * 512] == data[..]);
}

/// Requests of 4096-byte blocks: 16 KiB holds 4 of them, and more than
/// 2 blocks bypass.
#[test]
fn the_16_kib_cache_holds_4_blocks_of_4096_bytes() {
    let mut cache = LegacyCache::new(SharedDisk::new(64, 4096, 8, 3));
    for block in 0..4 {
        assert_eq!(ops(&mut cache, block, 1), 1);
    }
    for block in 0..4 {
        assert_eq!(ops(&mut cache, block, 1), 0);
    }
    assert_eq!(ops(&mut cache, 10, 2), 1);
    assert_eq!(cache.stats().bypasses, 0);
    assert_eq!(ops(&mut cache, 20, 3), 1);
    assert_eq!(cache.stats().bypasses, 1);
    // Blocks 10 and 11 replaced blocks 0 and 1.
    assert_eq!(ops(&mut cache, 2, 2), 0);
    assert_eq!(ops(&mut cache, 0, 1), 1);
}

/// Each unit sharing the global cache has a number of its own: blocks of
/// one device are never served to another, even when both use the same
/// block numbers, and any request (even a bypassed one) by another unit
/// flushes the cache.
#[test]
fn units_never_see_each_others_blocks() {
    let disks: Vec<SharedDisk> = (0..3)
        .map(|seed| SharedDisk::new(64, 512, 64, 10 + seed))
        .collect();
    let truths: Vec<Vec<u8>> = disks.iter().map(SharedDisk::snapshot).collect();
    let first = LegacyCache::new(disks[0].clone());
    let mut units: Vec<LegacyCache<SharedDisk>> = vec![
        first.sharing(disks[1].clone()).unwrap(),
        first.sharing(disks[2].clone()).unwrap(),
    ];
    units.insert(0, first);
    for round in 0..2 {
        for (unit, truth) in units.iter_mut().zip(&truths) {
            assert!(
                read(unit, 5, 1)[..] == truth[5 * 512..6 * 512],
                "round {round}"
            );
        }
    }
    for unit in &units {
        assert_eq!(
            unit.stats().block_hits,
            0,
            "each read followed another unit's"
        );
    }
    let [a, b, _] = &mut units[..] else {
        unreachable!()
    };
    assert_eq!(ops(a, 5, 1), 1);
    assert_eq!(ops(a, 5, 1), 0);
    read(b, 40, 17);
    assert_eq!(b.stats().bypasses, 1);
    assert_eq!(ops(a, 5, 1), 1, "flushed by the other unit's bypassed read");
    b.write(40, 0, &[1, 2, 3]).unwrap();
    assert_eq!(ops(a, 5, 1), 1, "flushed by the other unit's write");
}
