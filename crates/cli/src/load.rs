//! `hotkern load IMAGE PATH [--device PRESET] [--cache IMPL]`: loads one
//! file from a FAT image through a cache on a modeled device, as a boot
//! loader would, and says what it cost.

use std::path::Path;
use std::time::Instant;

use hotkern_bcache::{
    CacheKind, DeviceModel, FatVolume, FileDevice, ModeledDevice, LEGACY_CACHE_BYTES,
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

pub fn run(image: &Path, path: &str, device: &str, cache: &str) -> Result<(), String> {
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
    let limit_ns = model.limit_ns(data.len() as u64);
    let digest = Sha256::digest(&data);
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
    println!(
        "sha256    {}",
        digest
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    );
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

    fn image_file(name: &str) -> std::path::PathBuf {
        let mut image = ImageBuilder::new(8 << 20, None).unwrap();
        image.add_file("boot/kernel", &[7u8; 100_000]).unwrap();
        let path =
            std::env::temp_dir().join(format!("hotkern-load-{}-{name}.img", std::process::id()));
        std::fs::write(&path, image.finish()).unwrap();
        path
    }

    #[test]
    fn loads_on_every_device_with_every_cache() {
        let path = image_file("ok");
        for device in DEVICES {
            for cache in CACHES {
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
