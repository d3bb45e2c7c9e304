//! `hotkern load IMAGE PATH [--device PRESET] [--cache IMPL]`: loads one
//! file from a FAT image through a cache on a modeled device, as a boot
//! loader would, and says what it cost.

use std::path::Path;
use std::time::{Duration, Instant};

use hotkern_bcache::{
    CacheKind, CacheStats, DeviceModel, FatVolume, FileDevice, ModeledDevice, LEGACY_CACHE_BYTES,
};
use sha2::{Digest, Sha256};

/// Cache memory, as FreeBSD's loader cache as of 2016 had it.
const BUDGET: usize = 16 << 20;
/// The loader reads the file in pieces of this size, as FreeBSD's loader
/// did in 2016.
const REQUEST: usize = 512;

/// Preset names `--device` accepts.
pub const DEVICES: [&str; 4] = ["usb-stick", "ipmi-cd", "hdd", "nvme"];
/// Design names `--cache` accepts.
pub const CACHES: [&str; 4] = ["none", "legacy", "freebsd2016", "hotkern"];

/// What loading a file read and what it cost.
struct Loaded {
    model: DeviceModel,
    kind: CacheKind,
    data: Vec<u8>,
    /// Fragments of the file on disk, if the FAT could be read again.
    fragments: Option<u64>,
    host: Duration,
    stats: CacheStats,
    modeled_ns: u64,
}

impl Loaded {
    /// The file's SHA-256, in hex, as `sha256sum` prints it.
    fn sha256_hex(&self) -> String {
        Sha256::digest(&self.data)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect()
    }
}

fn load(image: &Path, path: &str, device: &str, cache: &str) -> Result<Loaded, String> {
    let model = DeviceModel::preset(device).ok_or_else(|| format!("unknown device {device}"))?;
    let kind = CacheKind::from_name(cache).ok_or_else(|| format!("unknown cache {cache}"))?;
    let disk = FileDevice::open(image, model.block_size)
        .map_err(|e| format!("{}: {e}", image.display()))?;
    let modeled = ModeledDevice::new(disk, model);
    let clock = modeled.clock();
    let mut cache = kind.build(modeled, BUDGET);
    let started = Instant::now();
    let mut volume = FatVolume::mount(&mut *cache).map_err(|e| e.to_string())?;
    let entry = volume.lookup(path).map_err(|e| e.to_string())?;
    let mut data = Vec::new();
    volume
        .read_entry(&entry, REQUEST, &mut data)
        .map_err(|e| format!("{path}: {e}"))?;
    let host = started.elapsed();
    let (stats, modeled_ns) = (volume.cache().stats(), clock.now_ns());
    // Counting fragments reads the FAT again: after the figures are taken.
    let fragments = volume.fragments(&entry).ok();
    Ok(Loaded {
        model,
        kind,
        data,
        fragments,
        host,
        stats,
        modeled_ns,
    })
}

pub fn run(image: &Path, path: &str, device: &str, cache: &str) -> Result<(), String> {
    let loaded = load(image, path, device, cache)?;
    let Loaded {
        model,
        kind,
        ref data,
        fragments,
        host,
        stats,
        modeled_ns,
    } = loaded;
    let limit_ns = model.limit_ns(data.len() as u64);
    println!("file      {path}: {} bytes", data.len());
    if let Some(fragments) = fragments {
        println!("          {fragments} fragment(s) on disk");
    }
    println!(
        "device    {} ({}-byte blocks, {:.3} ms/op, {} MB/s, {} KiB per op)",
        model.name,
        model.block_size,
        model.latency_ns as f64 / 1e6,
        model.bytes_per_second / 1_000_000,
        model.max_transfer_bytes / 1024
    );
    let memory = match kind {
        CacheKind::Legacy => format!("{} KiB, fixed", LEGACY_CACHE_BYTES >> 10),
        CacheKind::None => "no memory".to_owned(),
        _ => format!("{} MiB", BUDGET >> 20),
    };
    println!("cache     {} ({memory})", kind.name());
    println!(
        "modeled   {:.3} s of device time (physical limit {:.3} s: {:.3}x)",
        modeled_ns as f64 / 1e9,
        limit_ns as f64 / 1e9,
        modeled_ns as f64 / limit_ns.max(1) as f64
    );
    println!("host      {:.3} s", host.as_secs_f64());
    println!("sha256    {}", loaded.sha256_hex());
    println!("bcachestat");
    println!("  requests            {}", stats.requests);
    println!("  bypasses            {}", stats.bypasses);
    println!("  block hits          {}", stats.block_hits);
    println!("  block misses        {}", stats.block_misses);
    println!("  read-ahead issued   {}", stats.readahead_issued);
    println!("  read-ahead consumed {}", stats.readahead_consumed);
    println!("  device ops          {}", stats.device_ops);
    println!("  device bytes        {}", stats.device_bytes);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use hotkern_bcache::image::ImageBuilder;

    /// The kernel's bytes: no two of its 512-byte pieces alike, so a
    /// piece read from the wrong place or in the wrong order shows.
    fn kernel_bytes() -> Vec<u8> {
        (0..100_003u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect()
    }

    fn image_file(name: &str) -> std::path::PathBuf {
        let mut image = ImageBuilder::new(8 << 20, None).unwrap();
        // Written 4 KiB at a time in turn with another file, so the
        // kernel's clusters are scattered as on a well-used disk.
        let other = vec![0xa5u8; 60_000];
        image
            .add_interleaved(
                &[
                    ("boot/kernel", &kernel_bytes()),
                    ("boot/loader.conf", &other),
                ],
                4096,
            )
            .unwrap();
        let path =
            std::env::temp_dir().join(format!("hotkern-load-{}-{name}.img", std::process::id()));
        std::fs::write(&path, image.finish()).unwrap();
        path
    }

    /// SHA-256 of `bytes` in hex, straight from the `sha2` crate.
    fn sha256_hex(bytes: &[u8]) -> String {
        let digest: [u8; 32] = Sha256::digest(bytes).into();
        digest.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn loads_the_files_bytes_on_every_device_with_every_cache() {
        let path = image_file("ok");
        let expected = kernel_bytes();
        let expected_sha256 = sha256_hex(&expected);
        // The hex form is SHA-256's: a fixed known answer guards the helper.
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        for device in DEVICES {
            for cache in CACHES {
                let loaded = load(&path, "boot/kernel", device, cache).unwrap();
                assert!(
                    loaded.data == expected,
                    "{device}/{cache}: {} bytes read, {} expected, first difference at {:?}",
                    loaded.data.len(),
                    expected.len(),
                    loaded.data.iter().zip(&expected).position(|(a, b)| a != b)
                );
                assert_eq!(loaded.sha256_hex(), expected_sha256, "{device}/{cache}");
                assert!(
                    loaded.fragments.is_some_and(|f| f > 1),
                    "{device}/{cache}: the file should be fragmented: {:?}",
                    loaded.fragments
                );
                run(&path, "boot/kernel", device, cache).unwrap();
            }
        }
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn bad_paths_images_and_names_are_errors() {
        let path = image_file("bad");
        assert!(run(&path, "boot/missing", "hdd", "hotkern")
            .unwrap_err()
            .contains("no such file"));
        assert!(run(&path, "boot", "hdd", "hotkern").is_err());
        assert!(run(&path, "boot/kernel", "floppy", "hotkern").is_err());
        assert!(run(&path, "boot/kernel", "hdd", "lru").is_err());
        let missing = path.with_extension("missing");
        assert!(run(&missing, "boot/kernel", "hdd", "hotkern").is_err());
        let bytes = std::fs::read(&path).unwrap();
        std::fs::write(&path, &bytes[..4096]).unwrap();
        assert!(run(&path, "boot/kernel", "hdd", "hotkern")
            .unwrap_err()
            .contains("truncated"));
        let _ = std::fs::remove_file(path);
    }
}
