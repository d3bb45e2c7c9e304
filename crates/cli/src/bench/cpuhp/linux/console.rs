//! The guest's side of `bench cpuhp --linux` and what it says back: the
//! /init script busybox runs, and the parsers for the lines it writes on
//! the serial console.
//!
//! The script times each `echo 0|1 > /sys/devices/system/cpu/cpuN/online`
//! with ftrace markers (a write to tracefs' `trace_marker` before and after
//! it): busybox's `date` has no sub-second resolution, while the marker
//! carries the kernel's own timestamp. At the end it prints the trace and
//! powers off; the host pairs the markers up.

use crate::linux::PREFIX;

/// Starts every trace marker the script writes.
const MARKER: &str = "hotkern-linux";
/// How ftrace's trace header starts its event counts.
const ENTRIES: &str = "# entries-in-buffer/entries-written:";
/// What ftrace's text output puts between a marker's timestamp and its text.
const MARK_WRITE: &str = ": tracing_mark_write: ";

/// The /init script: `reps` offline/online cycles of each of `cpus`, idle
/// (`/1`), then with a busy loop per vCPU (`/1-load`), then all of `cpus`
/// one after another under the same load (`/bulk-N-load`: sysfs has no
/// way to take several CPUs at once).
pub fn init_script(reps: u32, cpus: &[u32]) -> String {
    let list: Vec<String> = cpus.iter().map(u32::to_string).collect();
    let bulk = format!("bulk-{}-load", cpus.len());
    crate::linux::init_script(SCRIPT)
        .replace("@REPS@", &reps.to_string())
        .replace("@CPUS@", &list.join(" "))
        .replace("@BULK@", &bulk)
        .replace("@LOADS@", &(cpus.len() + 1).to_string())
}

/// Runs as PID 1 from the initramfs, with busybox as its only program.
/// The shell is pinned to CPU 0 (which it never takes down), as the
/// hotkern kernel drives hotplug from its boot CPU. The trace clock is
/// `mono` (the clocksource: HPET under QEMU's PC, which follows the
/// host's clock, as Linux finds the vCPUs' TSCs unsynchronised under TCG
/// and marks them unstable; the Arm generic timer on `virt`). The buffer is enlarged because until something
/// resizes it, the boot-time buffer holds a few dozen markers and
/// overwrites the first ones. The console log level
/// drops to 1 while timing, so that hotplug's own printk lines do not
/// cost serial output inside the measured region. The busy loops are
/// started unpinned (`taskset f`), since children inherit the shell's
/// CPU 0.
const SCRIPT: &str = r#"echo mono > $T/trace_clock
echo 256 > $T/buffer_size_kb
echo 1 > /proc/sys/kernel/printk
mark() { echo "hotkern-linux $1 $2 $3" > $T/trace_marker; }
set_online() {
    echo $2 > /sys/devices/system/cpu/cpu$1/online || echo "hotkern-linux: error cpu$1 online=$2 refused"
}
singles() {
    echo "hotkern-linux: case $1"
    for rep in $(seq @REPS@); do
        for cpu in @CPUS@; do
            mark begin offline/$1 $cpu; set_online $cpu 0; mark end offline/$1 $cpu
            mark begin online/$1 $cpu; set_online $cpu 1; mark end online/$1 $cpu
        done
    done
}
singles 1
LOADS=""
for n in $(seq @LOADS@); do
    taskset f sh -c 'while :; do :; done' &
    LOADS="$LOADS $!"
done
singles 1-load
echo "hotkern-linux: case @BULK@"
for rep in $(seq @REPS@); do
    mark begin offline/@BULK@ all
    for cpu in @CPUS@; do set_online $cpu 0; done
    mark end offline/@BULK@ all
    mark begin online/@BULK@ all
    for cpu in @CPUS@; do set_online $cpu 1; done
    mark end online/@BULK@ all
done
kill $LOADS
echo "hotkern-linux: trace"
cat $T/trace
echo "hotkern-linux: done"
poweroff -f
"#;

/// One line of the script's own (not the kernel's) console output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Line {
    /// Userspace is up: vCPUs online and the kernel release.
    Up { cpus: u32, release: String },
    /// A case starts.
    Case(String),
    /// A hotplug write failed.
    Error(String),
    /// The trace follows.
    Trace,
    /// Everything was printed; the guest powers off.
    Done,
    /// A trace marker, from the trace.
    Marker(Marker),
    /// The trace header's count of events kept and written: fewer kept
    /// means the buffer overwrote some.
    Entries { kept: u64, written: u64 },
}

/// Whether a marker opens or closes a timed region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Written just before the hotplug write.
    Begin,
    /// Written just after it returned.
    End,
}

/// One trace marker: `hotkern-linux begin offline/1 2`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Marker {
    /// The trace timestamp, in nanoseconds.
    pub ns: u64,
    /// Before or after.
    pub phase: Phase,
    /// The case, e.g. `offline/1-load`.
    pub case: String,
    /// The CPU, or `all` for a bulk case.
    pub target: String,
}

/// Reads one console line; `None` for anything the script did not write
/// (the kernel's log, the trace's header).
pub fn parse_line(line: &str) -> Option<Line> {
    if let Some(marker) = parse_marker(line) {
        return Some(Line::Marker(marker));
    }
    if let Some(counts) = line.trim().strip_prefix(ENTRIES) {
        let counts = counts.split_whitespace().next()?;
        let (kept, written) = counts.split_once('/')?;
        return Some(Line::Entries {
            kept: kept.parse().ok()?,
            written: written.parse().ok()?,
        });
    }
    let rest = line.trim().strip_prefix(PREFIX)?.trim();
    let (word, tail) = rest.split_once(' ').unwrap_or((rest, ""));
    match word {
        "up" => {
            let (cpus, release) = tail.split_once(' ').unwrap_or((tail, ""));
            Some(Line::Up {
                cpus: cpus.parse().ok()?,
                release: release.trim().to_owned(),
            })
        }
        "case" if !tail.is_empty() => Some(Line::Case(tail.to_owned())),
        "error" => Some(Line::Error(tail.to_owned())),
        "trace" => Some(Line::Trace),
        "done" => Some(Line::Done),
        _ => None,
    }
}

/// Reads a trace line holding one of the script's markers, e.g.
/// `  sh-1  [000] .....  9.871234: tracing_mark_write: hotkern-linux begin offline/1 1`.
fn parse_marker(line: &str) -> Option<Marker> {
    let (head, text) = line.split_once(MARK_WRITE)?;
    let ns = parse_timestamp(head.split_whitespace().last()?)?;
    let mut words = text.split_whitespace();
    if words.next()? != MARKER {
        return None;
    }
    let phase = match words.next()? {
        "begin" => Phase::Begin,
        "end" => Phase::End,
        _ => return None,
    };
    let case = words.next()?.to_owned();
    let target = words.next()?.to_owned();
    Some(Marker {
        ns,
        phase,
        case,
        target,
    })
}

/// Seconds with a decimal fraction (ftrace prints microseconds, or
/// nanoseconds with some clocks) as whole nanoseconds, without going
/// through floating point.
pub fn parse_timestamp(text: &str) -> Option<u64> {
    let (seconds, fraction) = text.split_once('.')?;
    if fraction.is_empty() || fraction.len() > 9 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let seconds: u64 = seconds.parse().ok()?;
    let scale = 10u64.pow(9 - fraction.len() as u32);
    let fraction: u64 = fraction.parse().ok()?;
    seconds
        .checked_mul(1_000_000_000)?
        .checked_add(fraction * scale)
}

/// Durations in nanoseconds per case, cases in the order they ran, from
/// markers in trace order: each `begin` must be closed by the `end` of the
/// same case and target.
pub fn pair(markers: &[Marker]) -> Result<Vec<(String, Vec<u64>)>, String> {
    let mut samples: Vec<(String, Vec<u64>)> = Vec::new();
    let mut open: Option<&Marker> = None;
    for marker in markers {
        match (marker.phase, open) {
            (Phase::Begin, None) => open = Some(marker),
            (Phase::End, Some(begin))
                if begin.case == marker.case && begin.target == marker.target =>
            {
                let ns = marker.ns.checked_sub(begin.ns).ok_or_else(|| {
                    format!(
                        "{} {}: the end marker is older than the begin",
                        marker.case, marker.target
                    )
                })?;
                match samples.iter_mut().find(|(case, _)| *case == marker.case) {
                    Some((_, durations)) => durations.push(ns),
                    None => samples.push((marker.case.clone(), vec![ns])),
                }
                open = None;
            }
            _ => {
                return Err(format!(
                    "unpaired trace marker: {:?} {} {}",
                    marker.phase, marker.case, marker.target
                ))
            }
        }
    }
    if let Some(begin) = open {
        return Err(format!("{} {}: no end marker", begin.case, begin.target));
    }
    Ok(samples)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// As Linux 6.1 prints a marker with the global clock.
    const TRACE_LINE: &str = "              sh-1       [000] .....    10.546710: \
                              tracing_mark_write: hotkern-linux begin offline/1-load 2";

    #[test]
    fn a_real_looking_trace_line_gives_its_marker() {
        assert_eq!(
            parse_line(TRACE_LINE),
            Some(Line::Marker(Marker {
                ns: 10_546_710_000,
                phase: Phase::Begin,
                case: "offline/1-load".into(),
                target: "2".into(),
            }))
        );
        let other = TRACE_LINE.replace("hotkern-linux begin", "somebody else");
        assert_eq!(parse_line(&other), None);
        assert_eq!(parse_line("# tracer: nop"), None);
        assert_eq!(
            parse_line("# entries-in-buffer/entries-written: 67/140   #P:4"),
            Some(Line::Entries {
                kept: 67,
                written: 140
            })
        );
    }

    #[test]
    fn timestamps_become_nanoseconds_exactly() {
        assert_eq!(parse_timestamp("10.546710"), Some(10_546_710_000));
        assert_eq!(parse_timestamp("0.000001"), Some(1_000));
        assert_eq!(parse_timestamp("3.123456789"), Some(3_123_456_789));
        assert_eq!(parse_timestamp("7.5"), Some(7_500_000_000));
        for bad in ["10", "10.", ".5", "a.5", "1.-5", "1.1234567890", "1.5:"] {
            assert_eq!(parse_timestamp(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_scripts_own_lines_parse() {
        assert_eq!(
            parse_line("hotkern-linux: up 4 6.1.0-56-amd64\r"),
            Some(Line::Up {
                cpus: 4,
                release: "6.1.0-56-amd64".into()
            })
        );
        assert_eq!(
            parse_line("hotkern-linux: case bulk-3-load"),
            Some(Line::Case("bulk-3-load".into()))
        );
        assert_eq!(
            parse_line("hotkern-linux: error cpu1 online=0 refused"),
            Some(Line::Error("cpu1 online=0 refused".into()))
        );
        assert_eq!(parse_line("hotkern-linux: trace"), Some(Line::Trace));
        assert_eq!(parse_line("hotkern-linux: done"), Some(Line::Done));
        assert_eq!(parse_line("hotkern-linux: up four"), None);
        assert_eq!(parse_line("hotkern-linux: case"), None);
        assert_eq!(parse_line("[    9.8] smpboot: CPU 1 is now offline"), None);
    }

    fn marker(ns: u64, phase: Phase, case: &str, target: &str) -> Marker {
        Marker {
            ns,
            phase,
            case: case.into(),
            target: target.into(),
        }
    }

    #[test]
    fn markers_pair_into_durations_per_case() {
        use Phase::{Begin, End};
        let markers = [
            marker(1_000, Begin, "offline/1", "1"),
            marker(31_000, End, "offline/1", "1"),
            marker(40_000, Begin, "online/1", "1"),
            marker(90_000, End, "online/1", "1"),
            marker(95_000, Begin, "offline/1", "2"),
            marker(125_500, End, "offline/1", "2"),
        ];
        let samples = pair(&markers).unwrap();
        assert_eq!(
            samples,
            [
                ("offline/1".to_owned(), vec![30_000, 30_500]),
                ("online/1".to_owned(), vec![50_000]),
            ]
        );

        let crossed = [
            marker(1, Begin, "offline/1", "1"),
            marker(2, End, "offline/1", "2"),
        ];
        assert!(pair(&crossed).unwrap_err().contains("unpaired"));
        assert!(pair(&markers[..1]).unwrap_err().contains("no end marker"));
        assert!(pair(&[marker(9, Begin, "a", "1"), marker(3, End, "a", "1")]).is_err());
    }

    #[test]
    fn the_script_names_every_case_it_times() {
        let script = init_script(5, &[1, 2, 3]);
        assert!(!script.contains('@'), "placeholders left: {script}");
        assert!(script.contains("for cpu in 1 2 3; do"));
        assert!(script.contains("mark begin offline/bulk-3-load all"));
        assert!(script.contains("$(seq 5)"));
        assert!(script.ends_with("poweroff -f\n"));
    }
}
