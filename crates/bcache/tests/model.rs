//! Device time on the modeled presets: deterministic, so the design's
//! targets (near the device's physical limit, never slower than FreeBSD's
//! loader cache as of 2016) can be tests.

mod common;

use common::pattern;
use hotkern_bcache::image::ImageBuilder;
use hotkern_bcache::{
    BlockCache, CacheKind, DeviceModel, FatType, FatVolume, MemoryDevice, ModeledDevice, StripedSet,
};

const BUDGET: usize = 16 << 20;

fn image(file: &[u8]) -> Vec<u8> {
    let mut builder = ImageBuilder::new(48 << 20, Some(FatType::Fat32)).unwrap();
    builder.add_file("boot/kernel.bin", file).unwrap();
    builder.finish()
}

/// Modeled nanoseconds to load the file with `kind` on `model`.
fn load(bytes: Vec<u8>, model: DeviceModel, kind: CacheKind, file: &[u8]) -> (u64, Vec<u8>) {
    let mut disk = MemoryDevice::new(bytes, model.block_size).unwrap();
    let ns = {
        let modeled = ModeledDevice::new(&mut disk, model);
        let clock = modeled.clock();
        let mut cache = kind.build(modeled, BUDGET);
        let data = FatVolume::mount(&mut cache)
            .unwrap()
            .read_file("boot/kernel.bin", 512)
            .unwrap();
        assert!(data == file, "{kind} on {} loaded wrong bytes", model.name);
        clock.now_ns()
    };
    (ns, disk.into_bytes())
}

/// The physical limit for 8 MiB (8 388 608 bytes) on each preset, worked
/// out by hand from the table in `src/modeled.rs` (MB = 10^6 bytes): the
/// bytes at the bandwidth plus one latency per largest transfer.
const LIMIT_8_MIB_NS: [(&str, u64); 4] = [
    // 128 transfers of 64 KiB × 1.5 ms + 8 388 608 B × 50 ns (20 MB/s)
    // = 192 000 000 + 419 430 400
    ("usb-stick", 611_430_400),
    // 128 × 5 ms + 8 388 608 B × 250 ns (4 MB/s) = 640 000 000 + 2 097 152 000
    ("ipmi-cd", 2_737_152_000),
    // 128 × 2 ms + ⌊8 388 608 × 1000 / 150⌋ ns (150 MB/s)
    // = 256 000 000 + 55 924 053
    ("hdd", 311_924_053),
    // 32 transfers of 256 KiB × 25 µs + 8 388 608 B × 0.5 ns (2 GB/s)
    // = 800 000 + 4 194 304
    ("nvme", 4_994_304),
];

#[test]
fn hotkern_is_near_the_physical_limit_and_never_behind_freebsd_2016() {
    let file = pattern(8 << 20, 42);
    let mut bytes = image(&file);
    assert_eq!(DeviceModel::PRESETS.len(), LIMIT_8_MIB_NS.len());
    for (model, (name, limit)) in DeviceModel::PRESETS.into_iter().zip(LIMIT_8_MIB_NS) {
        assert_eq!(model.name, name);
        assert_eq!(model.limit_ns(file.len() as u64), limit, "{name}");
        let (ours, b) = load(bytes, model, CacheKind::Hotkern, &file);
        let (freebsd, b) = load(b, model, CacheKind::FreeBsd2016, &file);
        let (legacy, b) = load(b, model, CacheKind::Legacy, &file);
        bytes = b;
        assert!(
            ours as f64 <= limit as f64 * 1.10,
            "{}: hotkern {ours} ns vs limit {limit} ns",
            model.name
        );
        assert!(
            ours <= freebsd,
            "{}: hotkern {ours} > freebsd2016 {freebsd}",
            model.name
        );
        assert!(legacy > ours);
        if model.name == "usb-stick" {
            assert!(legacy >= 20 * ours, "legacy {legacy} vs hotkern {ours}");
        }
    }
}

#[test]
fn a_file_loads_from_a_striped_set_of_four() {
    let file = pattern(3 << 20, 17);
    striped_load(&file, &image(&file));
}

fn striped_load(file: &[u8], image: &[u8]) {
    let member_blocks = (image.len() / 4 / 512).next_multiple_of(128);
    let mut disks: Vec<MemoryDevice> = (0..4)
        .map(|_| MemoryDevice::zeroed(member_blocks, 512).unwrap())
        .collect();
    {
        let members = CacheKind::None
            .build_set(disks.iter_mut().collect(), 0)
            .unwrap();
        let mut set = StripedSet::new(members, 128).unwrap();
        set.write(0, 0, image).unwrap();
    }
    for kind in CacheKind::ALL {
        let members = kind.build_set(disks.iter_mut().collect(), BUDGET).unwrap();
        let mut set = StripedSet::new(members, 128).unwrap();
        let data = FatVolume::mount(&mut set)
            .unwrap()
            .read_file("boot/kernel.bin", 512)
            .unwrap();
        assert!(data == file, "{kind}");
        let stats = set.stats();
        assert!(stats.requests > (file.len() / 512) as u64);
        if kind == CacheKind::Hotkern {
            // Each member sees its share as a sequential stream.
            assert!(
                stats.device_ops < (file.len() / (32 << 10)) as u64,
                "{stats}"
            );
        }
    }
}
