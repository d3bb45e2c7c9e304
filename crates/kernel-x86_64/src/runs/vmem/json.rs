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
            "{{\"block_bytes\":{},\"addr\":{},\"region_bytes\":{},\"pages_lost\":{},\"stale\":{},\"followed\":{},\"config_changes\":{{\"route\":\"{}\",\"interrupts\":{},\"missed\":{}}},\"descriptor_room\":{{\"bytes\":{},\"ns\":{},\"blocks_outside\":{}}},\"resizes\":[",
            report.block,
            report.addr,
            report.region,
            report.pages_lost,
            report.stale,
            report.followed,
            report.config.route,
            report.config.interrupts,
            report.config.missed,
            report.room.range.end - report.room.range.start,
            report.room.ns,
            report.outside_room
        )?;
        let mut moved = 0u64;
        let mut total = [0u64; 4];
        for (index, resize) in report.resizes.iter().enumerate() {
            if index > 0 {
                f.write_char(',')?;
            }
            moved += resize.blocks.unsigned_abs() * report.block;
            for (sum, ns) in total.iter_mut().zip(resize.ns) {
                *sum += ns;
            }
            let [device, physmem, tables, allocator] = resize.ns;
            write!(
                f,
                "{{\"requested_mib\":{},\"plugged_mib\":{},\"blocks\":{},\"device_ns\":{device},\"physmem_ns\":{physmem},\"tables_ns\":{tables},\"allocator_ns\":{allocator},\"refused\":",
                resize.requested / MIB,
                resize.plugged / MIB,
                resize.blocks
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
                    "{{\"idle\":{},\"idle_ns\":{},\"idle_median_ns\":{},\"resizing\":{},\"resizing_ns\":{},\"resizing_median_ns\":{},\"half_plugged\":{},\"blocks_checked\":{},\"frames_used\":{},\"frames_bad\":{},\"cpus\":[",
                    seen.idle.0,
                    JsonNumber(idle),
                    JsonNumber(seen.median.0),
                    seen.resizing.0,
                    JsonNumber(resizing),
                    JsonNumber(seen.median.1),
                    seen.half_plugged,
                    seen.blocks_checked,
                    seen.frames_used,
                    seen.frames_bad
                )?;
                for (at, (cpu, lookups)) in seen.cpus.iter().enumerate() {
                    let comma = if at == 0 { "" } else { "," };
                    write!(f, "{comma}{{\"cpu\":{cpu},\"lookups\":{lookups}}}")?;
                }
                f.write_str("]}")?;
            }
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
