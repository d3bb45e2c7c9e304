//! bcache's figures: FreeBSD's loader-cache comparison (its 2016 report
//! timed a load per device) as modeled device seconds per preset, the
//! device operations behind them, the directory walks, and the caches on
//! the kernel booted under QEMU.

use super::chart::{Axis, Bars, Chart, Marks};
use super::figure::{bars_by_impl, target, Figure};
use super::inputs::{Bench, Inputs, Problem, Source};

/// The cache designs, in the order of their history.
const CACHES: [&str; 4] = ["none", "legacy", "freebsd2016", "hotkern"];

/// bcache's figures, from `bench all` and the QEMU run.
pub fn figures(inputs: &Inputs) -> Vec<Figure> {
    let bench = inputs.bench(Source::BenchAll, "bcache");
    let qemu = inputs.bench(Source::BcacheQemu, "bcache");
    let qemu_target = target(&qemu, "legacy");
    vec![
        Figure::new(
            "bcache-load",
            "bcache: loading a file, per device",
            Source::BenchAll,
            format!(
                "Modeled device seconds to load one file from a FAT32 image in 512-byte \
                 requests, per device preset (log y), for no cache, FreeBSD's loader cache \
                 before 2016 (legacy) and after (freebsd2016), hotkern, and the physical \
                 limit (bytes ÷ bandwidth + fewest operations × latency).{}{}",
                target(&bench, "limit_s"),
                target(&bench, "legacy")
            ),
            bench
                .clone()
                .and_then(|b| seconds(&b, &["load/", "striped/"], "modeled_s")),
        ),
        Figure::new(
            "bcache-ops",
            "bcache: device operations per load",
            Source::BenchAll,
            "Device operations each cache issued for the same loads (log y): read-ahead \
             turns hundreds of thousands of 512-byte requests into about a thousand \
             transfers."
                .to_owned(),
            bench.clone().and_then(|b| operations(&b)),
        ),
        Figure::new(
            "bcache-walk",
            "bcache: walking a directory tree",
            Source::BenchAll,
            format!(
                "Modeled device seconds to read all 288 small files of a directory tree, \
                 per device (log y), with the physical limit.{}",
                target(&bench, "never above")
            ),
            bench.and_then(|b| seconds(&b, &["walk/"], "modeled_s")),
        ),
        Figure::new(
            "bcache-qemu",
            "bcache: on the kernel booted under QEMU",
            Source::BcacheQemu,
            format!(
                "The same caches in the hotkern kernel under QEMU, reading through \
                 virtio-blk throttled to each device's model: guest seconds per case \
                 (log y), beside the modeled device's limit.{qemu_target}"
            ),
            qemu.and_then(|b| seconds(&b, &[""], "guest_s")),
        ),
    ]
}

/// `key` (seconds) of every cache for the cases starting with one of
/// `prefixes`, and the limit hotkern's case records.
fn seconds(bench: &Bench<'_>, prefixes: &[&str], key: &str) -> Result<Chart, Problem> {
    let names: Vec<String> = prefixes.iter().flat_map(|p| bench.names(p)).collect();
    let names: Vec<String> = names
        .into_iter()
        .filter(|name| bench.figure(name, "hotkern", key).is_some())
        .collect();
    if names.is_empty() {
        return Err(bench.lacks(&format!("case with hotkern's {key}")));
    }
    // The caches these cases measured (the QEMU run has no `none`).
    let caches = CACHES.iter().filter(|cache| {
        names
            .iter()
            .any(|name| bench.figure(name, cache, key).is_some())
    });
    let caches: Vec<&str> = caches.copied().collect();
    let mut series = bars_by_impl(bench, &caches, &names, key);
    series.push(Bars {
        name: "physical limit".to_owned(),
        values: names
            .iter()
            .map(|name| bench.figure(name, "hotkern", "limit_s"))
            .collect(),
    });
    Ok(Chart {
        x: Axis::linear(""),
        // The modeled devices' virtual clock, or the guest's TSC under QEMU.
        y: Axis::log(if key == "guest_s" {
            "guest seconds"
        } else {
            "modeled device seconds"
        }),
        marks: Marks::Grouped {
            categories: names.iter().map(|n| n.replacen('/', "\n", 1)).collect(),
            series,
        },
        note: None,
    })
}

fn operations(bench: &Bench<'_>) -> Result<Chart, Problem> {
    let names: Vec<String> = ["load/", "striped/"]
        .iter()
        .flat_map(|p| bench.names(p))
        .collect();
    if names.is_empty() {
        return Err(bench.lacks("load/* cases"));
    }
    let series = bars_by_impl(bench, &CACHES, &names, "device_ops");
    Ok(Chart {
        x: Axis::linear(""),
        y: Axis::log("device operations"),
        marks: Marks::Grouped {
            categories: names.iter().map(|n| n.replacen('/', "\n", 1)).collect(),
            series,
        },
        note: None,
    })
}
