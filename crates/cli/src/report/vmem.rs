//! The memory-device figures, from `hotkern boot --hotplug … --resize …
//! [--linux] --json`: how long each virtio-mem resize took until QEMU saw
//! the guest reach it, hotkern beside Linux on the same QEMU, and where
//! the hotkern kernel's time per 128 MiB goes.

use serde_json::Value;

use super::chart::{Axis, Bars, Chart, Marks};
use super::figure::Figure;
use super::inputs::{Inputs, Problem, Source};

/// The parts of the kernel's time per 128 MiB (its summary's
/// `vmem.per_128mib_ns`), with what each is.
const PARTS: [(&str, &str); 4] = [
    ("device", "device (virtio-mem requests)"),
    ("physmem", "physmem plug/unplug"),
    ("tables", "page tables"),
    ("allocator", "frame allocator"),
];

/// The memory-device figures.
pub fn figures(inputs: &Inputs) -> Vec<Figure> {
    let boot = inputs.document(Source::Boot);
    let anchor = match &boot {
        Ok(boot)
            if boot["linux"]["resizes"]
                .as_array()
                .is_none_or(Vec::is_empty) =>
        {
            " No Linux bars: boot.json was written without --linux, or Linux made no resize."
        }
        _ => "",
    };
    vec![
        Figure::new(
            "vmem-resize",
            "memory devices: virtio-mem resize latency",
            Source::Boot,
            format!(
                "Milliseconds from the host's QMP request to QEMU's device size reaching \
                 it (log y), for each resize in turn, the hotkern kernel beside Debian's \
                 Linux on the same QEMU configuration (a missing bar: the size was not \
                 reached).{anchor}"
            ),
            boot.clone().and_then(resizes),
        ),
        Figure::new(
            "vmem-parts",
            "memory devices: time per 128 MiB, by part",
            Source::Boot,
            "Microseconds the hotkern kernel spends per 128 MiB plugged or unplugged, \
             stacked by part, as its own TSC timed them."
                .to_owned(),
            boot.and_then(parts),
        ),
    ]
}

fn latencies(resizes: &Value) -> Vec<(u64, Option<f64>)> {
    resizes
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            (
                r["requested_mib"].as_u64().unwrap_or(0),
                r["latency_ms"].as_f64(),
            )
        })
        .collect()
}

fn resizes(boot: &Value) -> Result<Chart, Problem> {
    let hotkern = latencies(&boot["resizes"]);
    if hotkern.is_empty() {
        let why = boot["resize_error"]
            .as_str()
            .unwrap_or("no resizes (--resize not given)");
        return Err(Problem::Lacks(Source::Boot, format!("resizes: {why}")));
    }
    let mut series = vec![Bars {
        name: "hotkern".to_owned(),
        values: hotkern.iter().map(|(_, ms)| *ms).collect(),
    }];
    let linux = latencies(&boot["linux"]["resizes"]);
    if !linux.is_empty() {
        series.push(Bars {
            name: "Linux".to_owned(),
            values: (0..hotkern.len())
                .map(|i| linux.get(i).and_then(|(_, ms)| *ms))
                .collect(),
        });
    }
    Ok(Chart {
        x: Axis::linear(""),
        // Linux takes 10 to 1,000 times as long on some steps: log y.
        y: Axis::log("ms until the size is reached"),
        marks: Marks::Grouped {
            categories: hotkern
                .iter()
                .enumerate()
                .map(|(i, (mib, _))| format!("step {}\n→ {mib} MiB", i + 1))
                .collect(),
            series,
        },
        note: None,
    })
}

fn parts(boot: &Value) -> Result<Chart, Problem> {
    let vmem = &boot["guest"]["vmem"];
    if let Some(error) = vmem["error"].as_str() {
        return Err(Problem::Lacks(
            Source::Boot,
            format!("virtio-mem figures: {error}"),
        ));
    }
    let per = &vmem["per_128mib_ns"];
    if !per.is_object() {
        return Err(Problem::Lacks(
            Source::Boot,
            "guest.vmem.per_128mib_ns (boot without --hotplug?)".to_owned(),
        ));
    }
    let series = PARTS
        .iter()
        .map(|(key, label)| Bars {
            name: (*label).to_owned(),
            values: vec![per[key].as_f64().map(|ns| ns / 1e3)],
        })
        .collect();
    Ok(Chart {
        x: Axis::linear(""),
        y: Axis::linear("µs per 128 MiB"),
        marks: Marks::Stacked {
            categories: vec!["hotkern kernel".to_owned()],
            series,
        },
        note: None,
    })
}
