//! Devices, their geometry checks, and every construction error.

use hotkern_bcache::{
    BlockCache, BlockDevice, CacheKind, CacheStats, ConfigError, DeviceModel, FileDevice, IoError,
    LegacyCache, MemoryDevice, ModeledDevice, StripedSet,
};

#[test]
fn memory_device_refuses_bad_geometry() {
    for size in [0, 256, 1000, 1024 + 1, 8192] {
        assert_eq!(
            MemoryDevice::new(vec![0; 8192], size).unwrap_err(),
            ConfigError::BlockSize(size)
        );
    }
    assert_eq!(
        MemoryDevice::new(Vec::new(), 512).unwrap_err(),
        ConfigError::Empty
    );
    assert_eq!(
        MemoryDevice::new(vec![0; 1000], 512).unwrap_err(),
        ConfigError::Length {
            len: 1000,
            block_size: 512
        }
    );
    let disk = MemoryDevice::zeroed(4, 512).unwrap();
    assert_eq!(disk.with_max_transfer(0).unwrap_err(), ConfigError::Empty);
}

#[test]
fn refused_transfers_change_nothing() {
    let mut disk = MemoryDevice::new((0..4096u32).map(|i| i as u8).collect(), 512)
        .unwrap()
        .with_max_transfer(2)
        .unwrap();
    let before = disk.bytes().to_vec();
    assert_eq!(
        disk.write_blocks(0, &[1; 100]).unwrap_err(),
        IoError::Misaligned {
            len: 100,
            block_size: 512
        }
    );
    assert_eq!(
        disk.write_blocks(0, &[1; 1536]).unwrap_err(),
        IoError::TooLarge {
            blocks: 3,
            max_blocks: 2
        }
    );
    assert!(matches!(
        disk.write_blocks(7, &[1; 1024]),
        Err(IoError::OutOfRange { .. })
    ));
    assert!(matches!(
        disk.write_blocks(u64::MAX, &[1; 512]),
        Err(IoError::OutOfRange { .. })
    ));
    assert_eq!(disk.bytes(), &before[..]);
    let mut buf = [9u8; 512];
    assert!(disk.read_blocks(8, &mut buf).is_err());
    assert_eq!(buf, [9u8; 512]);
    // Errors say what went wrong.
    let text = IoError::TooLarge {
        blocks: 3,
        max_blocks: 2,
    }
    .to_string();
    assert!(text.contains('3') && text.contains('2'));
}

#[test]
fn file_device_pads_the_last_block_and_respects_read_only() {
    let path = std::env::temp_dir().join(format!("hotkern-bcache-file-{}", std::process::id()));
    let content: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8 + 1).collect();
    std::fs::write(&path, &content).unwrap();
    let mut disk = FileDevice::open(&path, 512).unwrap();
    assert_eq!(disk.block_count(), 2);
    let mut buf = vec![0u8; 1024];
    disk.read_blocks(0, &mut buf).unwrap();
    assert_eq!(&buf[..1000], &content[..]);
    assert!(buf[1000..].iter().all(|&b| b == 0));
    assert_eq!(
        disk.write_blocks(0, &[0; 512]).unwrap_err(),
        IoError::ReadOnly
    );
    assert_eq!(std::fs::read(&path).unwrap(), content);
    let mut writable = FileDevice::open_writable(&path, 512).unwrap();
    writable.write_blocks(1, &[0xEE; 512]).unwrap();
    assert_eq!(std::fs::read(&path).unwrap()[600], 0xEE);
    assert!(FileDevice::open(&path, 3000).is_err());
    assert!(FileDevice::open(&path.with_extension("absent"), 512).is_err());
    std::fs::remove_file(&path).unwrap();
}

/// One preset's figures worked out by hand from the table in
/// `src/modeled.rs` (MB = 10^6 bytes, KiB = 2^10; an operation costs its
/// latency plus its bytes at the bandwidth, rounded down to whole
/// nanoseconds; the limit for a load is its bytes at the bandwidth plus
/// one latency per largest transfer, rounded up).
struct Expected {
    name: &'static str,
    /// Largest transfer in blocks: 64 or 256 KiB over the block size.
    max_blocks: u32,
    /// One operation of one block.
    one_block_ns: u64,
    /// One operation of the largest transfer.
    largest_ns: u64,
    /// The limit for one byte: one latency plus a byte's time.
    limit_one_byte_ns: u64,
    /// The limit for ten largest transfers.
    limit_ten_ns: u64,
    /// The limit for ten largest transfers and one byte: an eleventh latency.
    limit_ten_and_a_byte_ns: u64,
}

const EXPECTED: [Expected; 4] = [
    // 512 B blocks, 1.5 ms, 20 MB/s = 50 ns per byte, 64 KiB.
    Expected {
        name: "usb-stick",
        max_blocks: 128,                     // 65 536 / 512
        one_block_ns: 1_525_600,             // 1 500 000 + 512 × 50
        largest_ns: 4_776_800,               // 1 500 000 + 65 536 × 50
        limit_one_byte_ns: 1_500_050,        // 1 500 000 + 50
        limit_ten_ns: 47_768_000,            // 10 × 1 500 000 + 655 360 × 50
        limit_ten_and_a_byte_ns: 49_268_050, // 11 × 1 500 000 + 655 361 × 50
    },
    // 2048 B blocks, 5 ms, 4 MB/s = 250 ns per byte, 64 KiB.
    Expected {
        name: "ipmi-cd",
        max_blocks: 32,                       // 65 536 / 2048
        one_block_ns: 5_512_000,              // 5 000 000 + 2048 × 250
        largest_ns: 21_384_000,               // 5 000 000 + 65 536 × 250
        limit_one_byte_ns: 5_000_250,         // 5 000 000 + 250
        limit_ten_ns: 213_840_000,            // 10 × 5 000 000 + 655 360 × 250
        limit_ten_and_a_byte_ns: 218_840_250, // 11 × 5 000 000 + 655 361 × 250
    },
    // 512 B blocks, 2 ms, 150 MB/s = 6.67 ns per byte, 64 KiB.
    Expected {
        name: "hdd",
        max_blocks: 128,                     // 65 536 / 512
        one_block_ns: 2_003_413,             // 2 000 000 + ⌊512 × 1000 / 150⌋ = 3 413
        largest_ns: 2_436_906,               // 2 000 000 + ⌊65 536 × 1000 / 150⌋ = 436 906
        limit_one_byte_ns: 2_000_006,        // 2 000 000 + ⌊1 × 1000 / 150⌋ = 6
        limit_ten_ns: 24_369_066,            // 10 × 2 000 000 + ⌊655 360 × 1000 / 150⌋
        limit_ten_and_a_byte_ns: 26_369_073, // 11 × 2 000 000 + ⌊655 361 × 1000 / 150⌋
    },
    // 4096 B blocks, 25 µs, 2 GB/s = 0.5 ns per byte, 256 KiB.
    Expected {
        name: "nvme",
        max_blocks: 64,                     // 262 144 / 4096
        one_block_ns: 27_048,               // 25 000 + 4096 / 2
        largest_ns: 156_072,                // 25 000 + 262 144 / 2
        limit_one_byte_ns: 25_000,          // 25 000 + ⌊1 / 2⌋
        limit_ten_ns: 1_560_720,            // 10 × 25 000 + 2 621 440 / 2
        limit_ten_and_a_byte_ns: 1_585_720, // 11 × 25 000 + ⌊2 621 441 / 2⌋
    },
];

#[test]
fn modeled_devices_charge_latency_plus_bandwidth_and_nothing_for_refusals() {
    assert_eq!(DeviceModel::PRESETS.len(), EXPECTED.len());
    for (model, expected) in DeviceModel::PRESETS.into_iter().zip(EXPECTED) {
        assert_eq!(model.name, expected.name);
        let inner = MemoryDevice::zeroed(1024, model.block_size).unwrap();
        let mut disk = ModeledDevice::new(inner, model);
        let clock = disk.clock();
        let blocks = disk.max_transfer_blocks();
        assert_eq!(blocks, expected.max_blocks, "{}", model.name);
        let mut buf = vec![0u8; blocks as usize * model.block_size];
        disk.read_blocks(0, &mut buf).unwrap();
        let mut now = expected.largest_ns;
        assert_eq!(clock.now_ns(), now, "{}", model.name);
        // A refused transfer costs nothing.
        let mut too_big = vec![0u8; (blocks as usize + 1) * model.block_size];
        assert!(disk.read_blocks(0, &mut too_big).is_err());
        assert!(disk.write_blocks(1024, &buf[..model.block_size]).is_err());
        assert_eq!(clock.now_ns(), now, "{}", model.name);
        // Reads and writes of one block add its cost each time.
        disk.read_blocks(5, &mut buf[..model.block_size]).unwrap();
        now += expected.one_block_ns;
        assert_eq!(clock.now_ns(), now, "{}", model.name);
        disk.write_blocks(7, &buf[..model.block_size]).unwrap();
        now += expected.one_block_ns;
        assert_eq!(clock.now_ns(), now, "{}", model.name);
        let largest = model.max_transfer_bytes as u64;
        assert_eq!(model.limit_ns(0), 0, "{}", model.name);
        assert_eq!(
            model.limit_ns(1),
            expected.limit_one_byte_ns,
            "{}",
            model.name
        );
        assert_eq!(
            model.limit_ns(10 * largest),
            expected.limit_ten_ns,
            "{}",
            model.name
        );
        assert_eq!(
            model.limit_ns(10 * largest + 1),
            expected.limit_ten_and_a_byte_ns,
            "{}",
            model.name
        );
        assert_eq!(DeviceModel::preset(model.name), Some(model));
    }
}

#[test]
fn striped_sets_and_shared_caches_check_their_members() {
    let build = |blocks: usize, size: usize| MemoryDevice::zeroed(blocks, size).unwrap();
    let none: Vec<Box<dyn BlockCache>> = Vec::new();
    assert_eq!(StripedSet::new(none, 8).err(), Some(ConfigError::NoMembers));
    let mixed = vec![
        CacheKind::Hotkern.build(build(64, 512), 4096),
        CacheKind::Hotkern.build(build(32, 512), 4096),
    ];
    assert_eq!(
        StripedSet::new(mixed, 8).err(),
        Some(ConfigError::MismatchedMembers)
    );
    let pair = || {
        CacheKind::None
            .build_set(vec![build(16, 512), build(16, 512)], 0)
            .unwrap()
    };
    assert_eq!(
        StripedSet::new(pair(), 0).err(),
        Some(ConfigError::NoMembers)
    );
    assert_eq!(StripedSet::new(pair(), 17).err(), Some(ConfigError::Empty));
    assert_eq!(StripedSet::new(pair(), 5).unwrap().block_count(), 30);
    let empty: Vec<MemoryDevice> = Vec::new();
    assert!(CacheKind::Hotkern.build_set(empty, 1 << 20).is_err());
    let legacy = LegacyCache::new(build(16, 512));
    assert_eq!(
        legacy.sharing(build(16, 4096)).unwrap_err(),
        ConfigError::MismatchedMembers
    );
}

/// Benchmarks and the CLI label results with the name a cache reports:
/// each design must report the one it is chosen by.
#[test]
fn every_design_reports_the_name_it_is_chosen_by() {
    let names = ["none", "legacy", "freebsd2016", "hotkern"];
    for (kind, name) in CacheKind::ALL.into_iter().zip(names) {
        let cache = kind.build(MemoryDevice::zeroed(64, 512).unwrap(), 16 << 10);
        assert_eq!(cache.name(), name);
        assert_eq!(CacheKind::from_name(name), Some(kind));
    }
}

/// Every request counts, read or write, and a reset zeroes every counter.
#[test]
fn every_design_counts_requests_and_resets_its_counters() {
    for kind in CacheKind::ALL {
        let mut cache = kind.build(MemoryDevice::zeroed(64, 512).unwrap(), 16 << 10);
        cache.read(3, 0, &mut [0u8; 100]).unwrap();
        cache.write(5, 10, &[1u8; 100]).unwrap();
        cache.write(6, 0, &[2u8; 512]).unwrap();
        let stats = cache.stats();
        assert_eq!(stats.requests, 3, "{kind}");
        assert!(stats.device_ops >= 2, "{kind}: {stats}");
        cache.reset_stats();
        assert_eq!(cache.stats(), CacheStats::default(), "{kind}");
    }
}
