//! Devices, their geometry checks, and every construction error.

use hotkern_bcache::{
    BlockCache, BlockDevice, CacheKind, ConfigError, DeviceModel, FileDevice, IoError, LegacyCache,
    MemoryDevice, ModeledDevice, StripedSet,
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

#[test]
fn modeled_devices_charge_latency_plus_bandwidth_and_nothing_for_refusals() {
    for model in DeviceModel::PRESETS {
        let inner = MemoryDevice::zeroed(1024, model.block_size).unwrap();
        let mut disk = ModeledDevice::new(inner, model);
        let clock = disk.clock();
        let blocks = disk.max_transfer_blocks() as usize;
        assert_eq!(
            blocks * model.block_size,
            model.max_transfer_bytes.min(1 << 20)
        );
        let mut buf = vec![0u8; blocks * model.block_size];
        disk.read_blocks(0, &mut buf).unwrap();
        assert_eq!(clock.now_ns(), model.cost_ns(buf.len() as u64));
        let mut too_big = vec![0u8; (blocks + 1) * model.block_size];
        assert!(disk.read_blocks(0, &mut too_big).is_err());
        assert_eq!(clock.now_ns(), model.cost_ns(buf.len() as u64));
        // The limit: whole transfers at full bandwidth.
        let limit = model.limit_ns(10 * model.max_transfer_bytes as u64);
        // (Per-operation costs round down to whole nanoseconds.)
        let ten_ops = 10 * model.cost_ns(model.max_transfer_bytes as u64);
        assert!(
            limit >= ten_ops && limit - ten_ops < 10,
            "{limit} vs {ten_ops}"
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
