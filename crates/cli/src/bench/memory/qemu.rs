//! `bench memory --platform qemu`: the same cases on the booted x86
//! kernel. Each boot plugs a virtio-mem region whole, the kernel's owners
//! fill the given share of the size a shrink goes to (spread over every
//! plugged block, `hotkern boot --fill`), and the host asks for a quarter
//! of the region back; the figure is the kernel's own time for the shrink
//! (its summary's `vmem.shrink`), scaled to 128 MiB, and the host's time
//! from the QMP request until the device's `size` reached it. With
//! `--linux`, Debian's Linux makes the same shrinks ([`super::linux`]),
//! timed on the host the same way. Then a 256 MiB guest grows by a whole
//! device and back ([`super::grow`], Linux's in [`super::linux_grow`]).

use serde_json::Value;

use super::linux_grow::{self, Memmap};
use super::{grow, linux};
use crate::bench::{BenchOptions, Case, Report};
use crate::kernel::{self, BootArgs, Resizes};
use crate::progress::Progress;
use crate::statistics::median;

/// vCPUs of each boot: the driver's CPU and three readers.
const CPUS: u32 = 4;

/// What one boot of the hotkern kernel measured.
struct Shrink {
    /// The kernel's time for the shrink, per 128 MiB.
    guest_ns: u64,
    /// The host's, from the QMP request to `size` reaching it, in ms.
    host_ms: Option<f64>,
    migrated: u64,
    /// The kernel's checks (frames intact, none lost) all passed.
    clean: bool,
}

/// One boot of the hotkern kernel.
fn shrink_once(region_mib: u64, quarter_mib: u64, fill: u64) -> Result<Shrink, String> {
    let args = BootArgs {
        hotplug: Some(region_mib),
        resize: Some(Resizes(vec![region_mib, region_mib - quarter_mib])),
        fill: Some(fill),
        no_hotplug: false,
        timeout: 300.0,
        append: grow::IDLE_OTHERS.to_owned(),
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
    Ok(Shrink {
        guest_ns: per,
        host_ms: json["resizes"][1]["latency_ms"].as_f64(),
        migrated: shrink["migrated"].as_u64().unwrap_or(0),
        clean,
    })
}

/// `bench memory --platform qemu`: `shrink/used-<fill>` for each of
/// `fills`, impl `hotkern` (and `linux` with `--linux`), each the median
/// of `repetitions` boots.
pub fn run(options: &BenchOptions, fills: &[u64], repetitions: usize) -> Result<Report, String> {
    // Linux hotplugs memory in 128 MiB memory blocks (x86-64 under 64 GiB
    // of RAM) and uses no block its device covers only in part: with
    // --linux the quick run's region holds two of them.
    let (region_mib, quarter_mib) = match (options.full, options.linux) {
        (true, _) => (512, 128),
        (false, true) => (256, 64),
        (false, false) => (64, 16),
    };
    // Missing packages are said before anything boots.
    let anchor = if options.linux {
        Some(linux::prepare()?)
    } else {
        None
    };
    let impls = if anchor.is_some() { 2 } else { 1 };
    // The quick run's grow is 4 GiB, --full's 64 GiB.
    let target_mib = if options.full { 65_536 } else { 4096 };
    let memmaps = if anchor.is_some() {
        &[Memmap::Default, Memmap::OnMemory][..]
    } else {
        &[]
    };
    let mut linux_release = None;
    let mut report = Report::new("memory");
    report.table_figures = vec![
        "ms_per_128mib",
        "host_ms_per_128mib",
        "migrated",
        "reached",
        "invariants_ok",
        "host_ms",
        "shrink_host_ms",
        "physmem_ns_per_128mib",
        "tables_ns_per_128mib",
        "allocator_ns_per_128mib",
        "device_ns_per_128mib",
        "heap_rise_bytes",
        "plugged_mib",
        "memtotal_mib",
        "memmap_on_memory",
    ];
    let steps = fills.len() * repetitions * impls + repetitions + memmaps.len();
    let progress = Progress::steps("memory (qemu)", steps as u64);
    for &fill in fills {
        let name = format!("shrink/used-{fill}");
        progress.start(&name);
        let mut shrinks = Vec::new();
        for _ in 0..repetitions {
            shrinks.push(shrink_once(region_mib, quarter_mib, fill)?);
            progress.advance();
        }
        let guest = median(&shrinks.iter().map(|s| s.guest_ns).collect::<Vec<_>>());
        // The host's time, in µs for the median (a run without it, as
        // QEMU gone mid-resize, is left out).
        let host: Vec<u64> = shrinks
            .iter()
            .filter_map(|s| s.host_ms)
            .map(|ms| (ms * 1e3 * 128.0 / quarter_mib as f64) as u64)
            .collect();
        let frames = 128 << 8;
        let mut case = Case::new(&name, "hotkern", frames)
            .ns_per_op(guest / frames as f64)
            .with("ms_per_128mib", (guest / 1e5).round() / 10.0);
        if !host.is_empty() {
            case = case.with("host_ms_per_128mib", (median(&host) / 1e2).round() / 10.0);
        }
        report.cases.push(
            case.with("shrunk_mib", quarter_mib)
                .with("migrated", shrinks.last().map_or(0, |s| s.migrated))
                .with("invariants_ok", shrinks.iter().all(|s| s.clean)),
        );
        if let Some(prepared) = &anchor {
            progress.start(&format!("{name} (linux)"));
            let mut theirs = Vec::new();
            for repetition in 0..repetitions {
                let seed = 0x6d65_6d00 + repetition as u64;
                theirs.push(linux::shrink_once(
                    prepared,
                    region_mib,
                    quarter_mib,
                    fill,
                    seed,
                )?);
                progress.advance();
            }
            linux::add_case(&mut report, &name, quarter_mib, &theirs);
            linux_release = theirs.pop().map(|shrink| shrink.release);
            let key = format!("{}/linux_over_hotkern", name.replace('/', "-"));
            report.ratio(&key, &name, "host_ms_per_128mib", "linux", "hotkern");
        }
    }
    let name = grow::case_name(target_mib);
    progress.start(&name);
    // A boot that failed is said in the notes; the shrinks measured
    // before it stay in the report.
    let mut grows = Vec::new();
    for _ in 0..repetitions {
        match grow::grow_once(target_mib) {
            Ok(grow) => grows.push(grow),
            Err(error) => report
                .notes
                .push(format!("{name}: a hotkern boot failed: {error}")),
        }
        progress.advance();
    }
    if !grows.is_empty() {
        grow::add_case(&mut report, target_mib, &grows);
    }
    let mut linux_grow_release = None;
    if let Some(prepared) = &anchor {
        for &memmap in memmaps {
            progress.start(&format!("{name} ({})", memmap.implementation()));
            match linux_grow::grow_once(prepared, target_mib, memmap) {
                Ok(run) => {
                    linux_grow::add_case(&mut report, target_mib, memmap, &run);
                    linux_grow_release = Some(run.release);
                }
                Err(error) => report.notes.push(format!(
                    "{name}/{}: Linux's run failed: {error}",
                    memmap.implementation()
                )),
            }
            progress.advance();
        }
        let key = format!("{}/linux_over_hotkern", name.replace('/', "-"));
        report.ratio(&key, &name, "host_ms", "linux", "hotkern");
    }
    progress.finish();
    report.notes.push(format!(
        "the booted kernel under QEMU (TCG, {CPUS} vCPUs, the others idle while one resizes): a quarter ({quarter_mib} MiB) of a \
         {region_mib} MiB virtio-mem region taken back, owners holding the fill's share of the \
         size it goes to in every block; ms_per_128mib: the kernel's time for the shrink \
         (migration, grace period, physmem, page tables, device); host_ms_per_128mib: from the \
         QMP request until the device's size reached it; medians of {repetitions}, scaled to \
         128 MiB"
    ));
    report.notes.push(grow::note(target_mib, repetitions));
    if let Some(release) = linux_release {
        report.notes.push(linux::note(&release));
    }
    if let Some(release) = linux_grow_release {
        report.notes.push(linux_grow::note(&release));
    }
    Ok(report)
}
