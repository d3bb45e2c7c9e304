//! `hotkern bench bcache --platform qemu`: the load and walk cases on the
//! kernel's virtio-blk disk, for every device profile and cache design.
//! Each run boots the kernel (without its hotplug scenario) with the image
//! attached under the profile's QEMU throttling and reads the file as a
//! boot loader does, then, through a fresh cache, every module of the
//! image's tree (freebsd2016 and hotkern only: without read-ahead the
//! 11,000 small requests of a walk take a minute or more on the slow
//! profiles); the guest's TSC times each, and the host checks the bytes'
//! SHA-256 against its own read of the image.
//!
//! Throttling is a rate, not a latency: QEMU lets a burst of about a tenth
//! of a second's operations and bytes through before it holds requests
//! back, so a file that fits the burst loads faster than the profile's
//! physical limit. The notes say so beside the targets.

use std::path::Path;

use hotkern_bcache::{CacheKind, DeviceModel};
use serde_json::Value;

use super::super::{Case, Report};
use crate::kernel::{self, BootArgs};

/// The file the quick run's loader reads: small enough for a quick run
/// and for the default guest's heap (which also holds the 4 MiB cache).
const FILE_BYTES: usize = 1 << 20;
/// The long run's file: FreeBSD's loader cache report's 270 MB, in a
/// guest whose heap (half its 1 GiB) holds it.
const FULL_FILE_BYTES: usize = 270_000_000;
const FULL_MEMORY_MIB: u64 = 1024;

/// Boots once per profile and cache design and reports every load; with
/// `full`, the 270 MB file for the two designs that load it in minutes
/// (without read-ahead, `none` and `legacy` would take hours under the
/// slow profiles' throttling).
pub fn run(full: bool) -> Result<Report, String> {
    let file_bytes = if full { FULL_FILE_BYTES } else { FILE_BYTES };
    let dir = std::env::temp_dir().join(format!("hotkern-bench-disk-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let image = dir.join("disk.img");
    let built = super::image::build_image(file_bytes)?;
    std::fs::write(&image, &built.bytes).map_err(|e| format!("{}: {e}", image.display()))?;
    let result = measure(&image, file_bytes, built.tree_bytes, full);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// The case name of a load of `bytes`.
fn load_name(bytes: usize) -> String {
    if bytes >= 100 << 20 {
        format!("load-{}MB", bytes / 1_000_000)
    } else {
        format!("load-{}MiB", bytes >> 20)
    }
}

fn measure(image: &Path, file_bytes: usize, tree_bytes: u64, full: bool) -> Result<Report, String> {
    let mut report = Report::new("bcache");
    report.table_figures = vec![
        "guest_s",
        "limit_s",
        "over_limit",
        "copy_floor_s",
        "device_ops",
        "sha256_ok",
    ];
    let name = load_name(file_bytes);
    let kinds: &[CacheKind] = if full {
        &[CacheKind::FreeBsd2016, CacheKind::Hotkern]
    } else {
        &CacheKind::ALL
    };
    for model in DeviceModel::PRESETS {
        for &kind in kinds {
            let mut args = if full {
                BootArgs::scenario(1).with_memory(FULL_MEMORY_MIB, 900.0)
            } else {
                BootArgs::scenario(1)
            };
            args.set_disk(image, super::image::FILE_PATH, model.name, kind.name());
            let walks = matches!(kind, CacheKind::FreeBsd2016 | CacheKind::Hotkern);
            if walks {
                args.set_walk(super::image::TREE);
            }
            let run = kernel::run_quietly(&args)?;
            let document = run.to_json();
            if !run.outcome.is_success() {
                return Err(format!(
                    "{} through {}: {}",
                    model.name,
                    kind.name(),
                    run.failure_message()
                ));
            }
            report
                .cases
                .push(case(&document["load"], &name, &model, kind)?);
            if walks {
                report
                    .cases
                    .push(walk_case(&document["walk"], tree_bytes, &model, kind)?);
            }
        }
    }
    for model in DeviceModel::PRESETS {
        let case = format!("{name}/{}", model.name);
        report.ratio(
            &format!("{name}-{}/freebsd2016_over_hotkern", model.name),
            &case,
            "guest_s",
            "freebsd2016",
            "hotkern",
        );
        report.ratio(
            &format!("{name}-{}/legacy_over_hotkern", model.name),
            &case,
            "guest_s",
            "legacy",
            "hotkern",
        );
        report.ratio(
            &format!("walk-{}/freebsd2016_over_hotkern", model.name),
            &format!("walk/{}", model.name),
            "guest_s",
            "freebsd2016",
            "hotkern",
        );
    }
    report.notes.extend(notes(&report, &name));
    Ok(report)
}

/// One load as a case, or why the load is not a result.
fn case(load: &Value, name: &str, model: &DeviceModel, kind: CacheKind) -> Result<Case, String> {
    let bytes = load["bytes"].as_u64().unwrap_or(0);
    let case = read_case(load, name, bytes, model, kind)?;
    Ok(case.with(
        "copy_floor_s",
        load["copy_floor_seconds"].as_f64().unwrap_or(0.0),
    ))
}

/// One walk as a case, against the physical limit of the tree's bytes;
/// a walk that read other than the whole tree is not a result.
fn walk_case(
    walk: &Value,
    tree_bytes: u64,
    model: &DeviceModel,
    kind: CacheKind,
) -> Result<Case, String> {
    let case = read_case(walk, "walk", tree_bytes, model, kind)?;
    if walk["bytes"].as_u64() != Some(tree_bytes) {
        return Err(format!(
            "walk on {} through {}: {} bytes read, the tree holds {tree_bytes}",
            model.name,
            kind.name(),
            walk["bytes"]
        ));
    }
    Ok(case.with("files", walk["files"].as_u64().unwrap_or(0)))
}

/// The figures a load and a walk share: guest time against the profile's
/// physical limit for `bytes`, device operations, the SHA-256 check.
fn read_case(
    read: &Value,
    name: &str,
    bytes: u64,
    model: &DeviceModel,
    kind: CacheKind,
) -> Result<Case, String> {
    if let Some(problem) = crate::kernel::load_failure(read) {
        return Err(format!(
            "{name} on {} through {}: {problem}",
            model.name,
            kind.name()
        ));
    }
    let seconds = read["seconds"].as_f64().unwrap_or(0.0);
    let limit = model.limit_ns(bytes) as f64 / 1e9;
    Ok(Case::new(
        format!("{name}/{}", model.name),
        kind.name(),
        read["stats"]["requests"].as_u64().unwrap_or(0),
    )
    .with("guest_s", seconds)
    .with("limit_s", limit)
    .with("over_limit", seconds / limit.max(f64::MIN_POSITIVE))
    .with("device_ops", read["device_requests"].as_u64().unwrap_or(0))
    .with("sha256_ok", read["sha256_ok"] == true))
}

/// The kernel issue's targets for the disk, from the cases.
fn notes(report: &Report, name: &str) -> Vec<String> {
    let figure = |profile: &str, cache: &str, key: &str| {
        report
            .case(&format!("{name}/{profile}"), cache)
            .and_then(|c| c.figure(key))
    };
    let mut within = Vec::new();
    let mut slower = Vec::new();
    let mut walks_slower = Vec::new();
    let mut floored = Vec::new();
    for model in DeviceModel::PRESETS {
        if let Some(over) = figure(model.name, "hotkern", "over_limit") {
            within.push(format!("{} {over:.2}x", model.name));
        }
        if let (Some(floor), Some(limit)) = (
            figure(model.name, "hotkern", "copy_floor_s"),
            figure(model.name, "hotkern", "limit_s"),
        ) {
            if floor > 1.10 * limit {
                floored.push(format!(
                    "{} (copy floor {:.3} ms, limit {:.3} ms)",
                    model.name,
                    floor * 1e3,
                    limit * 1e3
                ));
            }
        }
        if let (Some(ours), Some(theirs)) = (
            figure(model.name, "hotkern", "guest_s"),
            figure(model.name, "freebsd2016", "guest_s"),
        ) {
            if ours > theirs {
                slower.push(model.name);
            }
        }
        let walk = |cache: &str| {
            report
                .case(&format!("walk/{}", model.name), cache)
                .and_then(|c| c.figure("guest_s"))
        };
        if let (Some(ours), Some(theirs)) = (walk("hotkern"), walk("freebsd2016")) {
            if ours > theirs {
                walks_slower.push(model.name);
            }
        }
    }
    let legacy = match (
        figure("usb-stick", "legacy", "guest_s"),
        figure("usb-stick", "hotkern", "guest_s"),
    ) {
        (Some(legacy), Some(ours)) if ours > 0.0 => {
            let ratio = legacy / ours;
            format!(
                "{ratio:.1}x (goal >= 20x) {}",
                if ratio >= 20.0 { "met" } else { "missed" }
            )
        }
        _ => "not measured".to_owned(),
    };
    vec![
        format!(
            "platform qemu: a {} file over virtio-blk under each profile's QEMU throttling \
             (iops = 1 / latency, bps = bandwidth, the profile's block size and largest \
             transfer), timed by the guest's TSC; throttling lets ~0.1 s of I/O through as a \
             burst, so loads that fit it beat the physical limit",
            name.trim_start_matches("load-")
        ),
        format!(
            "hotkern over each profile's physical limit: {}",
            within.join(", ")
        ),
        if floored.is_empty() {
            "the guest copies the file within 1.10x of every profile's limit".to_owned()
        } else {
            format!(
                "out of reach of 1.10x the limit on this platform: {}: the guest alone \
                 takes longer than that to copy the file in 512-byte requests",
                floored.join(", ")
            )
        },
        format!(
            "target hotkern never slower than freebsd2016: {}",
            if slower.is_empty() {
                "met".to_owned()
            } else {
                format!("missed on {}", slower.join(", "))
            }
        ),
        format!("target legacy >= 20x slower than hotkern on usb-stick: {legacy}"),
        format!(
            "walk: hotkern at or below freebsd2016 on every profile: {}",
            if walks_slower.is_empty() {
                "yes".to_owned()
            } else {
                format!("no ({})", walks_slower.join(", "))
            }
        ),
    ]
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn load(seconds: f64, sha_ok: bool) -> Value {
        json!({"path": "boot/kernel/kernel", "bytes": 1 << 20, "seconds": seconds,
               "copy_floor_seconds": 0.001, "device_requests": 25, "sha256_ok": sha_ok, "sha256": "ab",
               "expected_sha256": if sha_ok { "ab" } else { "cd" },
               "stats": {"requests": 2324}})
    }

    #[test]
    fn a_load_becomes_a_case_against_the_profiles_limit() {
        let usb = DeviceModel::USB_STICK;
        let case = case(&load(0.1528, true), "load-1MiB", &usb, CacheKind::Hotkern).unwrap();
        assert_eq!(
            (case.name.as_str(), case.implementation.as_str()),
            ("load-1MiB/usb-stick", "hotkern")
        );
        assert_eq!(case.ops, 2324);
        // 16 operations of 64 KiB at 1.5 ms, and 1 MiB at 20 MB/s.
        let limit = (16.0 * 1.5e6 + (1u64 << 20) as f64 * 1e9 / 20e6) / 1e9;
        assert!((case.figure("limit_s").unwrap() - limit).abs() < 1e-9);
        assert!((case.figure("over_limit").unwrap() - 0.1528 / limit).abs() < 1e-9);
        assert_eq!(case.figure("device_ops"), Some(25.0));
        let wrong =
            super::case(&load(0.1, false), "load-1MiB", &usb, CacheKind::Legacy).unwrap_err();
        assert!(wrong.contains("usb-stick through legacy"), "{wrong}");
        assert!(super::case(&Value::Null, "load-1MiB", &usb, CacheKind::None).is_err());
        assert_eq!(load_name(270_000_000), "load-270MB");
        assert_eq!(load_name(1 << 20), "load-1MiB");
    }

    #[test]
    fn notes_tell_each_target_from_the_cases() {
        let mut report = Report::new("bcache");
        let usb = DeviceModel::USB_STICK;
        for (kind, seconds) in [
            (CacheKind::Legacy, 3.0),
            (CacheKind::FreeBsd2016, 0.08),
            (CacheKind::Hotkern, 0.1),
        ] {
            report
                .cases
                .push(case(&load(seconds, true), "load-1MiB", &usb, kind).unwrap());
        }
        let notes = notes(&report, "load-1MiB").join("\n");
        assert!(notes.contains("target hotkern never slower than freebsd2016: missed on usb-stick"));
        assert!(notes
            .contains("legacy >= 20x slower than hotkern on usb-stick: 30.0x (goal >= 20x) met"));
        assert!(notes.contains("usb-stick 1.31x"), "{notes}");
        assert!(
            notes.contains("the guest copies the file within 1.10x"),
            "{notes}"
        );
    }

    #[test]
    fn a_walk_is_a_case_against_the_trees_limit_and_must_read_the_whole_tree() {
        let hdd = DeviceModel::HDD;
        let walk = |bytes: u64, seconds: f64| {
            json!({"path": "/boot/modules", "bytes": bytes, "files": 288, "seconds": seconds,
                   "device_requests": 40, "sha256_ok": true, "sha256": "ab",
                   "expected_sha256": "ab", "stats": {"requests": 11_068}})
        };
        let ours = walk_case(&walk(4_000_000, 0.2), 4_000_000, &hdd, CacheKind::Hotkern).unwrap();
        assert_eq!(ours.name, "walk/hdd");
        assert_eq!(ours.figure("files"), Some(288.0));
        let limit = hdd.limit_ns(4_000_000) as f64 / 1e9;
        assert!((ours.figure("over_limit").unwrap() - 0.2 / limit).abs() < 1e-9);
        let short = walk_case(&walk(3_999_999, 0.2), 4_000_000, &hdd, CacheKind::Hotkern);
        assert!(short.unwrap_err().contains("3999999 bytes read"));
        let theirs = walk_case(
            &walk(4_000_000, 0.1),
            4_000_000,
            &hdd,
            CacheKind::FreeBsd2016,
        )
        .unwrap();
        let mut report = Report::new("bcache");
        report.cases.extend([ours, theirs]);
        let notes = notes(&report, "load-1MiB").join("\n");
        assert!(
            notes.contains("walk: hotkern at or below freebsd2016 on every profile: no (hdd)"),
            "{notes}"
        );
    }

    #[test]
    fn a_copy_floor_over_the_limit_is_named() {
        let mut report = Report::new("bcache");
        let nvme = DeviceModel::NVME;
        let mut slow = load(0.01, true);
        slow["copy_floor_seconds"] = json!(0.005);
        assert!(
            (case(&slow, "load-1MiB", &nvme, CacheKind::Hotkern)
                .unwrap()
                .figure("copy_floor_s")
                .unwrap()
                - 0.005)
                .abs()
                < 1e-12
        );
        report
            .cases
            .push(case(&slow, "load-1MiB", &nvme, CacheKind::Hotkern).unwrap());
        let notes = notes(&report, "load-1MiB").join("\n");
        assert!(
            notes.contains(
                "out of reach of 1.10x the limit on this platform: nvme (copy floor 5.000 ms"
            ),
            "{notes}"
        );
    }
}
