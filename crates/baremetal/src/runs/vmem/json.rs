//! The driver's report as the summary's `"vmem"` value.

use alloc::string::String;
use core::fmt::{self, Write};

use super::report::VmemReport;
use crate::drivers::virtio::mem::{MIB, RUN_BYTES};
use crate::runs::json::{JsonNumber, JsonStr};

/// The report as the summary's `"vmem"` value (`null` without one).
pub struct VmemJson<'a>(pub Option<&'a VmemReport>);

impl fmt::Display for VmemJson<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(report) = self.0 else {
            return f.write_str("null");
        };
        if let Some(error) = &report.error {
            let mut text = String::new();
            let _ = write!(text, "{error}");
            return write!(f, "{{\"error\":{}}}", JsonStr(&text));
        }
        write!(
            f,
            "{{\"block_bytes\":{},\"addr\":{},\"region_bytes\":{},\"pages_lost\":{},\"stale\":{},\"followed\":{},\"config_changes\":{{\"route\":\"{}\",\"interrupts\":{},\"missed\":{}}},\"descriptors\":{{\"frames_per_run\":{},\"blocks_per_run\":{},\"blocks_off_block\":{}}},\"heap\":{{\"before\":{},\"bitmaps\":{},\"owner_table\":{},\"peak_rise\":{},\"after_rise\":{}}},\"resizes\":[",
            report.block,
            report.addr,
            report.region,
            report.pages_lost,
            report.stale,
            report.followed,
            report.config.route,
            report.config.interrupts,
            report.config.missed,
            report.descriptor_frames,
            report.run_blocks,
            report.descriptors_off_block,
            report.heap.before,
            report.heap.bitmaps,
            report.heap.owner_table,
            report.heap.peak_rise,
            report.heap.after_rise
        )?;
        let mut moved = 0u64;
        let mut total = [0u64; 4];
        // Shrinks only: bytes taken back, their ns, frames migrated and
        // the shared core's share of the ns.
        let mut shrunk = (0u64, 0u64, 0u64, 0u64);
        for (index, resize) in report.resizes.iter().enumerate() {
            if index > 0 {
                f.write_char(',')?;
            }
            moved += resize.blocks.unsigned_abs() * report.block;
            for (sum, ns) in total.iter_mut().zip(resize.ns) {
                *sum += ns;
            }
            if resize.blocks < 0 {
                shrunk.0 += resize.blocks.unsigned_abs() * report.block;
                shrunk.1 += resize.ns.iter().sum::<u64>();
                shrunk.2 += resize.migrated;
                shrunk.3 += resize.migrate_ns;
            }
            let [device, physmem, tables, allocator] = resize.ns;
            write!(
                f,
                "{{\"requested_mib\":{},\"plugged_mib\":{},\"blocks\":{},\"device_ns\":{device},\"physmem_ns\":{physmem},\"tables_ns\":{tables},\"allocator_ns\":{allocator},\"migrated\":{},\"retries\":{},\"migrate_ns\":{},\"heap_peak_rise\":{},\"refused\":",
                resize.requested / MIB,
                resize.plugged / MIB,
                resize.blocks,
                resize.migrated,
                resize.retries,
                resize.migrate_ns,
                resize.heap_peak_rise
            )?;
            match &resize.refused {
                Some(reason) => write!(f, "{}}}", JsonStr(reason))?,
                None => f.write_str("null}")?,
            }
        }
        // Guest time per 128 MiB moved, over every resize.
        let per = |ns: u64| {
            if moved == 0 {
                0
            } else {
                (u128::from(ns) * u128::from(RUN_BYTES) / u128::from(moved)) as u64
            }
        };
        f.write_str("],\"lookups\":")?;
        match &report.seen {
            Some(seen) => {
                let (idle, resizing) = seen.per_lookup();
                write!(
                    f,
                    "{{\"idle\":{},\"idle_ns\":{},\"idle_median_ns\":{},\"resizing\":{},\"resizing_ns\":{},\"resizing_median_ns\":{},\"half_plugged\":{},\"blocks_checked\":{},\"frames_used\":{},\"frames_bad\":{},\"owned_read\":{},\"owned_bad\":{},\"cpus\":[",
                    seen.idle.0,
                    JsonNumber(idle),
                    JsonNumber(seen.median.0),
                    seen.resizing.0,
                    JsonNumber(resizing),
                    JsonNumber(seen.median.1),
                    seen.half_plugged,
                    seen.blocks_checked,
                    seen.frames_used,
                    seen.frames_bad,
                    seen.owned_read,
                    seen.owned_bad
                )?;
                for (at, (cpu, lookups)) in seen.cpus.iter().enumerate() {
                    let comma = if at == 0 { "" } else { "," };
                    write!(f, "{comma}{{\"cpu\":{cpu},\"lookups\":{lookups}}}")?;
                }
                f.write_str("]}")?;
            }
            None => f.write_str("null")?,
        }
        let per_shrunk = |ns: u64| {
            (u128::from(ns) * u128::from(RUN_BYTES))
                .checked_div(u128::from(shrunk.0))
                .map(|ns| ns as u64)
        };
        write!(
            f,
            ",\"shrink\":{{\"bytes\":{},\"ns\":{},\"per_128mib_ns\":{},\"migrated\":{},\"migrate_per_128mib_ns\":{}}}",
            shrunk.0,
            shrunk.1,
            JsonNumber(per_shrunk(shrunk.1)),
            shrunk.2,
            JsonNumber(per_shrunk(shrunk.3))
        )?;
        f.write_str(",\"fill\":")?;
        match &report.fill {
            Some(fill) => write!(
                f,
                "{{\"percent\":{},\"most\":{},\"short\":{},\"rounds\":{},\"frames_read\":{},\"bad\":{},\"fill_ns\":{},\"verify_ns\":{}}}",
                fill.percent,
                fill.most,
                fill.short,
                fill.rounds,
                fill.frames_read,
                fill.bad,
                fill.fill_ns,
                fill.verify_ns
            )?,
            None => f.write_str("null")?,
        }
        write!(
            f,
            ",\"per_128mib_ns\":{{\"device\":{},\"physmem\":{},\"tables\":{},\"allocator\":{}}}}}",
            per(total[0]),
            per(total[1]),
            per(total[2]),
            per(total[3])
        )
    }
}
