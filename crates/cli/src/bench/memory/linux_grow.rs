//! `bench memory --platform qemu --linux`'s grow cases: Debian's Linux,
//! booted with the same 256 MiB, vCPUs and `virtio-mem-pci` device as the
//! hotkern kernel ([`super::grow`]), grows by the whole device in one
//! request and shrinks back. The guest onlines what its `virtio_mem`
//! driver adds at once (`memhp_default_state=online`, so into
//! ZONE_NORMAL: each block onlined can hold the next block's `struct
//! page`s, which a 256 MiB guest could not hold for 64 GiB — 64 bytes per
//! 4 KiB, 1 GiB). The kernel's `memory_hotplug.memmap_on_memory=1`, which
//! would put them in the added memory itself, is tried as a second run:
//! the guest says whether the parameter took (sysfs) and the host records
//! whether the size was reached. The guest prints its MemTotal every two
//! seconds and the kernel's new messages about memory, so a grow that
//! stops short says where and why.

use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use super::grow::{self, BOOT_MIB};
use super::linux::{self, Prepared};
use crate::bench::{Case, Report};
use crate::linux::PREFIX;
use crate::qemu::console::Console;
use crate::qemu::qmp::{Limits, Qmp, Resized};

/// How long the grow may take, and how long the device's size may stay
/// put before the grow counts as stopped (Linux adds and onlines 128 MiB
/// memory blocks one by one; one stalled this long is out of memory).
const GROW_WAIT: Duration = Duration::from_secs(300);
const STALL_WAIT: Duration = Duration::from_secs(30);
const SHRINK_WAIT: Duration = Duration::from_secs(60);
/// Boot to userspace under TCG.
const SETUP_WAIT: Duration = Duration::from_secs(120);
/// Kernel messages worth keeping: the driver's and the allocator's.
const MEMORY_WORDS: &str = "virtio_mem|memory|oom|allocation|memmap|hotplug|panic";

/// A kernel command-line option for one of the Linux runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Memmap {
    /// Linux's default: `struct page`s from memory already online.
    Default,
    /// `memory_hotplug.memmap_on_memory=1`.
    OnMemory,
}

impl Memmap {
    /// The case's implementation name.
    pub(super) fn implementation(self) -> &'static str {
        match self {
            Memmap::Default => "linux",
            Memmap::OnMemory => "linux-memmap_on_memory",
        }
    }

    fn append(self) -> String {
        let extra = match self {
            Memmap::Default => "",
            Memmap::OnMemory => " memory_hotplug.memmap_on_memory=1",
        };
        format!("console=ttyS0 memhp_default_state=online loglevel=4{extra}")
    }
}

/// A line of the guest's script.
#[derive(Debug, Clone, PartialEq)]
enum Line {
    Up(String),
    Memmap(String),
    Waiting(u64),
    MemTotal(u64),
    Kernel(String),
    Error(String),
}

fn parse_line(line: &str) -> Option<Line> {
    let rest = line.trim().strip_prefix(PREFIX)?.trim();
    let words: Vec<&str> = rest.split_whitespace().collect();
    let number = |at: usize| words.get(at)?.parse::<u64>().ok();
    match words.as_slice() {
        ["up", _, release, ..] => Some(Line::Up((*release).to_owned())),
        ["error", ..] => Some(Line::Error(rest["error".len()..].trim().to_owned())),
        ["grow", "memmap_on_memory", value] => Some(Line::Memmap((*value).to_owned())),
        ["grow", "waiting", _] => Some(Line::Waiting(number(2)?)),
        ["grow", "memtotal", _] => Some(Line::MemTotal(number(2)?)),
        ["dmesg", ..] => Some(Line::Kernel(rest["dmesg".len()..].trim().to_owned())),
        _ => None,
    }
}

/// The /init script: the driver, then the parameter's value, then MemTotal
/// (kB) and the kernel's new memory messages every two seconds.
fn init_script(module_names: &[String]) -> String {
    linux::device_script(
        module_names,
        &format!(
            "\x20   echo \"{PREFIX} grow memmap_on_memory $(cat /sys/module/memory_hotplug/parameters/memmap_on_memory 2>/dev/null || echo absent)\"\n\
             \x20   dmesg -c > /dev/null\n\
             \x20   set -- $(grep MemTotal /proc/meminfo)\n\
             \x20   echo \"{PREFIX} grow waiting $2\"\n\
             \x20   while :; do\n\
             \x20       sleep 2\n\
             \x20       set -- $(grep MemTotal /proc/meminfo)\n\
             \x20       echo \"{PREFIX} grow memtotal $2\"\n\
             \x20       dmesg -c | grep -iE '{MEMORY_WORDS}' | head -n 4 | sed 's/^/{PREFIX} dmesg /'\n\
             \x20   done\n"
        ),
    )
}

/// One grow as Linux made it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct LinuxGrow {
    /// The kernel release, as `uname -r` says.
    pub(super) release: String,
    /// /sys/module/memory_hotplug/parameters/memmap_on_memory.
    memmap_on_memory: String,
    /// The grow and the shrink back, as the host timed them.
    grow: Resized,
    shrink: Option<Resized>,
    /// The guest's MemTotal before the grow and after it, in KiB.
    memtotal_kib: (Option<u64>, Option<u64>),
    /// The kernel's messages about memory during the run (the first few).
    kernel_lines: Vec<String>,
}

/// Boots Linux with [`BOOT_MIB`] and a `target_mib` device, grows by all
/// of it and shrinks back to [`BOOT_MIB`] of it.
pub(super) fn grow_once(
    prepared: &Prepared,
    target_mib: u64,
    memmap: Memmap,
) -> Result<LinuxGrow, String> {
    grow::check_host_memory(target_mib)?;
    let initramfs = prepared
        .guest
        .initramfs(&init_script(&prepared.module_names()), &prepared.modules);
    prepared.boot_with_device(
        &initramfs,
        memmap.append(),
        (BOOT_MIB, target_mib),
        |console, socket| follow(console, socket, target_mib),
    )
}

/// Asks for `mib` and polls `size` until it is reached, `wait` passes, or
/// it stays put for [`STALL_WAIT`]; QEMU gone counts as not reached, at
/// the size last seen.
fn resize(socket: &Path, mib: u64, wait: Duration) -> Result<Resized, String> {
    let mut qmp = Qmp::connect(socket, Duration::from_secs(10))?;
    let mut plugged = qmp.plugged_size()?;
    let limits = Limits {
        total: wait,
        stall: STALL_WAIT,
        poll: Duration::from_millis(10),
    };
    Ok(qmp.resize(mib, &mut plugged, limits)?.0)
}

/// Follows the console: the grow when the guest waits for it, the shrink
/// once the guest has said its MemTotal after the grow.
fn follow(mut console: Console, socket: &Path, target_mib: u64) -> Result<LinuxGrow, String> {
    let started = Instant::now();
    let (mut release, mut memmap, mut error) = (String::new(), String::new(), None);
    let (mut before, mut after, mut kernel_lines) = (None, None, Vec::new());
    let mut resizer: Option<thread::JoinHandle<Result<Resized, String>>> = None;
    let (mut grown, mut shrunk): (Option<Resized>, Option<Resized>) = (None, None);
    // The resize just finished, until the guest's next MemTotal (or five
    // seconds) says what it left: the grow's is the figure.
    let mut pending: Option<(Instant, Resized, u8)> = None;
    loop {
        if started.elapsed() > SETUP_WAIT + GROW_WAIT + SHRINK_WAIT || error.is_some() {
            break;
        }
        if resizer
            .as_ref()
            .is_some_and(thread::JoinHandle::is_finished)
        {
            let handle = resizer.take().expect("checked above");
            match handle.join() {
                Ok(Ok(done)) => pending = Some((Instant::now(), done, 0)),
                Ok(Err(problem)) => error = Some(format!("QMP: {problem}")),
                Err(_) => error = Some("the QMP thread panicked".to_owned()),
            }
        }
        let line = console.lines.recv_timeout(Duration::from_millis(50));
        let memtotal = match &line {
            Ok((_, text)) => match parse_line(text) {
                Some(Line::MemTotal(kib)) => Some(kib),
                _ => None,
            },
            Err(_) => None,
        };
        // The MemTotal after a resize is the second line after it: the
        // first may have been read while the last blocks were onlined.
        if let Some((_, _, seen)) = pending.as_mut() {
            *seen += u8::from(memtotal.is_some());
        }
        let settled = pending
            .as_ref()
            .is_some_and(|(at, _, seen)| *seen >= 2 || at.elapsed() > Duration::from_secs(6));
        if settled {
            let (_, done, _) = pending.take().expect("checked above");
            if grown.is_none() {
                after = memtotal.or(after);
                grown = Some(done);
                let socket = socket.to_owned();
                resizer = Some(thread::spawn(move || {
                    resize(&socket, BOOT_MIB, SHRINK_WAIT)
                }));
            } else {
                shrunk = Some(done);
                break;
            }
        }
        let Ok((_, text)) = line else {
            if console.child.try_wait().ok().flatten().is_some() && resizer.is_none() {
                break;
            }
            continue;
        };
        let text = text.trim();
        match parse_line(text) {
            Some(Line::Up(up)) => release = up,
            Some(Line::Memmap(value)) => memmap = value,
            Some(Line::Error(what)) => error = Some(what),
            Some(Line::Waiting(kib)) => {
                before = Some(kib);
                let socket = socket.to_owned();
                resizer = Some(thread::spawn(move || {
                    resize(&socket, target_mib, GROW_WAIT)
                }));
            }
            Some(Line::MemTotal(kib)) if grown.is_none() => after = Some(kib),
            Some(Line::Kernel(message)) => keep(&mut kernel_lines, message),
            // Messages the console shows at loglevel 4 (errors, panics).
            None if text.contains("Out of memory") || text.contains("Kernel panic") => {
                keep(&mut kernel_lines, text.to_owned());
            }
            _ => {}
        }
    }
    if let Ok(mut qmp) = Qmp::connect(socket, Duration::from_secs(2)) {
        let _ = qmp.execute("quit", None);
    }
    let _ = console.child.kill();
    let (_, said) = console.finish();
    // A resize still under way ends now that QEMU is gone, at the size
    // last seen.
    let last = resizer.take().and_then(|handle| handle.join().ok()?.ok());
    for done in pending.map(|(_, done, _)| done).into_iter().chain(last) {
        match grown {
            None => grown = Some(done),
            Some(_) => shrunk = Some(done),
        }
    }
    if let Some(error) = error {
        return Err(format!(
            "Linux's grow went wrong: {error}; QEMU said: {}",
            said.trim()
        ));
    }
    let Some(grow) = grown else {
        return Err(format!(
            "Linux never waited for the grow within {} s; QEMU said: {}",
            started.elapsed().as_secs(),
            said.trim()
        ));
    };
    Ok(LinuxGrow {
        release,
        memmap_on_memory: memmap,
        grow,
        shrink: shrunk,
        memtotal_kib: (before, after),
        kernel_lines,
    })
}

/// Keeps the kernel's messages, at most a few hundred: the driver's first
/// ones say what it was asked, the last ones where and why it stopped.
fn keep(lines: &mut Vec<String>, line: String) {
    if lines.len() < 400 {
        lines.push(line);
    }
}

/// The messages a case shows: the first two and the last four.
fn first_and_last(lines: &[String]) -> Vec<String> {
    if lines.len() <= 6 {
        return lines.to_vec();
    }
    let mut shown = lines[..2].to_vec();
    shown.push(format!("({} more)", lines.len() - 6));
    shown.extend_from_slice(&lines[lines.len() - 4..]);
    shown
}

/// Adds Linux's case for a grow to `target_mib` from one run: the host's
/// time or "not reached" with the size it got to, MemTotal after it, and
/// the kernel's messages.
pub(super) fn add_case(report: &mut Report, target_mib: u64, memmap: Memmap, run: &LinuxGrow) {
    let mut case = Case::new(
        grow::case_name(target_mib),
        memmap.implementation(),
        128 << 8,
    );
    case = match run.grow.latency_ms {
        Some(ms) => case.with("host_ms", (ms * 10.0).round() / 10.0),
        None => case.with("host_ms", "not reached"),
    };
    if let Some(ms) = run.shrink.as_ref().and_then(|shrink| shrink.latency_ms) {
        case = case.with("shrink_host_ms", (ms * 10.0).round() / 10.0);
    }
    let mib = |kib: Option<u64>| kib.map(|kib| kib >> 10);
    report.cases.push(
        case.with("plugged_mib", run.grow.plugged_mib)
            .with(
                "reached",
                format!("{} of 1", u8::from(run.grow.latency_ms.is_some())),
            )
            .with("memtotal_before_mib", mib(run.memtotal_kib.0))
            .with("memtotal_mib", mib(run.memtotal_kib.1))
            .with("memmap_on_memory", run.memmap_on_memory.clone())
            .with("invariants_ok", memtotal_follows(run))
            .with("kernel_messages", first_and_last(&run.kernel_lines)),
    );
}

/// Whether the guest's MemTotal grew by what the device plugged, less at
/// most 2 % (the `struct page`s, 1.6 %, when they live in the added
/// memory): memory the device counts as plugged is memory Linux can use.
fn memtotal_follows(run: &LinuxGrow) -> bool {
    let (Some(before), Some(after)) = run.memtotal_kib else {
        return false;
    };
    let plugged_kib = run.grow.plugged_mib << 10;
    let grown_kib = after.saturating_sub(before);
    grown_kib <= plugged_kib && grown_kib >= plugged_kib - plugged_kib / 50
}

/// The report's note on Linux's grows.
pub(super) fn note(release: &str) -> String {
    format!(
        "linux grow: Debian's Linux {release}, {BOOT_MIB} MiB, the same device, memory onlined \
         as it is added (memhp_default_state=online); one run each, host-timed as hotkern's; \
         not reached: the size stayed put {} s or took over {} s, plugged_mib says where it \
         stopped; memtotal_mib: the guest's MemTotal after the grow; memmap_on_memory: \
         /sys/module/memory_hotplug/parameters/memmap_on_memory in that run \
         (linux-memmap_on_memory boots with memory_hotplug.memmap_on_memory=1); \
         kernel_messages: the kernel's first and last messages about memory during it",
        STALL_WAIT.as_secs(),
        GROW_WAIT.as_secs()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scripts_lines_parse_and_others_do_not() {
        assert_eq!(
            parse_line("hotkern-linux: grow waiting 214312\r"),
            Some(Line::Waiting(214_312))
        );
        assert_eq!(
            parse_line("hotkern-linux: grow memtotal 67321000"),
            Some(Line::MemTotal(67_321_000))
        );
        assert_eq!(
            parse_line("hotkern-linux: grow memmap_on_memory N"),
            Some(Line::Memmap("N".into()))
        );
        assert_eq!(
            parse_line("hotkern-linux: dmesg [ 9.1] virtio_mem virtio0: adding memory failed"),
            Some(Line::Kernel(
                "[ 9.1] virtio_mem virtio0: adding memory failed".into()
            ))
        );
        assert_eq!(parse_line("hotkern-linux: grow memtotal many"), None);
        assert_eq!(parse_line("grow memtotal 5"), None);
    }

    #[test]
    fn the_script_reads_the_parameter_after_the_driver_and_before_waiting() {
        let script = init_script(&["virtio_mem.ko.xz".into()]);
        let insmod = script.find("insmod /tmp/virtio_mem.ko").unwrap();
        let parameter = script
            .find("/sys/module/memory_hotplug/parameters/memmap_on_memory")
            .unwrap();
        let waiting = script.find("grow waiting").unwrap();
        assert!(insmod < parameter && parameter < waiting, "{script}");
        assert!(Memmap::OnMemory
            .append()
            .ends_with("memory_hotplug.memmap_on_memory=1"));
        assert!(!Memmap::Default.append().contains("memmap_on_memory"));
    }

    #[test]
    fn a_grow_not_reached_says_where_it_stopped_and_why() {
        let run = LinuxGrow {
            release: "6.1.0-56-amd64".into(),
            memmap_on_memory: "N".into(),
            grow: Resized {
                requested_mib: 65_536,
                plugged_mib: 9_216,
                latency_ms: None,
            },
            shrink: Some(Resized {
                requested_mib: 256,
                plugged_mib: 256,
                latency_ms: Some(812.34),
            }),
            memtotal_kib: (Some(200_000), Some(9_600_000)),
            kernel_lines: vec!["virtio_mem virtio0: adding memory failed".into()],
        };
        let mut report = Report::new("memory");
        add_case(&mut report, 65_536, Memmap::Default, &run);
        let case = report.case("grow/64G-from-256M", "linux").unwrap();
        assert!(case
            .extra
            .contains(&("host_ms".into(), "not reached".into())));
        assert_eq!(case.figure("plugged_mib"), Some(9216.0));
        assert_eq!(case.figure("shrink_host_ms"), Some(812.3));
        assert_eq!(case.figure("memtotal_mib"), Some(9375.0));
        assert!(case.extra.contains(&("reached".into(), "0 of 1".into())));
        assert!(case
            .extra
            .contains(&("memmap_on_memory".into(), "N".into())));
        assert!(note("6.1.0-56-amd64").contains("Linux 6.1.0-56-amd64,"));
        let lines: Vec<String> = (0..9).map(|at| at.to_string()).collect();
        assert_eq!(
            first_and_last(&lines),
            ["0", "1", "(3 more)", "5", "6", "7", "8"].map(String::from)
        );
    }
}
