//! `bench memory --platform qemu --linux`: the same shrinks of used memory
//! in Debian's own Linux kernel, on the QEMU configuration the hotkern
//! kernel gets (TCG, its vCPUs and boot memory, the same `virtio-mem-pci`
//! device and QMP client). The guest loads its `virtio_mem` driver and
//! onlines what the device plugs into ZONE_MOVABLE
//! (`memhp_default_state=online_movable`), where Linux can migrate
//! anonymous pages out of a block it unplugs; a small static program
//! (`memory_fill.c`) then owns the fill's share of the size the shrink
//! goes to, spread at random over the whole region as the hotkern
//! kernel's owners are. Each shrink is timed on the host from the QMP
//! request until the device's `size` equals `requested-size`; one that
//! does not within [`SHRINK_WAIT`] is "not reached", with the size it got
//! to.

use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use crate::bench::trace::tools::{self, NotMeasured, Scratch};
use crate::bench::{Case, Report};
use crate::boot::linux as virtio_guest;
use crate::linux::{Guest, PREFIX};
use crate::qemu::console::Console;
use crate::qemu::qmp::{self, Qmp, Resized};
use crate::qemu::{self, HotplugMemory, QemuConfig, QEMU, QEMU_PACKAGE};

/// The fill program's source, built on the host.
const SOURCE: &str = include_str!("memory_fill.c");
/// vCPUs and boot memory, as the hotkern kernel's boots of this bench.
const CPUS: u32 = 4;
const BOOT_MIB: u64 = 128;
/// How long a shrink may take before it counts as not reached: Linux's
/// virtio_mem retries an unplug that found memory busy after 50 s
/// (`VIRTIO_MEM_RETRY_TIMER_MIN_MS` in drivers/virtio/virtio_mem.c), so
/// this leaves room for one retry.
const SHRINK_WAIT: Duration = Duration::from_secs(60);
/// Boot to userspace (8-9 s under TCG), the plug and the fill.
const SETUP_WAIT: Duration = Duration::from_secs(180);
/// The kernel command line: memory the device plugs is onlined at once,
/// into ZONE_MOVABLE.
const APPEND: &str = "console=ttyS0 memhp_default_state=online_movable loglevel=4";

/// The report's note on Linux's figures, `release` as `uname -r` said.
pub(super) fn note(release: &str) -> String {
    format!(
        "linux: Debian's Linux {release} on the same QEMU (TCG, {CPUS} vCPUs, {BOOT_MIB} MiB boot \
         memory, the same virtio-mem device), the region onlined movable \
         (memhp_default_state=online_movable), a static program's anonymous 4 KiB pages holding \
         the fill's share spread at random over the region; ms_per_128mib is the host's time \
         from the QMP request until size reached it (Linux gives no figure of its own); not \
         reached: size still short of the request after {} s (virtio_mem retries a busy unplug \
         after 50 s), plugged_mib says where it stopped; migrated: /proc/vmstat's \
         pgmigrate_success during the shrink; invariants_ok: every kept page still holds what \
         was written; linux_over_hotkern compares host_ms_per_128mib",
        SHRINK_WAIT.as_secs()
    )
}

/// What the guest found on this machine and the fill program built.
pub(super) struct Prepared {
    pub(super) qemu: PathBuf,
    pub(super) guest: Guest,
    /// The virtio modules' file names and bytes, in load order.
    pub(super) modules: Vec<(String, Vec<u8>)>,
    program: Vec<u8>,
}

impl Prepared {
    /// The virtio modules' names, in load order, for the init script.
    pub(super) fn module_names(&self) -> Vec<String> {
        self.modules.iter().map(|(name, _)| name.clone()).collect()
    }

    /// Boots the guest from `initramfs` with `append`, `boot_mib` of
    /// memory and a virtio-mem device of `size_mib` behind a fresh QMP
    /// socket, and follows its console with `follow` (which gets the
    /// socket); the socket is removed afterwards.
    pub(super) fn boot_with_device<T>(
        &self,
        initramfs: &[u8],
        append: String,
        (boot_mib, size_mib): (u64, u64),
        follow: impl FnOnce(Console, &Path) -> Result<T, String>,
    ) -> Result<T, String> {
        let socket = qemu::qmp_socket();
        let _ = std::fs::remove_file(&socket);
        let config = QemuConfig {
            firmware: qemu::firmware(),
            append,
            hotplug: Some(HotplugMemory {
                size_mib,
                qmp_socket: socket.clone(),
            }),
            ..QemuConfig::new(self.guest.kernel.clone(), CPUS, boot_mib)
        };
        let result = self.guest.boot(&self.qemu, config, initramfs, |console| {
            follow(console, &socket)
        });
        let _ = std::fs::remove_file(&socket);
        result
    }
}

/// The /init script around `body`: the shared preamble, the virtio
/// modules, then `body` if the driver took the device (an error line if
/// not), and the guest idles after.
pub(super) fn device_script(module_names: &[String], body: &str) -> String {
    crate::linux::init_script(&format!(
        "{}if {}; then\n{body}else\n\x20   echo \"{PREFIX} error no device bound to virtio_mem\"\nfi\nwhile :; do sleep 1; done\n",
        virtio_guest::load_modules(module_names),
        virtio_guest::BOUND,
    ))
}

/// Finds QEMU, Debian's kernel and its virtio modules, a static busybox
/// and a C compiler with a static C library, naming the package of each
/// missing one; builds the fill program. Runs before anything boots.
pub(super) fn prepare() -> Result<Prepared, String> {
    const COMMAND: &str = "bench memory --linux";
    let qemu = qemu::find_in_path(QEMU, std::env::var_os("PATH")).ok_or_else(|| {
        format!("{COMMAND}: {QEMU} not found on PATH: apt-get install {QEMU_PACKAGE}")
    })?;
    let (guest, module_paths) = virtio_guest::find(COMMAND)?;
    let modules = virtio_guest::module_files(&module_paths)?;
    let scratch = Scratch::new("linux-memory-fill")?;
    scratch.write(&[("memory_fill.c", SOURCE)])?;
    let binary = tools::compile(
        scratch.path(),
        "memory-fill",
        &["memory_fill.c"],
        &["-static"],
        "gcc libc6-dev",
    )
    .map_err(|error| match error {
        NotMeasured::Skip(skip) => format!("{COMMAND}: {skip}"),
        NotMeasured::Failed(error) => format!("{COMMAND}: {error}"),
    })?;
    let program =
        std::fs::read(&binary).map_err(|error| format!("{}: {error}", binary.display()))?;
    Ok(Prepared {
        qemu,
        guest,
        modules,
        program,
    })
}

/// A line of the guest's script or fill program.
#[derive(Debug, Clone, PartialEq)]
enum Line {
    Up {
        release: String,
    },
    Waiting,
    Filled {
        kept: u64,
    },
    Shrunk {
        migrated: u64,
        intact: u64,
        kept: u64,
    },
    Error(String),
}

fn parse_line(line: &str) -> Option<Line> {
    let rest = line.trim().strip_prefix(PREFIX)?.trim();
    let words: Vec<&str> = rest.split_whitespace().collect();
    let number = |at: usize| words.get(at)?.parse::<u64>().ok();
    match words.as_slice() {
        ["up", _, release, ..] => Some(Line::Up {
            release: (*release).to_owned(),
        }),
        ["error", ..] => Some(Line::Error(rest["error".len()..].trim().to_owned())),
        ["fill", "waiting", ..] => Some(Line::Waiting),
        ["fill", "filled", _] => Some(Line::Filled { kept: number(2)? }),
        ["fill", "shrunk", _, _, _] => Some(Line::Shrunk {
            migrated: number(2)?,
            intact: number(3)?,
            kept: number(4)?,
        }),
        _ => None,
    }
}

/// The /init script: the fill program once the driver took the device.
fn init_script(
    module_names: &[String],
    region_mib: u64,
    keep_mib: u64,
    quarter_mib: u64,
    seed: u64,
) -> String {
    device_script(
        module_names,
        &format!("    memory-fill {region_mib} {keep_mib} {quarter_mib} {seed}\n"),
    )
}

/// One shrink as Linux made it.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct Shrink {
    /// The kernel release, as `uname -r` says.
    pub(super) release: String,
    /// The shrink as the host timed it.
    resized: Resized,
    /// Pages Linux migrated during it and the fill's pages still intact
    /// after it, of those kept; `None` when it was not reached.
    pages: Option<(u64, u64, u64)>,
}

/// Boots Linux, plugs `region_mib`, lets the fill program own `fill` % of
/// the size the shrink goes to, and shrinks by `quarter_mib`.
pub(super) fn shrink_once(
    prepared: &Prepared,
    region_mib: u64,
    quarter_mib: u64,
    fill: u64,
    seed: u64,
) -> Result<Shrink, String> {
    let keep_mib = (region_mib - quarter_mib) * fill / 100;
    let initramfs = prepared.guest.initramfs_with_programs(
        &init_script(
            &prepared.module_names(),
            region_mib,
            keep_mib,
            quarter_mib,
            seed,
        ),
        &prepared.modules,
        &[("memory-fill".to_owned(), prepared.program.clone())],
    );
    let sizes = [region_mib, region_mib - quarter_mib];
    prepared.boot_with_device(
        &initramfs,
        APPEND.into(),
        (BOOT_MIB, region_mib),
        |console, socket| follow(console, socket, sizes),
    )
}

/// Follows the console: the plug when the fill program waits for it, the
/// shrink when it has filled, the figures when it saw the shrink.
fn follow(mut console: Console, socket: &Path, sizes: [u64; 2]) -> Result<Shrink, String> {
    let started = Instant::now();
    let (gate, gate_receiver) = mpsc::channel();
    let mut gate_receiver = Some(gate_receiver);
    let mut resizer = None;
    let (mut release, mut error, mut pages, mut last) = (None, None, None, String::new());
    let mut resizes: Option<Result<Vec<Resized>, String>> = None;
    let mut resized_at: Option<Instant> = None;
    loop {
        // Done when both the host and the program saw the shrink; the
        // program prints its figures within milliseconds of seeing it, so
        // two seconds without them means it never will.
        if resized_at.is_some_and(|at| pages.is_some() || at.elapsed() > Duration::from_secs(2)) {
            break;
        }
        if started.elapsed() > SETUP_WAIT + 2 * SHRINK_WAIT || error.is_some() {
            break;
        }
        if resizes.is_none()
            && resizer
                .as_ref()
                .is_some_and(thread::JoinHandle::is_finished)
        {
            let handle: thread::JoinHandle<_> = resizer.take().expect("checked above");
            resizes = Some(
                handle
                    .join()
                    .unwrap_or_else(|_| Err("the QMP thread panicked".to_owned())),
            );
            resized_at = Some(Instant::now());
        }
        let Ok((_, line)) = console.lines.recv_timeout(Duration::from_millis(50)) else {
            if console.child.try_wait().ok().flatten().is_some() && resizer.is_none() {
                break;
            }
            continue;
        };
        if !line.trim().is_empty() {
            last = line.clone();
        }
        match parse_line(&line) {
            Some(Line::Up { release: up }) => release = Some(up),
            Some(Line::Error(what)) => error = Some(what),
            Some(Line::Waiting) => {
                let receiver = gate_receiver.take();
                let socket = socket.to_owned();
                // The plug goes at once; the shrink waits for the fill.
                let _ = gate.send(());
                resizer = Some(thread::spawn(move || {
                    qmp::drive(&socket, &sizes, SHRINK_WAIT, receiver.as_ref())
                }));
            }
            Some(Line::Filled { .. }) => {
                let _ = gate.send(());
            }
            Some(Line::Shrunk {
                migrated,
                intact,
                kept,
            }) => pages = Some((migrated, intact, kept)),
            None => {}
        }
    }
    if let Ok(mut qmp) = Qmp::connect(socket, Duration::from_secs(2)) {
        let _ = qmp.execute("quit", None);
    }
    let _ = console.child.kill();
    let (_, said) = console.finish();
    // A resizer still waiting for the fill stops waiting when the gate
    // goes, and its QMP calls fail now that QEMU is gone.
    drop(gate);
    if let Some(handle) = resizer.take() {
        resizes.get_or_insert_with(|| {
            handle
                .join()
                .unwrap_or_else(|_| Err("the QMP thread panicked".to_owned()))
        });
    }
    if let Some(error) = error {
        return Err(format!(
            "Linux's run went wrong: {error}; QEMU said: {}",
            said.trim()
        ));
    }
    let release = release.unwrap_or_default();
    let resizes = match resizes {
        Some(Ok(resizes)) => resizes,
        Some(Err(problem)) => return Err(format!("QMP: {problem}")),
        None => {
            return Err(format!(
                "the fill program never waited for the plug within {} s; last line: {last}; \
                 QEMU said: {}",
                started.elapsed().as_secs(),
                said.trim()
            ))
        }
    };
    verdict(release, &resizes, pages)
}

/// The shrink from the resizes the host made: the plug must have been
/// reached for the shrink to mean anything.
fn verdict(
    release: String,
    resizes: &[Resized],
    pages: Option<(u64, u64, u64)>,
) -> Result<Shrink, String> {
    match resizes {
        [plug, shrink] if plug.latency_ms.is_some() => Ok(Shrink {
            release,
            resized: shrink.clone(),
            pages: pages.filter(|_| shrink.latency_ms.is_some()),
        }),
        [plug, ..] => Err(format!(
            "Linux plugged {} of {} MiB within {} s: no shrink measured",
            plug.plugged_mib,
            plug.requested_mib,
            SHRINK_WAIT.as_secs()
        )),
        [] => Err("QEMU went away before the plug".to_owned()),
    }
}

/// Adds Linux's case `name`: the median of `shrinks` per 128 MiB, a shrink
/// not reached counting as slower than any reached, so that the median is
/// "not reached" when most were; its pages migrated and checked are the
/// median shrink's.
pub(super) fn add_case(report: &mut Report, name: &str, quarter_mib: u64, shrinks: &[Shrink]) {
    let per_128mib = |shrink: &Shrink| {
        shrink
            .resized
            .latency_ms
            .map_or(f64::INFINITY, |ms| ms * 128.0 / quarter_mib as f64)
    };
    let mut sorted: Vec<&Shrink> = shrinks.iter().collect();
    sorted.sort_by(|a, b| per_128mib(a).total_cmp(&per_128mib(b)));
    let reached = shrinks
        .iter()
        .filter(|s| s.resized.latency_ms.is_some())
        .count();
    let frames = 128 << 8;
    let mut case = Case::new(name, "linux", frames);
    let Some(middle) = sorted.get(sorted.len() / 2) else {
        return;
    };
    case = match middle.resized.latency_ms {
        Some(_) => {
            let ms = (per_128mib(middle) * 10.0).round() / 10.0;
            case.ns_per_op(per_128mib(middle) * 1e6 / frames as f64)
                .with("ms_per_128mib", ms)
                .with("host_ms_per_128mib", ms)
        }
        None => case
            .with("ms_per_128mib", "not reached")
            .with("host_ms_per_128mib", "not reached")
            .with("plugged_mib", middle.resized.plugged_mib),
    };
    // Each run in the order it ran (null: not reached): under TCG on a
    // shared host one retry of virtio_mem's moves a median a long way.
    let runs: Vec<Option<f64>> = shrinks
        .iter()
        .map(|s| {
            s.resized
                .latency_ms
                .map(|_| (per_128mib(s) * 10.0).round() / 10.0)
        })
        .collect();
    case = case
        .with("shrunk_mib", quarter_mib)
        .with("reached", format!("{reached} of {}", shrinks.len()))
        .with("runs_ms_per_128mib", runs);
    if let Some((migrated, _, _)) = middle.pages {
        case = case.with("migrated", migrated);
    }
    // Every kept page of every reached shrink holds what was written.
    let intact = shrinks
        .iter()
        .all(|s| s.pages.is_none_or(|(_, intact, kept)| intact == kept));
    report.cases.push(case.with("invariants_ok", intact));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_programs_lines_parse_and_others_do_not() {
        assert_eq!(
            parse_line("hotkern-linux: up 4 6.1.0-56-amd64\r"),
            Some(Line::Up {
                release: "6.1.0-56-amd64".into()
            })
        );
        assert_eq!(
            parse_line("hotkern-linux: fill waiting 101234"),
            Some(Line::Waiting)
        );
        assert_eq!(
            parse_line("hotkern-linux: fill filled 73728"),
            Some(Line::Filled { kept: 73_728 })
        );
        assert_eq!(
            parse_line("hotkern-linux: fill shrunk 18000 73728 73728"),
            Some(Line::Shrunk {
                migrated: 18_000,
                intact: 73_728,
                kept: 73_728
            })
        );
        assert_eq!(
            parse_line("hotkern-linux: error memory-fill: mmap"),
            Some(Line::Error("memory-fill: mmap".into()))
        );
        assert_eq!(parse_line("hotkern-linux: fill shrunk 1 2"), None);
        assert_eq!(parse_line("hotkern-linux: fill filled many"), None);
        assert_eq!(
            parse_line("[    1.0] virtio_mem virtio0: plugged size: 0x0"),
            None
        );
    }

    #[test]
    fn the_script_loads_the_driver_then_runs_the_fill_with_its_sizes() {
        let script = init_script(&["virtio_mem.ko.xz".into()], 512, 288, 128, 7);
        let insmod = script.find("insmod /tmp/virtio_mem.ko").unwrap();
        let fill = script.find("memory-fill 512 288 128 7").unwrap();
        assert!(insmod < fill, "{script}");
        assert!(script.contains(virtio_guest::BOUND));
        assert!(script.starts_with("#!/bin/sh"));
    }

    fn resized(requested_mib: u64, plugged_mib: u64, latency_ms: Option<f64>) -> Resized {
        Resized {
            requested_mib,
            plugged_mib,
            latency_ms,
        }
    }

    fn shrink(latency_ms: Option<f64>, pages: Option<(u64, u64, u64)>) -> Shrink {
        Shrink {
            release: "6.1.0-56-amd64".into(),
            resized: resized(48, if latency_ms.is_some() { 48 } else { 58 }, latency_ms),
            pages,
        }
    }

    #[test]
    fn a_plug_not_reached_measures_nothing_and_a_shrink_not_reached_keeps_no_pages() {
        let plugged = resized(64, 64, Some(30.0));
        let error = verdict(String::new(), &[resized(64, 40, None)], None).unwrap_err();
        assert!(error.contains("plugged 40 of 64 MiB"), "{error}");
        let late = verdict(
            String::new(),
            &[plugged.clone(), resized(48, 58, None)],
            Some((5, 5, 5)),
        )
        .unwrap();
        assert_eq!((late.resized.plugged_mib, late.pages), (58, None));
        let done = verdict(
            String::new(),
            &[plugged, resized(48, 48, Some(12.0))],
            Some((5, 4, 5)),
        )
        .unwrap();
        assert_eq!(done.pages, Some((5, 4, 5)));
    }

    #[test]
    fn the_median_is_not_reached_when_most_shrinks_were_not() {
        let mut report = Report::new("memory");
        // 16 MiB shrinks: 128 MiB is 8 times as long.
        let reached = [
            shrink(Some(30.0), Some((900, 10, 10))),
            shrink(Some(10.0), Some((300, 10, 10))),
            shrink(None, None),
        ];
        add_case(&mut report, "shrink/used-50", 16, &reached);
        let case = report.case("shrink/used-50", "linux").unwrap();
        assert_eq!(case.figure("ms_per_128mib"), Some(240.0));
        assert_eq!(case.figure("migrated"), Some(900.0));
        assert!(case.extra.contains(&("reached".into(), "2 of 3".into())));
        assert!(case.extra.contains(&(
            "runs_ms_per_128mib".into(),
            serde_json::json!([240.0, 80.0, null])
        )));
        assert!(case.extra.contains(&("invariants_ok".into(), true.into())));

        let not = [
            shrink(None, None),
            shrink(Some(10.0), Some((300, 9, 10))),
            shrink(None, None),
        ];
        add_case(&mut report, "shrink/used-75", 16, &not);
        let case = report.case("shrink/used-75", "linux").unwrap();
        assert!(case
            .extra
            .contains(&("ms_per_128mib".into(), "not reached".into())));
        assert_eq!(case.figure("plugged_mib"), Some(58.0));
        assert_eq!(case.ns_per_op, None);
        assert!(
            case.extra.contains(&("invariants_ok".into(), false.into())),
            "a torn page in any run shows"
        );
        assert!(report.to_table().contains("not reached"));
        assert!(note("6.1.0-56-amd64").contains("Debian's Linux 6.1.0-56-amd64 on"));
    }
}
