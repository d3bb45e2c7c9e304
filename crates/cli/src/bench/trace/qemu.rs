//! `hotkern bench trace --platform qemu`: the tracer inside the booted
//! hotkern kernel beside Linux's ftrace in Debian's kernel, on the same
//! QEMU (TCG, [`CPUS`] vCPUs, [`MEMORY_MIB`] MiB).
//!
//! Both sides time a loop of calls three ways per round — untraced (the
//! floor), traced but off, traced and on — and the cases are the
//! difference to the floor, per call, round by round:
//! `kernel/function-on` and `kernel/function-off`. The hotkern kernel
//! loops over a tiny function in its own text (`tracebench=`, see the
//! kernel's `runs/trace_bench.rs`); Linux over `getppid(2)` from user
//! space ([`linux_guest`]), so only the differences
//! compare, not the loops.

use serde_json::Value;

use super::super::{Case, Report};
use super::guests::{Loops, CPUS, MEMORY_MIB};
use super::linux_guest;
use crate::kernel::{self, BootArgs};
use crate::linux::Guest;
use crate::qemu::{self, Architecture, QEMU, QEMU_PACKAGE};

/// Rounds of the three loops on each side (the kernel's own constant).
const REPETITIONS: usize = 5;
/// Calls per hotkern loop: a kernel function call costs tens of ns here.
const KERNEL_CALLS: u64 = 200_000;
/// Calls per Linux loop: a system call costs a microsecond or more here.
const LINUX_CALLS: u64 = 20_000;

/// Boots both kernels and builds the report.
pub fn run() -> Result<Report, String> {
    let qemu = qemu::find_in_path(QEMU, std::env::var_os("PATH")).ok_or_else(|| {
        format!("{QEMU} not found on PATH: apt-get install {QEMU_PACKAGE} (scripts/setup does it)")
    })?;
    // Before the first boot: a missing package is said at once.
    let guest = Guest::find(Architecture::X86_64)
        .map_err(|error| format!("bench trace --platform qemu: {error}"))?;
    let hotkern = measure_kernel(KERNEL_CALLS)?;
    let linux = linux_guest::measure(&qemu, &guest, REPETITIONS, LINUX_CALLS)?;
    let mut report = Report::new("trace");
    add_cases(&mut report, "hotkern", &hotkern, KERNEL_CALLS);
    add_cases(&mut report, "linux", &linux.loops, LINUX_CALLS);
    report.ratio(
        "function-on/hotkern_over_linux",
        "kernel/function-on",
        "ns_per_op",
        "hotkern",
        "linux",
    );
    report.notes.extend(targets(&report));
    report.notes.push(format!(
        "platform qemu: both kernels under TCG, {CPUS} vCPUs, {MEMORY_MIB} MiB; ns_per_op = \
         median over {REPETITIONS} rounds of (loop − floor) per call; hotkern: {KERNEL_CALLS} \
         calls of traced_parent_pid in the kernel, timed by its TSC; linux {}: \
         {LINUX_CALLS} getppid(2) calls from a static program, timed by CLOCK_MONOTONIC, \
         function tracer filtered to {} (on: {}) or {} (off)",
        linux.release,
        linux_guest::TRACED,
        linux.traced.join(" "),
        linux_guest::ELSEWHERE,
    ));
    Ok(report)
}

/// Boots the hotkern kernel with `tracebench=calls` and reads its loops.
pub fn measure_kernel(calls: u64) -> Result<Loops, String> {
    let args = BootArgs {
        append: format!("engine=none tracebench={calls}"),
        ..BootArgs::scenario(CPUS)
    };
    let run = kernel::run_quietly(&args)?;
    if !run.outcome.is_success() {
        return Err(format!(
            "the kernel did not finish: {}",
            run.failure_message()
        ));
    }
    kernel_loops(&run.to_json()["guest"]["tracebench"])
}

/// The kernel summary's `tracebench` object as [`Loops`].
pub fn kernel_loops(bench: &Value) -> Result<Loops, String> {
    let list = |key: &str| -> Result<Vec<f64>, String> {
        let values = bench[key]
            .as_array()
            .ok_or_else(|| format!("the kernel's tracebench has no {key}: {bench}"))?;
        values
            .iter()
            .map(|value| value.as_f64().filter(|ns| *ns > 0.0))
            .collect::<Option<Vec<f64>>>()
            .ok_or_else(|| format!("the kernel's tracebench {key} is not all positive: {bench}"))
    };
    let loops = Loops {
        floor_ns: list("floor_ns")?,
        off_ns: list("off_ns")?,
        on_ns: list("on_ns")?,
    };
    if loops.floor_ns.len() != loops.off_ns.len() || loops.off_ns.len() != loops.on_ns.len() {
        return Err(format!(
            "the kernel's tracebench rounds differ in number: {bench}"
        ));
    }
    Ok(loops)
}

/// The median of `values` (not empty).
fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let middle = sorted.len() / 2;
    if sorted.len() % 2 == 1 {
        sorted[middle]
    } else {
        (sorted[middle - 1] + sorted[middle]) / 2.0
    }
}

/// The two cases of `implementation`: each round's loop less its floor.
fn add_cases(report: &mut Report, implementation: &str, loops: &Loops, calls: u64) {
    let floor = median(&loops.floor_ns);
    let floor_spread = spread(&loops.floor_ns);
    for (name, measured) in [
        ("kernel/function-on", &loops.on_ns),
        ("kernel/function-off", &loops.off_ns),
    ] {
        let extra: Vec<f64> = measured
            .iter()
            .zip(&loops.floor_ns)
            .map(|(loop_ns, floor_ns)| loop_ns - floor_ns)
            .collect();
        let (low, high) = extra
            .iter()
            .fold((f64::MAX, f64::MIN), |(l, h), v| (l.min(*v), h.max(*v)));
        report.cases.push(
            Case::new(name, implementation, calls * measured.len() as u64)
                .ns_per_op(median(&extra))
                .with("min_ns", round(low))
                .with("max_ns", round(high))
                .with("loop_ns", round(median(measured)))
                .with("floor_ns", round(floor))
                .with("floor_spread_ns", round(floor_spread)),
        );
    }
}

/// `max − min` of `values`: how far the floor moves from round to round.
fn spread(values: &[f64]) -> f64 {
    let (low, high) = values
        .iter()
        .fold((f64::MAX, f64::MIN), |(l, h), v| (l.min(*v), h.max(*v)));
    (high - low).max(0.0)
}

fn round(value: f64) -> f64 {
    (value * 1000.0).round() / 1000.0
}

/// The targets: hotkern's traced call costs no more than Linux's,
/// and each side's off case is within the noise of its floor (its
/// round-to-round spread).
fn targets(report: &Report) -> Vec<String> {
    let figure = |name: &str, implementation: &str, key: &str| {
        report
            .case(name, implementation)
            .and_then(|case| case.figure(key))
    };
    let mut notes = Vec::new();
    match (
        figure("kernel/function-on", "hotkern", "ns_per_op"),
        figure("kernel/function-on", "linux", "ns_per_op"),
    ) {
        (Some(hotkern), Some(linux)) => notes.push(format!(
            "target hotkern function-on <= linux: {hotkern:.1} ns vs {linux:.1} ns per call {}",
            if hotkern <= linux { "met" } else { "missed" }
        )),
        _ => notes.push("target hotkern function-on <= linux: not measured".to_owned()),
    }
    for implementation in ["hotkern", "linux"] {
        let off = figure("kernel/function-off", implementation, "ns_per_op");
        let noise = figure("kernel/function-off", implementation, "floor_spread_ns");
        if let (Some(off), Some(noise)) = (off, noise) {
            notes.push(format!(
                "target {implementation} function-off within noise of untraced: {off:.2} ns vs \
                 the floor's spread {noise:.2} ns {}",
                if off.abs() <= noise { "met" } else { "missed" }
            ));
        }
    }
    notes
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn loops(floor: &[f64], off: &[f64], on: &[f64]) -> Loops {
        Loops {
            floor_ns: floor.to_vec(),
            off_ns: off.to_vec(),
            on_ns: on.to_vec(),
        }
    }

    #[test]
    fn the_kernel_summary_reads_into_loops_and_bad_ones_are_refused() {
        let good =
            json!({"floor_ns": [10.0, 11.0], "off_ns": [10.5, 11.0], "on_ns": [300.0, 320.5]});
        assert_eq!(
            kernel_loops(&good).unwrap(),
            loops(&[10.0, 11.0], &[10.5, 11.0], &[300.0, 320.5])
        );
        assert!(kernel_loops(&Value::Null).is_err());
        let zero = json!({"floor_ns": [0.0], "off_ns": [1.0], "on_ns": [2.0]});
        assert!(kernel_loops(&zero)
            .unwrap_err()
            .contains("not all positive"));
        let short = json!({"floor_ns": [1.0, 2.0], "off_ns": [1.0], "on_ns": [2.0, 3.0]});
        assert!(kernel_loops(&short).unwrap_err().contains("differ"));
    }

    #[test]
    fn cases_are_the_loops_less_their_floor_with_ratio_and_targets() {
        let mut report = Report::new("trace");
        let hotkern = loops(
            &[10.0, 12.0, 11.0],
            &[10.5, 12.0, 11.5],
            &[110.0, 212.0, 131.0],
        );
        let linux = loops(
            &[1000.0, 1010.0, 1020.0],
            &[1100.0, 1110.0, 1120.0],
            &[1400.0, 1410.0, 1420.0],
        );
        add_cases(&mut report, "hotkern", &hotkern, 100);
        add_cases(&mut report, "linux", &linux, 10);
        let on = report.case("kernel/function-on", "hotkern").unwrap();
        assert_eq!(on.ns_per_op, Some(120.0));
        assert_eq!(on.figure("min_ns"), Some(100.0));
        assert_eq!(on.figure("max_ns"), Some(200.0));
        assert_eq!(on.ops, 300);
        let off = report.case("kernel/function-off", "linux").unwrap();
        assert_eq!(off.ns_per_op, Some(100.0));
        assert_eq!(off.figure("floor_spread_ns"), Some(20.0));
        let ratio = report.ratio(
            "function-on/hotkern_over_linux",
            "kernel/function-on",
            "ns_per_op",
            "hotkern",
            "linux",
        );
        assert_eq!(ratio, Some(0.3));
        let notes = targets(&report).join("\n");
        assert!(
            notes.contains("120.0 ns vs 400.0 ns per call met"),
            "{notes}"
        );
        assert!(notes.contains("hotkern function-off within noise of untraced: 0.50 ns vs the floor's spread 2.00 ns met"), "{notes}");
        assert!(notes.contains("linux function-off within noise of untraced: 100.00 ns vs the floor's spread 20.00 ns missed"), "{notes}");
    }
}
