//! `hotkern boot`'s watch over QEMU: starts it, follows the kernel's
//! console line by line until QEMU exits or the timeout kills it, starts
//! the QMP resizes on the virtio-mem ready line, and gathers the report.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use crate::qemu::console::Console;

use super::report::{is_fault_line, parse_summary};
use super::{crash_dump, trace, vmem, BootArgs, RunReport};
use crate::progress::Progress;
use crate::qemu::qmp;
use crate::qemu::{Outcome, QemuConfig};

/// Starts QEMU, follows the console until QEMU exits or the timeout kills
/// it, and gathers the report.
pub(super) fn watch(
    qemu: &Path,
    config: QemuConfig,
    build: Option<Duration>,
    args: &BootArgs,
    progress: &Progress,
) -> Result<RunReport, String> {
    let started = Instant::now();
    let mut console = Console::start(qemu, config.args())?;
    let deadline = started + Duration::from_secs_f64(args.timeout);
    let mut report = RunReport::started(config, build);
    if let Some(hotplug) = &report.config.hotplug {
        // A socket left by an earlier run would refuse QEMU's bind.
        let _ = std::fs::remove_file(&hotplug.qmp_socket);
    }
    let mut resizer = None;
    let (gate_sender, gate_receiver) = mpsc::channel();
    let mut gate_receiver = Some(gate_receiver);
    let mut timed_out = false;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match console
            .lines
            .recv_timeout(left.min(Duration::from_millis(100)))
        {
            Ok((at, line)) => {
                report.first_line.get_or_insert(at - started);
                show(progress, &line, args.verbose);
                // The kernel follows requested-size from here: resize.
                if line.starts_with(vmem::READY) && resizer.is_none() {
                    if let (Some(hotplug), Some(sizes)) = (&report.config.hotplug, &args.resize) {
                        let (socket, sizes) = (hotplug.qmp_socket.clone(), sizes.0.clone());
                        // 30 s, and 10 s more per GiB of the largest
                        // size: a many-GiB grow under TCG plugs each
                        // 2 MiB block's descriptor frame for the first
                        // time, which the host pays a page fault for.
                        let largest_gib = sizes.iter().max().copied().unwrap_or(0) as f64 / 1024.0;
                        let wait =
                            Duration::from_secs_f64(args.timeout.min(30.0 + 10.0 * largest_gib));
                        // With a fill, each size waits for the owners to
                        // have filled memory for it.
                        let gate = gate_receiver
                            .take()
                            .filter(|_| args.fill.is_some_and(|percent| percent > 0));
                        resizer = Some(thread::spawn(move || {
                            qmp::drive(&socket, &sizes, wait, gate.as_ref())
                        }));
                    }
                }
                if line.starts_with(vmem::NEXT) {
                    let _ = gate_sender.send(());
                }
                record(&mut report, line);
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
            Err(mpsc::RecvTimeoutError::Timeout) if Instant::now() >= deadline => {
                timed_out = true;
                progress.step(&format!("timeout after {} s: killing QEMU", args.timeout));
                let _ = console.child.kill();
                break;
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
    }
    let (status, said) = console.finish();
    let status = status.map_err(|error| format!("waiting for QEMU: {error}"))?;
    report.total = started.elapsed();
    // Lines QEMU wrote before the kill but the loop had not read yet.
    for (_, line) in console.lines.try_iter() {
        show(progress, &line, args.verbose);
        record(&mut report, line);
    }
    report.qemu_stderr = said;
    if let Some(resizer) = resizer {
        report.resizes = Some(
            resizer
                .join()
                .unwrap_or_else(|_| Err("the QMP thread panicked".to_owned())),
        );
    } else if args.resize.is_some() && args.hotplug.is_some() {
        report.resizes = Some(Err(
            "the kernel never said it follows the device's size (no virtio-mem ready line)"
                .to_owned(),
        ));
    }
    if let Some(hotplug) = &report.config.hotplug {
        let _ = std::fs::remove_file(&hotplug.qmp_socket);
    }
    report.status = status.code();
    report.outcome = Outcome::from_status(status.code(), status.signal(), timed_out);
    if let Some(path) = &report.config.trace_file {
        match trace::collect(report.summary.as_ref(), path) {
            Ok(trace) => report.trace = trace,
            Err(error) => report.trace_error = Some(error),
        }
        report.crash_dump = crash_dump::settle(&report.crash_lines, path);
    }
    Ok(report)
}

/// Takes in one console line.
fn record(report: &mut RunReport, line: String) {
    report.lines += 1;
    // The dump's framing, not where the kernel got to.
    if report.crash_lines.take(&line) {
        return;
    }
    match parse_summary(&line) {
        Some(Ok(summary)) => report.summary = Some(summary),
        Some(Err(error)) => report.summary_error = Some(error),
        // The first fault is the cause; CPUs that crash after it follow.
        None if is_fault_line(&line) && report.fault.is_none() => report.fault = Some(line.clone()),
        None => {}
    }
    if !line.is_empty() {
        report.last_line = Some(line);
    }
}

/// A console line: printed (with `-v`) and shown beside the spinner.
fn show(progress: &Progress, line: &str, verbose: bool) {
    if verbose {
        progress.line(&format!("  | {line}"));
    }
    progress.start(line);
}
