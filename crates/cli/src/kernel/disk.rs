//! `hotkern boot --disk IMAGE --load PATH`: the host reads the same file
//! from the image (through bcache's FAT reader on the image file) to know
//! what the kernel must have loaded, then reports the kernel's load as a
//! table row and as the JSON's top-level `"load"` object.

use std::path::Path;

use hotkern_bcache::image::ImageBuilder;
use hotkern_bcache::{CacheKind, FatVolume, FileDevice};
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The scratch image's name in the output directory, and the file the
/// default scenario loads from it.
pub const SCRATCH_IMAGE: &str = "disk.img";
/// The file in the scratch image.
pub const SCRATCH_FILE: &str = "boot/kernel/kernel";
/// Files with long names, spaces and non-ASCII in the scratch image, for
/// `--load`/`--walk` without `--disk`: every FAT path must reach the
/// kernel (percent-encoded on its command line).
pub const SCRATCH_NAMED_FILES: [(&str, usize); 2] = [
    ("Boot Files/Kernel Image.elf", 300 << 10),
    ("Données/été.txt", 5000),
];

/// Writes the scratch image: a 16 MiB FAT volume holding a 1 MiB file of
/// seeded pseudo-random bytes (the same on every run) and the
/// [`SCRATCH_NAMED_FILES`].
pub fn write_scratch_image(image: &Path) -> Result<(), String> {
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let mut bytes = |count: usize| -> Vec<u8> {
        (0..count)
            .map(|_| {
                // xorshift64: reproducible bytes without a generator crate here.
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                (state >> 32) as u8
            })
            .collect()
    };
    let mut builder =
        ImageBuilder::new(16 << 20, None).map_err(|e| format!("scratch image: {e}"))?;
    builder
        .add_file(SCRATCH_FILE, &bytes(1 << 20))
        .map_err(|e| format!("scratch image: {e}"))?;
    for (path, size) in SCRATCH_NAMED_FILES {
        builder
            .add_file(path, &bytes(size))
            .map_err(|e| format!("scratch image: {path}: {e}"))?;
    }
    std::fs::write(image, builder.finish()).map_err(|e| format!("{}: {e}", image.display()))
}

/// The SHA-256 (hex) of `path` in the FAT image `image`.
pub fn expected_sha256(image: &Path, path: &str) -> Result<String, String> {
    expected(image, path, false)
}

/// The SHA-256 (hex) of every file under the directory `path` in the FAT
/// image `image`, depth first in on-disk order, as the kernel's `walk=`
/// reads them.
pub fn expected_walk_sha256(image: &Path, path: &str) -> Result<String, String> {
    expected(image, path, true)
}

/// The host's read of what the kernel reads: the file `path`, or with
/// `tree` the files under it, hashed in the order they come.
fn expected(image: &Path, path: &str, tree: bool) -> Result<String, String> {
    let disk = FileDevice::open(image, 512).map_err(|e| format!("{}: {e}", image.display()))?;
    let mut cache = CacheKind::None.build(disk, 0);
    let mut volume =
        FatVolume::mount(&mut *cache).map_err(|e| format!("{}: {e}", image.display()))?;
    let mut hasher = Sha256::new();
    let read = if tree {
        volume
            .walk(path, 1 << 16, |_, data| hasher.update(data))
            .map(drop)
    } else {
        volume.lookup(path).and_then(|entry| {
            let mut data = Vec::new();
            volume.read_entry(&entry, 1 << 16, &mut data)?;
            hasher.update(&data);
            Ok(())
        })
    };
    read.map_err(|e| format!("{path}: {e}"))?;
    Ok(hex(&hasher.finalize()))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The top-level `"load"` (or `"walk"`, as `key` says): the kernel's
/// object of that name with `sha256_ok`
/// (against `expected`) and `expected_sha256` added; `null` without a
/// load.
pub fn top_level(
    summary: Option<&Value>,
    key: &str,
    expected: Option<&Result<String, String>>,
) -> Value {
    let guest = summary
        .map(|summary| &summary[key])
        .filter(|l| !l.is_null());
    let (Some(guest), Some(expected)) = (guest, expected) else {
        return Value::Null;
    };
    let mut load = guest.clone();
    if let Value::Object(object) = &mut load {
        match expected {
            Ok(sha) => {
                let ok = guest["sha256"].as_str() == Some(sha.as_str());
                object.insert("sha256_ok".into(), ok.into());
                object.insert("expected_sha256".into(), sha.clone().into());
            }
            Err(error) => {
                object.insert("sha256_ok".into(), false.into());
                object.insert("expected_error".into(), error.clone().into());
            }
        }
    }
    load
}

/// Whether a load was asked for and did not bring the right bytes.
pub fn failed(load: &Value) -> Option<String> {
    if load.is_null() {
        return None;
    }
    if let Some(error) = load["error"].as_str() {
        return Some(format!("the kernel's load failed: {error}"));
    }
    (load["sha256_ok"] != true).then(|| {
        format!(
            "the kernel loaded {} with SHA-256 {}, the image holds {}",
            load["path"].as_str().unwrap_or("?"),
            load["sha256"].as_str().unwrap_or("?"),
            load["expected_sha256"]
                .as_str()
                .or(load["expected_error"].as_str())
                .unwrap_or("?")
        )
    })
}

/// The table rows, named `label` (`load` or `walk`).
pub fn rows(label: &str, load: &Value, row: &mut impl FnMut(&str, String)) {
    if load.is_null() {
        return;
    }
    if let Some(error) = load["error"].as_str() {
        row(label, format!("failed: {error}"));
        return;
    }
    let number = |key: &str| load[key].as_u64().unwrap_or(0);
    row(
        label,
        format!(
            "{}: {}{} bytes in {:.1} ms through the {} cache; SHA-256 {}",
            load["path"].as_str().unwrap_or("?"),
            load["files"]
                .as_u64()
                .map_or_else(String::new, |files| format!("{files} files, ")),
            number("bytes"),
            load["seconds"].as_f64().unwrap_or(0.0) * 1e3,
            load["cache"].as_str().unwrap_or("?"),
            if load["sha256_ok"] == true {
                "matches the image"
            } else {
                "DIFFERS from the image"
            }
        ),
    );
    let stats = &load["stats"];
    let stat = |key: &str| stats[key].as_u64().unwrap_or(0);
    row(
        "",
        format!(
            "virtio-blk: {} requests, {:.1} ms waiting (queue {}, {} segments); \
             cache: {} hits, {} misses, {} read ahead",
            number("device_requests"),
            number("device_ns") as f64 / 1e6,
            number("queue_size"),
            number("max_segments"),
            stat("block_hits"),
            stat("block_misses"),
            stat("readahead_issued"),
        ),
    );
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn guest(sha: &str) -> Value {
        json!({"load": {"path": "boot/k", "cache": "hotkern", "bytes": 3000, "sha256": sha,
            "seconds": 0.0125, "device_requests": 4, "device_ns": 2_500_000, "queue_size": 256,
            "max_segments": 254, "stats": {"block_hits": 5, "block_misses": 2, "readahead_issued": 7}}})
    }

    #[test]
    fn the_host_reads_the_same_file_from_the_image() {
        let dir = std::env::temp_dir().join(format!("hotkern-disk-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let image = dir.join("disk.img");
        let data: Vec<u8> = (0..3000u32).map(|i| (i * 7) as u8).collect();
        let mut builder = ImageBuilder::new(16 << 20, None).unwrap();
        builder.add_file("boot/k", &data).unwrap();
        std::fs::write(&image, builder.finish()).unwrap();
        assert_eq!(
            expected_sha256(&image, "boot/k").unwrap(),
            hex(&Sha256::digest(&data))
        );
        assert!(expected_sha256(&image, "boot/missing").is_err());
        assert!(expected_sha256(&dir.join("none.img"), "boot/k").is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_scratch_image_holds_the_same_megabyte_every_time() {
        let dir = std::env::temp_dir().join(format!("hotkern-scratch-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (a, b) = (dir.join("a.img"), dir.join("b.img"));
        write_scratch_image(&a).unwrap();
        write_scratch_image(&b).unwrap();
        let sha = expected_sha256(&a, SCRATCH_FILE).unwrap();
        assert_eq!(sha, expected_sha256(&b, SCRATCH_FILE).unwrap());
        // Not the hash of a megabyte of zeros: the bytes are really there.
        assert_ne!(sha, hex(&Sha256::digest(vec![0u8; 1 << 20])));
        assert_eq!(std::fs::metadata(&a).unwrap().len(), 16 << 20);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_load_is_right_only_when_the_checksums_agree() {
        let good = top_level(Some(&guest("ab")), "load", Some(&Ok("ab".into())));
        assert_eq!(
            (good["sha256_ok"].clone(), failed(&good)),
            (json!(true), None)
        );
        let bad = top_level(Some(&guest("ab")), "load", Some(&Ok("cd".into())));
        assert_eq!(bad["sha256_ok"], false);
        assert!(failed(&bad).unwrap().contains("the image holds cd"));
        let unread = top_level(
            Some(&guest("ab")),
            "load",
            Some(&Err("no such file".into())),
        );
        assert!(failed(&unread).unwrap().contains("no such file"));
        let error = top_level(
            Some(&json!({"load": {"error": "disk: none"}})),
            "load",
            Some(&Ok("ab".into())),
        );
        assert!(failed(&error).unwrap().contains("disk: none"));
        assert!(top_level(Some(&json!({"load": null})), "load", Some(&Ok("ab".into()))).is_null());
        assert!(top_level(Some(&guest("ab")), "load", None).is_null());
    }

    #[test]
    fn rows_say_what_came_back_and_what_it_cost() {
        let load = top_level(Some(&guest("ab")), "load", Some(&Ok("ab".into())));
        let mut out = Vec::new();
        rows("load", &load, &mut |name: &str, value: String| {
            out.push(format!("{name}|{value}"))
        });
        assert_eq!(
            out,
            [
                "load|boot/k: 3000 bytes in 12.5 ms through the hotkern cache; SHA-256 matches the image",
                "|virtio-blk: 4 requests, 2.5 ms waiting (queue 256, 254 segments); cache: 5 hits, 2 misses, 7 read ahead",
            ]
        );
    }
}
