//! The hotkern kernel's side of memory hotplug: the `--resize` list it is
//! given, the console line that says it follows the device, and its
//! virtio-mem figures (its summary's `"vmem"`) in the table.

use serde_json::Value;

use crate::statistics::median;

/// The console line the kernel prints when it follows `requested-size`
/// (crates/baremetal/src/runs/vmem.rs).
pub const READY: &str = "hotkern: virtio-mem ready";
/// The console line the kernel prints when it is ready for the next size
/// (its owners filled memory for a shrink): `--fill` waits for it.
pub const NEXT: &str = "hotkern: virtio-mem: ready for the next size";

/// The kernel's virtio-mem figures (its summary's `"vmem"`) as table
/// rows: the guest's time per 128 MiB moved, by part, and its audit.
pub fn guest_rows(vmem: &Value, row: &mut impl FnMut(&str, String)) {
    if let Some(error) = vmem["error"].as_str() {
        row("virtio-mem", error.to_owned());
        return;
    }
    if vmem.is_null() {
        return;
    }
    let per = &vmem["per_128mib_ns"];
    let us = |key: &str| {
        per[key]
            .as_u64()
            .map_or("?".to_owned(), |ns| format!("{:.1}", ns as f64 / 1e3))
    };
    row(
        "virtio-mem",
        format!(
            "per 128 MiB: device {} us, physmem {} us, page tables {} us, allocator {} us; {} pages lost, {} stale",
            us("device"),
            us("physmem"),
            us("tables"),
            us("allocator"),
            vmem["pages_lost"],
            vmem["stale"]
        ),
    );
    if let Some(median) = median_resize(vmem) {
        let us = |index: usize| format!("{:.1}", median[index] / 1e3);
        row(
            "",
            format!(
                "the median resize per 128 MiB (a host stall of a vCPU moves the sums above, not this): device {} us, physmem {} us, page tables {} us, allocator {} us",
                us(0),
                us(1),
                us(2),
                us(3)
            ),
        );
    }
    let config = &vmem["config_changes"];
    if config.is_object() {
        row(
            "",
            format!(
                "configuration changes by {}: {} interrupts, {} seen only by polling",
                config["route"].as_str().unwrap_or("?"),
                config["interrupts"],
                config["missed"]
            ),
        );
    }
    let lookups = &vmem["lookups"];
    if lookups.is_object() {
        row(
            "",
            format!(
                "lookups on {} CPUs: {} ns idle, {} ns during resizes (median batch {} ns, {} ns); {} of {} blocks seen half plugged",
                lookups["cpus"].as_array().map_or(0, Vec::len),
                lookups["idle_ns"],
                lookups["resizing_ns"],
                lookups["idle_median_ns"],
                lookups["resizing_median_ns"],
                lookups["half_plugged"],
                lookups["blocks_checked"]
            ),
        );
    }
}

/// Each part's guest ns per 128 MiB in the median resize (device,
/// physmem, page tables, allocator), over the resizes that moved memory;
/// `None` without any. Under TCG a vCPU the host deschedules for a time
/// slice adds milliseconds to whichever part it was in; a median of
/// resizes shows the typical cost that a sum hides.
pub fn median_resize(vmem: &Value) -> Option<[f64; 4]> {
    let resizes = vmem["resizes"].as_array()?;
    let block_bytes = u128::from(vmem["block_bytes"].as_u64()?);
    let moved: Vec<(&Value, u128)> = resizes
        .iter()
        .filter_map(|r| {
            let blocks = r["blocks"].as_i64()?.unsigned_abs();
            (blocks != 0).then(|| (r, u128::from(blocks) * block_bytes))
        })
        .collect();
    if moved.is_empty() {
        return None;
    }
    let per_128mib = |key: &str| -> Vec<u64> {
        moved
            .iter()
            .map(|&(r, bytes)| {
                let ns = u128::from(r[key].as_u64().unwrap_or(0));
                (ns * (128 << 20) / bytes) as u64
            })
            .collect()
    };
    Some(
        ["device_ns", "physmem_ns", "tables_ns", "allocator_ns"]
            .map(|key| median(&per_128mib(key))),
    )
}

/// Parses `--resize`'s list: sizes as `--memory` takes them (`128M`,
/// `1G`), each a multiple of 2 MiB (the device's block), 0 allowed, each
/// a change: the kernel counts resizes by the requested size changing, so
/// a first 0 (the size at boot) or a size repeated at once never comes.
pub fn parse_sizes(text: &str) -> Result<Vec<u64>, String> {
    let sizes = parse_each(text)?;
    let mut before = 0;
    for &mib in &sizes {
        if mib == before {
            return Err(format!(
                "--resize {text:?}: {mib} MiB is the size already asked for; each size must change it"
            ));
        }
        before = mib;
    }
    Ok(sizes)
}

fn parse_each(text: &str) -> Result<Vec<u64>, String> {
    text.split(',')
        .map(|item| {
            let item = item.trim();
            let mib = if item == "0" {
                0
            } else {
                let digits = item.trim_end_matches(|c: char| c.is_ascii_alphabetic());
                let unit = &item[digits.len()..];
                let number: u64 = digits
                    .parse()
                    .map_err(|_| format!("--resize {item:?}: expected a size like 128M or 1G"))?;
                match unit.to_ascii_lowercase().as_str() {
                    "" | "m" | "mb" | "mib" => number,
                    "g" | "gb" | "gib" => number.saturating_mul(1024),
                    _ => {
                        return Err(format!(
                            "--resize {item:?}: unknown unit {unit:?} (use M or G)"
                        ))
                    }
                }
            };
            if mib % 2 != 0 {
                return Err(format!(
                    "--resize {item:?}: not a multiple of the 2 MiB block"
                ));
            }
            Ok(mib)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_and_bad_ones_are_refused() {
        assert_eq!(parse_sizes("128M,1G,0,64"), Ok(vec![128, 1024, 0, 64]));
        assert!(parse_sizes("0,64")
            .unwrap_err()
            .contains("already asked for"));
        assert!(parse_sizes("64,64M")
            .unwrap_err()
            .contains("already asked for"));
        assert!(parse_sizes("3M").unwrap_err().contains("2 MiB"));
        assert!(parse_sizes("1T").unwrap_err().contains("unknown unit"));
        assert!(parse_sizes("lots").is_err());
        assert!(parse_sizes("").is_err());
    }

    #[test]
    fn the_median_resize_is_per_128_mib_and_skips_resizes_that_moved_nothing() {
        let resize = |blocks: i64, physmem: u64| {
            serde_json::json!({"blocks": blocks, "device_ns": 10 * blocks.unsigned_abs(),
                "physmem_ns": physmem, "tables_ns": 0, "allocator_ns": 64})
        };
        // 2 MiB blocks: 64 blocks are 128 MiB.
        let vmem = serde_json::json!({"block_bytes": 2 << 20, "resizes": [
            resize(64, 50_000), resize(-128, 60_000), resize(0, 9_000_000),
            resize(64, 9_000_000), resize(32, 40_000)]});
        let median = median_resize(&vmem).unwrap();
        // physmem per 128 MiB: 50,000, 30,000, 9,000,000, 80,000.
        assert_eq!(median[1], 65_000.0);
        assert_eq!(median[0], 640.0, "device ns scale with the blocks");
        // allocator: 64, 32, 64, 128 per 128 MiB.
        assert_eq!(median[3], 64.0);
        let none = serde_json::json!({"block_bytes": 2 << 20, "resizes": [resize(0, 1)]});
        assert_eq!(median_resize(&none), None);
    }

    #[test]
    fn the_table_says_how_configuration_changes_came() {
        let vmem = serde_json::json!({
            "per_128mib_ns": {"device": 1000, "physmem": 2000, "tables": 3000, "allocator": 4000},
            "pages_lost": 0,
            "stale": 0,
            "config_changes": {"route": "intx", "interrupts": 3, "missed": 1},
        });
        let mut rows = Vec::new();
        guest_rows(&vmem, &mut |name: &str, text: String| {
            rows.push((name.to_owned(), text))
        });
        assert!(
            rows.iter().any(|(_, text)| text
                == "configuration changes by intx: 3 interrupts, 1 seen only by polling"),
            "{rows:?}"
        );
    }
}
