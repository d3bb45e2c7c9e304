//! Read-ahead at the edges: the end of the device, large requests,
//! non-sequential access; and the direct-mapped cache's weak spot.

mod common;

use common::SharedDisk;
use hotkern_bcache::{BlockCache, CacheKind, FreeBsd2016Cache, HotkernCache};

#[test]
fn sequential_reads_up_to_the_last_byte_never_read_past_the_device() {
    for block_size in [512, 4096] {
        for kind in CacheKind::ALL {
            let blocks = 300u64;
            let disk = SharedDisk::new(blocks as usize, block_size, 64, 4);
            let truth = disk.snapshot();
            let mut cache = kind.build(disk, 128 * block_size);
            // Start 40 blocks before the end; read in 512-byte pieces.
            let start = (blocks - 40) * block_size as u64;
            let mut at = start;
            let end = blocks * block_size as u64;
            while at < end {
                let mut buf = [0u8; 512];
                let bs = block_size as u64;
                cache
                    .read(at / bs, (at % bs) as usize, &mut buf)
                    .unwrap_or_else(|e| panic!("{kind} at {at}: {e}"));
                assert!(buf[..] == truth[at as usize..at as usize + 512]);
                at += 512;
            }
            let stats = cache.stats();
            // `none` rereads a block for every piece of it; the others
            // read each of the 40 blocks once.
            let reads = if kind == CacheKind::None {
                40 * block_size as u64 / 512
            } else {
                1
            };
            assert!(
                stats.device_bytes <= reads * 40 * block_size as u64,
                "{kind}: read {} bytes for 40 blocks",
                stats.device_bytes
            );
        }
    }
}

#[test]
fn a_sequential_request_over_256_kib_is_served_whole() {
    // FreeBSD's later read-ahead code computed `512 - p_size` in unsigned
    // arithmetic; requests of more than 512 blocks must not upset ours.
    for kind in CacheKind::ALL {
        let disk = SharedDisk::new(4096, 512, 128, 8);
        let truth = disk.snapshot();
        let mut cache = kind.build(disk, 2 << 20);
        let mut small = [0u8; 512];
        cache.read(0, 0, &mut small).unwrap();
        cache.read(1, 0, &mut small).unwrap();
        let mut big = vec![0u8; 600 * 512 + 77];
        cache.read(2, 0, &mut big).unwrap();
        assert!(big[..] == truth[1024..1024 + big.len()], "{kind}");
        let after = 2 * 512 + big.len();
        cache.read(0, after, &mut small).unwrap();
        assert!(small[..] == truth[after..after + 512], "{kind}");
    }
}

#[test]
fn large_reads_bypass_the_cache() {
    let disk = SharedDisk::new(4096, 512, 128, 8);
    let mut cache = HotkernCache::new(disk, 1 << 20);
    let mut big = vec![0u8; 300 * 512];
    cache.read(100, 0, &mut big).unwrap();
    let stats = cache.stats();
    assert_eq!(stats.bypasses, 1);
    // Aligned: straight into the caller's buffer, nothing cached, no read-ahead.
    assert_eq!(stats.device_bytes, 300 * 512);
    assert_eq!(stats.readahead_issued, 0);
    assert_eq!(stats.block_misses + stats.block_hits, 0);
}

#[test]
fn random_access_gets_no_read_ahead_and_sequential_access_does() {
    let disk = SharedDisk::new(8192, 512, 128, 8);
    let mut cache = HotkernCache::new(disk, 1 << 20);
    let mut buf = [0u8; 512];
    for i in 0..200u64 {
        cache.read((i * 7919) % 8192, 0, &mut buf).unwrap();
    }
    assert_eq!(cache.stats().readahead_issued, 0);
    cache.reset_stats();
    for block in 0..2000 {
        cache.read(block, 0, &mut buf).unwrap();
    }
    let stats = cache.stats();
    assert!(stats.readahead_issued > 1900, "{stats}");
    // Almost all of it was used, and the transfers grew to the device's limit.
    assert!(
        stats.readahead_consumed * 100 >= stats.readahead_issued * 95,
        "{stats}"
    );
    assert!(stats.device_ops < 30, "{stats}");
}

/// FAT-like traffic: one metadata block consulted between every few data
/// blocks, placed where the direct-mapped cache maps data onto it.
fn fat_like(cache: &mut dyn BlockCache, fat_block: u64, data_start: u64, data_blocks: u64) {
    let mut buf = [0u8; 512];
    let mut entry = [0u8; 4];
    for i in 0..data_blocks {
        if i % 8 == 0 {
            cache
                .read(fat_block, (i as usize / 8 % 128) * 4, &mut entry)
                .unwrap();
        }
        cache.read(data_start + i, 0, &mut buf).unwrap();
    }
}

#[test]
fn metadata_and_data_do_not_evict_each_other() {
    let budget = 256 << 10; // 512 slots of 512 bytes
    let slots = 512u64;
    let data_blocks = 16 * slots;
    let disk = SharedDisk::new((data_blocks + 2 * slots) as usize, 512, 128, 2);
    let mut freebsd = FreeBsd2016Cache::new(disk.clone(), budget);
    assert_eq!(freebsd.slots() as u64, slots);
    fat_like(&mut freebsd, 40, slots, data_blocks);
    let mut ours = HotkernCache::new(disk, budget);
    fat_like(&mut ours, 40, slots, data_blocks);
    let (theirs, mine) = (freebsd.stats(), ours.stats());
    // Every pass of the data over slot 40 costs the direct-mapped cache the
    // FAT block (and read-ahead shrinks on the misses that follow).
    assert!(theirs.device_ops > mine.device_ops + 16, "{theirs}\n{mine}");
    assert!(mine.block_misses <= data_blocks / 64 + 16, "{mine}");
}

/// FreeBSD's 2016 `bcache.c` reads ahead `BCACHE_READAHEAD` (256) blocks,
/// halves that after a miss of more than `BCACHE_MINREADAHEAD` (32)
/// blocks, and doubles it back after a request served from the cache. The
/// baseline must do the same, observed through what it asks of the device.
#[test]
fn the_freebsd_baseline_reads_ahead_256_blocks_and_halves_after_long_misses() {
    let disk = SharedDisk::new(4096, 512, 1024, 3);
    // 512 slots: block b lives in slot b mod 512, so requests starting at
    // multiples of 512 have the whole cache as read-ahead room.
    let mut cache = FreeBsd2016Cache::new(disk, 256 << 10);
    assert_eq!(cache.slots(), 512);
    let issued = |cache: &mut FreeBsd2016Cache<SharedDisk>, block: u64, blocks: usize| {
        let before = cache.stats().readahead_issued;
        cache.read(block, 0, &mut vec![0u8; blocks * 512]).unwrap();
        cache.stats().readahead_issued - before
    };
    assert_eq!(issued(&mut cache, 0, 1), 256, "the first miss");
    assert_eq!(
        issued(&mut cache, 1024, 32),
        256,
        "a miss of 32 blocks keeps it"
    );
    assert_eq!(
        issued(&mut cache, 2048, 33),
        128,
        "a miss of 33 blocks halves it"
    );
    assert_eq!(issued(&mut cache, 3072, 40), 64, "and again");
    assert_eq!(issued(&mut cache, 3072, 1), 0, "a hit");
    // Block 1792 sits in slot 256, clear of the blocks from 3072 in slots
    // 0..104, with 255 slots of room after it.
    assert_eq!(issued(&mut cache, 1792, 1), 128, "doubled back by the hit");
    assert_eq!(issued(&mut cache, 3073, 1), 0, "a hit");
    assert_eq!(issued(&mut cache, 3074, 1), 0, "a hit, already at 256");
    assert_eq!(issued(&mut cache, 2560, 1), 256, "never above 256");
}

#[test]
fn hotkern_holds_its_budget_in_blocks_and_never_fewer_than_8() {
    let slots = |block_size: usize, budget: usize| {
        HotkernCache::new(SharedDisk::new(64, block_size, 8, 1), budget).slots()
    };
    assert_eq!(slots(512, 1 << 20), 2048); // 1 MiB / 512 B
    assert_eq!(slots(4096, 1 << 20), 256); // 1 MiB / 4 KiB
    assert_eq!(slots(512, 512 * 20 + 511), 20); // whole blocks only
    assert_eq!(slots(512, 100), 8);
    assert_eq!(slots(4096, 0), 8);
}

/// Three files read in turn, a block at a time, with a stray read between
/// rounds (a directory lookup, say): hotkern follows four streams, and the
/// stray read, least recently used each time the next one comes, must
/// replace only its predecessor. Every file keeps its stream, so each is
/// read in a few large operations. Were a file's stream replaced instead,
/// its next block would start a new stream — a miss with no read-ahead —
/// every round.
#[test]
fn a_stray_read_between_streams_replaces_the_least_recently_used_one() {
    let disk = SharedDisk::new(8192, 512, 128, 6);
    let truth = disk.snapshot();
    let mut cache = HotkernCache::new(disk, 1 << 20);
    let files = [1000u64, 3000, 5000];
    let rounds = 300u64;
    let mut buf = [0u8; 512];
    for round in 0..rounds {
        for start in files {
            let block = start + round;
            cache.read(block, 0, &mut buf).unwrap();
            let at = block as usize * 512;
            assert!(buf[..] == truth[at..at + 512], "block {block}");
        }
        // Far from the files and from each other.
        cache.read(7000 + round * 3, 0, &mut buf).unwrap();
    }
    let stats = cache.stats();
    // 300 stray reads miss once each; each file's 300 blocks come in
    // read-ahead windows doubling from 32 blocks to the 128-block largest
    // transfer: a handful of operations a file, not one a round.
    assert!(stats.device_ops < rounds + 3 * 20, "{stats}");
    assert!(stats.readahead_issued >= 3 * (rounds - 32), "{stats}");
}

/// A request's missing blocks are read in one device operation per run of
/// consecutive missing blocks, and a block already cached between two runs
/// is a hit, not read again.
#[test]
fn hotkern_reads_each_run_of_missing_blocks_once() {
    let disk = SharedDisk::new(8192, 512, 128, 9);
    let truth = disk.snapshot();
    let mut cache = HotkernCache::new(disk, 1 << 20);
    cache.read(101, 0, &mut [0u8; 512]).unwrap();
    cache.reset_stats();
    // Starts before block 101: not sequential, so no read-ahead.
    let mut buf = [0u8; 4 * 512];
    cache.read(100, 0, &mut buf).unwrap();
    assert!(buf[..] == truth[100 * 512..104 * 512]);
    let stats = cache.stats();
    // Block 100, then blocks 102 and 103 together.
    assert_eq!(stats.device_ops, 2, "{stats}");
    assert_eq!(stats.device_bytes, 3 * 512, "{stats}");
    assert_eq!((stats.block_hits, stats.block_misses), (1, 3), "{stats}");
    assert_eq!(stats.readahead_issued, 0, "{stats}");
}

/// A metadata block read once stays cached however much file data streams
/// past it: read-ahead fills only the stream ring.
#[test]
fn hotkern_keeps_metadata_while_a_long_file_streams_past() {
    let disk = SharedDisk::new(8192, 512, 128, 10);
    // 2048 slots: a reuse ring of 512 and a stream ring of 1536.
    let mut cache = HotkernCache::new(disk, 1 << 20);
    let mut buf = [0u8; 512];
    cache.read(10, 0, &mut buf).unwrap();
    for block in 1000..1000 + 4 * 2048 - 1100 {
        cache.read(block, 0, &mut buf).unwrap();
    }
    let stats = cache.stats();
    assert!(stats.readahead_issued > 4 * 1536, "{stats}");
    cache.reset_stats();
    cache.read(10, 0, &mut buf).unwrap();
    assert_eq!(cache.stats().device_ops, 0, "{}", cache.stats());
}
