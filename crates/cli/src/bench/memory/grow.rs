//! `bench memory --platform qemu`'s `grow/<size>-from-256M`: a guest booted
//! with 256 MiB grows by a whole virtio-mem device in one request, then
//! shrinks back to 256 MiB of it. The hotkern kernel is booted as the
//! shrink cases boot it ([`kernel::run_quietly`]); its summary's
//! `guest.vmem` splits each resize into the device, physmem, page-table
//! and allocator work and says how far the boot heap rose for it, and the
//! host times each request from the QMP `qom-set` until `size` reached it.
//! With `--linux`, Debian's Linux makes the same grow ([`super::linux_grow`]).

use serde_json::Value;

use crate::bench::{Case, Report};
use crate::kernel::{self, BootArgs, Resizes};
use crate::statistics::median;

/// The kernel's command line for a measured resize, the shrink cases'
/// too: its other CPUs idle, as the Linux guest's do (its fill program
/// sleeps while Linux resizes). By default the kernel runs a reader on
/// every other CPU all through each resize, a correctness check (lookups
/// answer, nothing half plugged); on a 2-core host those three vCPUs take
/// host time from the one resizing, which the Linux side never pays. The
/// boot checks in CI keep the readers.
pub(super) const IDLE_OTHERS: &str = "vmem_readers=off";

/// Boot memory of every grow case: the small guest that grows to 64 GiB.
pub(super) const BOOT_MIB: u64 = 256;
/// Below this much available host memory a grow of [`LARGE_MIB`] or more
/// does not start: QEMU backs the device with `reserve=off`, so what the
/// guest touches (its page tables, Linux's `struct page`s) comes out of
/// the host's memory as it goes.
const HOST_FLOOR_MIB: u64 = 3 << 10;
const LARGE_MIB: u64 = 16 << 10;
/// vCPUs, as the shrink cases boot.
const CPUS: u32 = 4;
/// 4 KiB frames in 128 MiB: the unit of every per-128-MiB figure.
const FRAMES_PER_128MIB: u64 = 128 << 8;

/// The case's name for a grow to `target_mib` (`grow/64G-from-256M`).
pub(super) fn case_name(target_mib: u64) -> String {
    if target_mib % 1024 == 0 {
        format!("grow/{}G-from-{BOOT_MIB}M", target_mib / 1024)
    } else {
        format!("grow/{target_mib}M-from-{BOOT_MIB}M")
    }
}

/// What one hotkern boot measured: the grow and the shrink back.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Grow {
    /// The host's time for the grow, from the QMP request to `size`
    /// reaching it; `None` when it did not.
    pub(super) host_ms: Option<f64>,
    /// The same for the shrink back to [`BOOT_MIB`].
    pub(super) shrink_host_ms: Option<f64>,
    /// What the device had plugged when the host stopped waiting.
    pub(super) plugged_mib: u64,
    /// The guest's time per 128 MiB grown: physmem, page tables,
    /// allocator, device, over every grow the kernel recorded.
    pub(super) per_128mib_ns: [u64; 4],
    /// How far the boot heap rose during the grow, in bytes.
    pub(super) heap_rise: u64,
    /// The kernel's checks passed, nothing lost, the device followed.
    pub(super) clean: bool,
}

/// Reads one boot's `--json` report (`run`) of a grow to `target_mib` and
/// back: the host's `resizes[0..2]`, the guest's `vmem.resizes` with a
/// positive `blocks` count (the grow, however many steps the kernel took
/// for it) and their `heap_peak_rise`.
pub(super) fn read_grow(run: &Value, target_mib: u64) -> Result<Grow, String> {
    let vmem = &run["guest"]["vmem"];
    if let Some(error) = vmem["error"].as_str() {
        return Err(format!("the kernel's virtio-mem run failed: {error}"));
    }
    let (Some(block_bytes), Some(resizes)) =
        (vmem["block_bytes"].as_u64(), vmem["resizes"].as_array())
    else {
        return Err(format!(
            "the kernel reported no virtio-mem resizes: {}",
            vmem.to_string().chars().take(300).collect::<String>()
        ));
    };
    let grows: Vec<&Value> = resizes
        .iter()
        .filter(|resize| resize["blocks"].as_i64().is_some_and(|blocks| blocks > 0))
        .collect();
    let grown_bytes: u64 = grows
        .iter()
        .filter_map(|resize| resize["blocks"].as_u64())
        .sum::<u64>()
        * block_bytes;
    if grown_bytes == 0 {
        return Err("the kernel recorded no grow".to_owned());
    }
    let part = |key: &str| -> Result<u64, String> {
        let ns: u64 = grows
            .iter()
            .map(|resize| {
                resize[key]
                    .as_u64()
                    .ok_or(format!("a resize without {key}"))
            })
            .sum::<Result<u64, String>>()?;
        Ok(
            (u128::from(ns) * u128::from(FRAMES_PER_128MIB * 4096) / u128::from(grown_bytes))
                as u64,
        )
    };
    let per_128mib_ns = [
        part("physmem_ns")?,
        part("tables_ns")?,
        part("allocator_ns")?,
        part("device_ns")?,
    ];
    let heap_rise = grows
        .iter()
        .filter_map(|resize| resize["heap_peak_rise"].as_u64())
        .max()
        .unwrap_or(0);
    let host = &run["resizes"];
    if host[0]["requested_mib"].as_u64() != Some(target_mib) {
        return Err(format!(
            "the host's first resize was not the grow to {target_mib} MiB: {}",
            host[0]
        ));
    }
    Ok(Grow {
        host_ms: host[0]["latency_ms"].as_f64(),
        shrink_host_ms: host[1]["latency_ms"].as_f64(),
        plugged_mib: host[0]["plugged_mib"].as_u64().unwrap_or(0),
        per_128mib_ns,
        heap_rise,
        clean: run["guest"]["checks"]["failed"] == 0
            && vmem["pages_lost"] == 0
            && vmem["followed"] == Value::Bool(true),
    })
}

/// Refuses a large grow when the host has less than [`HOST_FLOOR_MIB`]
/// available (`/proc/meminfo`'s `MemAvailable`, the figure `free` shows).
pub(super) fn check_host_memory(target_mib: u64) -> Result<(), String> {
    if target_mib < LARGE_MIB {
        return Ok(());
    }
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let available_mib = meminfo
        .lines()
        .find_map(|line| line.strip_prefix("MemAvailable:"))
        .and_then(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
        .map(|kib| kib >> 10);
    match available_mib {
        Some(mib) if mib < HOST_FLOOR_MIB => Err(format!(
            "{}: the host has {mib} MiB available, under the {HOST_FLOOR_MIB} MiB a grow to \
             {target_mib} MiB may need; not started",
            case_name(target_mib)
        )),
        _ => Ok(()),
    }
}

/// One boot of the hotkern kernel: 256 MiB, a device of `target_mib`
/// grown whole, then shrunk back to [`BOOT_MIB`] of it.
pub(super) fn grow_once(target_mib: u64) -> Result<Grow, String> {
    check_host_memory(target_mib)?;
    let args = BootArgs {
        memory: BOOT_MIB,
        hotplug: Some(target_mib),
        resize: Some(Resizes(vec![target_mib, BOOT_MIB])),
        no_hotplug: false,
        no_disk: true,
        // 15 s on an idle host, over 300 s beside three other helpers'
        // QEMUs on two cores.
        timeout: 900.0,
        append: IDLE_OTHERS.to_owned(),
        ..BootArgs::scenario(CPUS)
    };
    read_grow(&kernel::run_quietly(&args)?.to_json(), target_mib)
}

/// Adds hotkern's case for a grow to `target_mib`: the median of `grows`
/// for each figure; `reached` counts the boots whose device reached the
/// request.
pub(super) fn add_case(report: &mut Report, target_mib: u64, grows: &[Grow]) {
    let median_of = |figure: &dyn Fn(&Grow) -> Option<f64>| {
        let values: Vec<u64> = grows
            .iter()
            .filter_map(figure)
            .map(|value| (value * 1e3) as u64)
            .collect();
        (!values.is_empty()).then(|| (median(&values) / 1e2).round() / 10.0)
    };
    let part = |index: usize| {
        median(
            &grows
                .iter()
                .map(|g| g.per_128mib_ns[index])
                .collect::<Vec<_>>(),
        )
    };
    let total: f64 = (0..4).map(part).sum();
    let reached = grows.iter().filter(|g| g.host_ms.is_some()).count();
    let mut case = Case::new(case_name(target_mib), "hotkern", FRAMES_PER_128MIB)
        .ns_per_op(total / FRAMES_PER_128MIB as f64);
    case = match median_of(&|g| g.host_ms) {
        Some(ms) => case.with("host_ms", ms),
        None => case.with("host_ms", "not reached"),
    };
    if let Some(ms) = median_of(&|g| g.shrink_host_ms) {
        case = case.with("shrink_host_ms", ms);
    }
    for (index, name) in [
        "physmem_ns_per_128mib",
        "tables_ns_per_128mib",
        "allocator_ns_per_128mib",
        "device_ns_per_128mib",
    ]
    .iter()
    .enumerate()
    {
        case = case.with(name, part(index) as u64);
    }
    let heap = median(&grows.iter().map(|g| g.heap_rise).collect::<Vec<_>>());
    report.cases.push(
        case.with("heap_rise_bytes", heap as u64)
            .with(
                "plugged_mib",
                grows.iter().map(|g| g.plugged_mib).min().unwrap_or(0),
            )
            .with("reached", format!("{reached} of {}", grows.len()))
            .with("invariants_ok", grows.iter().all(|g| g.clean)),
    );
}

/// The report's note on the grow cases.
pub(super) fn note(target_mib: u64, repetitions: usize) -> String {
    format!(
        "{}: a {BOOT_MIB} MiB guest (TCG, {CPUS} vCPUs, the others idle) grows by a {target_mib} MiB virtio-mem \
         device in one request, then shrinks back to {BOOT_MIB} MiB of it; host_ms and \
         shrink_host_ms: from the QMP request until the device's size reached it; \
         *_ns_per_128mib: the kernel's own time for the grow by part; heap_rise_bytes: how far \
         its boot heap rose during the grow; medians of {repetitions}",
        case_name(target_mib)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The parts of a `hotkern boot --cpus 4 --memory 256M --hotplug 64G
    /// --resize 65536M,256M --no-disk --json` report this module reads, as
    /// recorded on 2026-11-27 (TCG on the 2-core development VM).
    const RECORDED: &str = r#"{
      "resizes": [
        {"latency_ms": 14071.03, "plugged_mib": 65536, "requested_mib": 65536},
        {"latency_ms": 4708.974, "plugged_mib": 256, "requested_mib": 256}],
      "guest": {
        "checks": {"failed": 0, "failures": [], "passed": 55, "skipped": 0},
        "vmem": {
          "block_bytes": 2097152, "pages_lost": 0, "followed": true,
          "heap": {"after_rise": 192544, "before": 6567024, "bitmaps": 278528,
                   "owner_table": 3870720, "peak_rise": 8174040},
          "resizes": [
            {"allocator_ns": 191799097, "blocks": 32768, "device_ns": 230881542,
             "heap_peak_rise": 1567736, "migrate_ns": 0, "migrated": 0,
             "physmem_ns": 11469949664, "plugged_mib": 65536, "refused": null,
             "requested_mib": 65536, "retries": 0, "tables_ns": 18876363},
            {"allocator_ns": 1906415033, "blocks": -32640, "device_ns": 38739180,
             "heap_peak_rise": 7309528, "migrate_ns": 1893247666, "migrated": 0,
             "physmem_ns": 2651760139, "plugged_mib": 256, "refused": null,
             "requested_mib": 256, "retries": 0, "tables_ns": 76787750}],
          "per_128mib_ns": {"allocator": 2053047, "device": 263816,
                            "physmem": 13817719, "tables": 93604}}}
    }"#;

    fn recorded() -> Value {
        serde_json::from_str(RECORDED).unwrap()
    }

    #[test]
    fn a_recorded_grow_reads_as_the_grow_alone_per_128_mib() {
        let grow = read_grow(&recorded(), 65_536).unwrap();
        // 64 GiB is 512 times 128 MiB; the shrink back's figures (and
        // the summary's per_128mib_ns, over both resizes) are not the grow's.
        assert_eq!(
            grow.per_128mib_ns,
            [
                11_469_949_664 / 512,
                18_876_363 / 512,
                191_799_097 / 512,
                230_881_542 / 512
            ]
        );
        assert_eq!(grow.heap_rise, 1_567_736);
        assert_eq!(
            (grow.host_ms, grow.shrink_host_ms),
            (Some(14_071.03), Some(4_708.974))
        );
        assert_eq!(grow.plugged_mib, 65_536);
        assert!(grow.clean);
    }

    #[test]
    fn a_report_of_another_grow_or_a_failed_run_is_refused() {
        let error = read_grow(&recorded(), 4096).unwrap_err();
        assert!(error.contains("not the grow to 4096 MiB"), "{error}");
        let mut failed = recorded();
        failed["guest"]["vmem"] = serde_json::json!({"error": "no virtio-mem device"});
        let error = read_grow(&failed, 65_536).unwrap_err();
        assert!(error.contains("no virtio-mem device"), "{error}");
        let mut lost = recorded();
        lost["guest"]["vmem"]["pages_lost"] = 3.into();
        assert!(!read_grow(&lost, 65_536).unwrap().clean);
    }

    #[test]
    fn the_case_takes_each_figures_median_and_counts_grows_not_reached() {
        let grow = read_grow(&recorded(), 65_536).unwrap();
        let slower = Grow {
            host_ms: Some(20_000.0),
            per_128mib_ns: [30_000_000, 50_000, 400_000, 500_000],
            heap_rise: 2_000_000,
            ..grow.clone()
        };
        let short = Grow {
            host_ms: None,
            plugged_mib: 40_000,
            ..slower.clone()
        };
        let mut report = Report::new("memory");
        add_case(&mut report, 65_536, &[grow, slower, short]);
        let case = report.case("grow/64G-from-256M", "hotkern").unwrap();
        // The two that were reached: 14,071.03 and 20,000 ms.
        assert_eq!(case.figure("host_ms"), Some(17_035.5));
        assert_eq!(case.figure("tables_ns_per_128mib"), Some(50_000.0));
        assert_eq!(case.figure("physmem_ns_per_128mib"), Some(30_000_000.0));
        assert_eq!(case.figure("heap_rise_bytes"), Some(2_000_000.0));
        assert_eq!(case.figure("plugged_mib"), Some(40_000.0));
        assert!(case.extra.contains(&("reached".into(), "2 of 3".into())));
        assert!(report.to_table().contains("grow/64G-from-256M"));
    }

    #[test]
    fn case_names_say_the_size_grown_to() {
        assert_eq!(case_name(65_536), "grow/64G-from-256M");
        assert_eq!(case_name(4096), "grow/4G-from-256M");
        assert_eq!(case_name(1536), "grow/1536M-from-256M");
    }
}
