//! `bench memory --platform qemu`: the same cases on the booted x86
//! kernel. Each boot plugs a virtio-mem region whole, the kernel's owners
//! fill the given share of the size a shrink goes to (spread over every
//! plugged block, `hotkern boot --fill`), and the host asks for a quarter
//! of the region back; the figure is the kernel's own time for the shrink
//! (its summary's `vmem.shrink`), scaled to 128 MiB.

use serde_json::Value;

use crate::bench::{BenchOptions, Case, Report};
use crate::kernel::{self, BootArgs, Resizes};
use crate::progress::Progress;
use crate::statistics::median;

/// vCPUs of each boot: the driver's CPU and three readers.
const CPUS: u32 = 4;

/// One boot: the shrink's ns per 128 MiB, frames migrated, and whether
/// the kernel's checks (frames intact, none lost) all passed.
fn shrink_once(region_mib: u64, quarter_mib: u64, fill: u64) -> Result<(u64, u64, bool), String> {
    let args = BootArgs {
        hotplug: Some(region_mib),
        resize: Some(Resizes(vec![region_mib, region_mib - quarter_mib])),
        fill: Some(fill),
        no_hotplug: false,
        timeout: 300.0,
        ..BootArgs::scenario(CPUS)
    };
    let run = kernel::run_quietly(&args)?;
    let json = run.to_json();
    let vmem = &json["guest"]["vmem"];
    let shrink = &vmem["shrink"];
    let Some(per) = shrink["per_128mib_ns"].as_u64() else {
        return Err(format!(
            "the kernel reported no shrink: {}",
            vmem.to_string().chars().take(300).collect::<String>()
        ));
    };
    let clean = json["guest"]["checks"]["failed"] == 0
        && vmem["pages_lost"] == 0
        && vmem["followed"] == Value::Bool(true);
    Ok((per, shrink["migrated"].as_u64().unwrap_or(0), clean))
}

/// `bench memory --platform qemu`: `shrink/used-<fill>` for each of
/// `fills`, impl `hotkern`, each the median of `repetitions` boots.
pub fn run(options: &BenchOptions, fills: &[u64], repetitions: usize) -> Result<Report, String> {
    let (region_mib, quarter_mib) = if options.full { (512, 128) } else { (64, 16) };
    let mut report = Report::new("memory");
    report.table_figures = vec!["ms_per_128mib", "migrated", "invariants_ok"];
    let progress = Progress::steps("memory (qemu)", (fills.len() * repetitions) as u64);
    for &fill in fills {
        let name = format!("shrink/used-{fill}");
        progress.start(&name);
        let mut per = Vec::new();
        let (mut migrated, mut clean) = (0, true);
        for _ in 0..repetitions {
            let (ns, moved, ok) = shrink_once(region_mib, quarter_mib, fill)?;
            per.push(ns);
            migrated = moved;
            clean &= ok;
            progress.advance();
        }
        let ns = median(&per);
        let frames = 128 << 8;
        report.cases.push(
            Case::new(&name, "hotkern", frames)
                .ns_per_op(ns / frames as f64)
                .with("ms_per_128mib", (ns / 1e5).round() / 10.0)
                .with("shrunk_mib", quarter_mib)
                .with("migrated", migrated)
                .with("invariants_ok", clean),
        );
    }
    progress.finish();
    report.notes.push(format!(
        "the booted kernel under QEMU (TCG, {CPUS} vCPUs): a quarter ({quarter_mib} MiB) of a \
         {region_mib} MiB virtio-mem region taken back, owners holding the fill's share of the \
         size it goes to in every block; the kernel's time for the shrink (migration, grace \
         period, physmem, page tables, device), median of {repetitions}, scaled to 128 MiB"
    ));
    Ok(report)
}
