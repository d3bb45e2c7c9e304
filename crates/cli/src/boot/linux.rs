//! `hotkern boot --linux --hotplug SIZE --resize LIST`: the anchor for the
//! virtio-mem figures. After the hotkern kernel's run, Debian's own Linux
//! kernel boots on the same QEMU configuration (vCPUs, memory, the same
//! `virtio-mem-pci` device and QMP socket) with a busybox initramfs that
//! loads its `virtio_mem` driver; memory is onlined as soon as it is added
//! (`memhp_default_state=online`). The host then makes the same resizes
//! with the same client ([`qmp::drive`]): each is timed from the QMP
//! request until QEMU's `size` reaches it.
//!
//! The guest (the kernel found in /boot and a static busybox) is
//! [`crate::linux`]'s, which names the Debian packages when one is missing.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::linux::{Guest, PREFIX};
use crate::qemu::console::Console;
use crate::qemu::qmp::{self, Qmp, Resized};
use crate::qemu::{self, Architecture, HotplugMemory, QemuConfig};

/// What the guest's script prints once its driver is bound.
const READY: &str = "hotkern-linux: virtio-mem ready";
/// Modules `virtio_mem` needs on Debian's kernel (virtio and its PCI
/// transport are modules there too), each after its own dependencies.
const MODULES: [&str; 2] = ["virtio_pci", "virtio_mem"];
/// How long one resize may take before the host goes on.
const RESIZE_WAIT: Duration = Duration::from_secs(30);

/// What the Linux run gave.
#[derive(Debug, Clone)]
pub struct LinuxRun {
    /// The kernel booted.
    pub kernel: PathBuf,
    /// Its release, as the guest's `uname -r` says.
    pub release: Option<String>,
    /// Each resize as the host timed it.
    pub resizes: Vec<Resized>,
    /// Why the run stopped short, if it did.
    pub error: Option<String>,
}

impl LinuxRun {
    /// `--json`'s `"linux"` object.
    pub fn to_json(&self) -> Value {
        json!({
            "kernel": self.kernel.display().to_string(),
            "release": self.release,
            "resizes": self.resizes.iter().map(Resized::to_json).collect::<Vec<_>>(),
            "error": self.error,
        })
    }

    /// Table rows: each resize's latency, hotkern's (from `hotkern`, the
    /// top-level `"resizes"` of its report) beside Linux's.
    pub fn rows(&self, hotkern: &Value) -> String {
        let mut text = format!(
            "  linux          {} ({})\n",
            self.release.as_deref().unwrap_or("release unknown"),
            self.kernel.display()
        );
        let ms =
            |value: Option<f64>| value.map_or("not reached".to_owned(), |ms| format!("{ms:.1} ms"));
        for (index, linux) in self.resizes.iter().enumerate() {
            let ours = hotkern[index]["latency_ms"].as_f64();
            text.push_str(&format!(
                "  resize         {} MiB: hotkern {}, Linux {}\n",
                linux.requested_mib,
                ms(ours),
                ms(linux.latency_ms)
            ));
        }
        if let Some(error) = &self.error {
            text.push_str(&format!("  linux error    {error}\n"));
        }
        text
    }
}

/// Finds Debian's kernel, a static busybox and the kernel's virtio
/// modules, or says which packages to install; errors start with
/// `command`, the command that needed them (`hotkern boot --linux`).
pub fn find(command: &str) -> Result<(Guest, Vec<PathBuf>), String> {
    let guest = Guest::find(Architecture::X86_64).map_err(|error| format!("{command}: {error}"))?;
    let release = release_of(&guest.kernel)
        .ok_or_else(|| format!("{}: not named vmlinuz-RELEASE", guest.kernel.display()))?;
    let dir = Path::new("/lib/modules").join(&release);
    let dep = std::fs::read_to_string(dir.join("modules.dep")).map_err(|error| {
        format!(
            "{}/modules.dep: {error} (the package linux-image-{release} installs it)",
            dir.display()
        )
    })?;
    let modules = load_order(&dep, &MODULES)?;
    Ok((guest, modules.into_iter().map(|m| dir.join(m)).collect()))
}

/// `vmlinuz-6.1.0-56-amd64` → `6.1.0-56-amd64`.
fn release_of(kernel: &Path) -> Option<String> {
    let name = kernel.file_name()?.to_str()?;
    name.strip_prefix("vmlinuz-").map(str::to_owned)
}

/// The modules (paths relative to the release's directory) to load, in
/// order, for `wanted`: modprobe's order, each module's dependencies
/// (listed in modules.dep with the deepest last) before it, once.
fn load_order(dep: &str, wanted: &[&str]) -> Result<Vec<String>, String> {
    let mut order: Vec<String> = Vec::new();
    for name in wanted {
        let line = dep
            .lines()
            .find(|line| {
                line.split(':').next().is_some_and(|path| {
                    let file = path.rsplit('/').next().unwrap_or(path);
                    file.split('.').next() == Some(name)
                })
            })
            .ok_or_else(|| format!("modules.dep lists no {name} module"))?;
        let (module, deps) = line.split_once(':').unwrap_or((line, ""));
        for path in deps.split_whitespace().rev().chain([module.trim()]) {
            if !order.iter().any(|known| known == path) {
                order.push(path.to_owned());
            }
        }
    }
    Ok(order)
}

/// The /init script: mounts, loads the modules (unpacking `.ko.xz` with
/// busybox's unxz), says the driver is there, then idles until the host
/// quits QEMU.
fn init_script(modules: &[String]) -> String {
    let mut script = String::from(
        "#!/bin/sh\n/bin/busybox --install -s /bin\nexport PATH=/bin\n\
         mount -t proc proc /proc\nmount -t sysfs sysfs /sys\n",
    );
    script.push_str(&load_modules(modules));
    script.push_str(&format!(
        "echo \"{PREFIX} up $(nproc) $(uname -r)\"\n\
         if {BOUND}; then\n\
         \x20   echo \"{READY}\"\nelse\n\
         \x20   echo \"{PREFIX} error no device bound to virtio_mem\"\nfi\n\
         while :; do sleep 1; done\n"
    ));
    script
}

/// A shell condition: a device is bound to the `virtio_mem` driver.
pub const BOUND: &str = "[ -d /sys/bus/virtio/drivers/virtio_mem ] && \
    ls /sys/bus/virtio/drivers/virtio_mem | grep -q virtio";

/// Shell lines that load `modules` (file names under /lib, in order),
/// each failure said on the console.
pub fn load_modules(modules: &[String]) -> String {
    let mut script = String::new();
    for module in modules {
        let file = module.rsplit('/').next().unwrap_or(module);
        let load = match file.strip_suffix(".xz") {
            Some(plain) => format!("unxz -c /lib/{file} > /tmp/{plain} && insmod /tmp/{plain}"),
            None => format!("insmod /lib/{file}"),
        };
        script.push_str(&format!(
            "{load} || echo \"{PREFIX} error insmod {file}\"\n"
        ));
    }
    script
}

/// Reads the modules at `paths`: their file names and bytes, for the
/// initramfs's /lib.
pub fn module_files(paths: &[PathBuf]) -> Result<Vec<(String, Vec<u8>)>, String> {
    paths
        .iter()
        .map(|path| {
            let bytes =
                std::fs::read(path).map_err(|error| format!("{}: {error}", path.display()))?;
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or("module.ko");
            Ok((name.to_owned(), bytes))
        })
        .collect()
}

/// Boots Linux with `config`'s CPUs, memory and device and makes the
/// resizes of `sizes_mib`.
pub fn run(
    guest: &Guest,
    modules: &[PathBuf],
    qemu: &Path,
    mut config: QemuConfig,
    sizes_mib: &[u64],
    verbose: bool,
) -> Result<LinuxRun, String> {
    let files = module_files(modules)?;
    let names: Vec<String> = files.iter().map(|(name, _)| name.clone()).collect();
    let initramfs = guest.initramfs(&init_script(&names), &files);
    let socket = qemu::qmp_socket();
    config.append = "console=ttyS0 memhp_default_state=online loglevel=4".into();
    let size_mib = config.hotplug.as_ref().map_or(0, |h| h.size_mib);
    config.hotplug = Some(HotplugMemory {
        size_mib,
        qmp_socket: socket.clone(),
    });
    let result = guest.boot(qemu, config, &initramfs, |console| {
        watch(console, &socket, sizes_mib, verbose)
    });
    let _ = std::fs::remove_file(&socket);
    result.map(|(release, resizes, error)| LinuxRun {
        kernel: guest.kernel.clone(),
        release,
        resizes,
        error,
    })
}

type Watched = (Option<String>, Vec<Resized>, Option<String>);

fn watch(
    mut console: Console,
    socket: &Path,
    sizes_mib: &[u64],
    verbose: bool,
) -> Result<Watched, String> {
    let timeout = Duration::from_secs(120 + 30 * sizes_mib.len() as u64);
    let started = Instant::now();
    let (mut release, mut error, mut resizes) = (None, None, None);
    let mut last = String::new();
    while started.elapsed() < timeout {
        let Ok((_, line)) = console.lines.recv_timeout(Duration::from_millis(200)) else {
            if console.child.try_wait().ok().flatten().is_some() {
                break;
            }
            continue;
        };
        if verbose {
            eprintln!("  linux| {line}");
        }
        if let Some(rest) = line.strip_prefix(PREFIX) {
            let rest = rest.trim();
            if let Some(up) = rest.strip_prefix("up ") {
                release = up.split_whitespace().nth(1).map(str::to_owned);
            } else if let Some(what) = rest.strip_prefix("error ") {
                error = Some(what.to_owned());
            }
        }
        if !line.trim().is_empty() {
            last = line.clone();
        }
        if line.starts_with(READY) {
            // The same client and timing as for the hotkern kernel; then
            // QEMU is told to quit, as the guest idles forever.
            resizes = Some(qmp::drive(socket, sizes_mib, RESIZE_WAIT, None));
            if let Ok(mut qmp) = Qmp::connect(socket, Duration::from_secs(5)) {
                let _ = qmp.execute("quit", None);
            }
            break;
        }
        if error.is_some() {
            break;
        }
    }
    let _ = console.child.kill();
    let (_, said) = console.finish();
    match resizes {
        Some(Ok(done)) => Ok((release, done, error)),
        Some(Err(problem)) => Err(format!("QMP: {problem}")),
        None => Err(format!(
            "Linux never said its virtio_mem driver was bound ({}); last line: {last}; QEMU said: {}",
            error.unwrap_or_else(|| format!("not within {} s", timeout.as_secs())),
            said.trim()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEP: &str = "\
kernel/drivers/virtio/virtio.ko: kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/virtio/virtio_ring.ko:
kernel/drivers/virtio/virtio_pci.ko: kernel/drivers/virtio/virtio_pci_legacy_dev.ko kernel/drivers/virtio/virtio_pci_modern_dev.ko kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
kernel/drivers/virtio/virtio_pci_modern_dev.ko:
kernel/drivers/virtio/virtio_pci_legacy_dev.ko:
kernel/drivers/virtio/virtio_mem.ko.xz: kernel/drivers/virtio/virtio.ko kernel/drivers/virtio/virtio_ring.ko
";

    #[test]
    fn modules_load_after_their_dependencies_once_each() {
        let order = load_order(DEP, &MODULES).unwrap();
        let names: Vec<&str> = order
            .iter()
            .map(|p| p.rsplit('/').next().unwrap().split('.').next().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "virtio_ring",
                "virtio",
                "virtio_pci_modern_dev",
                "virtio_pci_legacy_dev",
                "virtio_pci",
                "virtio_mem"
            ]
        );
    }

    #[test]
    fn a_module_modules_dep_lacks_is_named() {
        let error = load_order("kernel/a.ko:\n", &["virtio_mem"]).unwrap_err();
        assert!(error.contains("virtio_mem"), "{error}");
    }

    #[test]
    fn the_script_unpacks_xz_modules_and_says_when_the_driver_is_bound() {
        let script = init_script(&["virtio.ko".into(), "virtio_mem.ko.xz".into()]);
        assert!(script.contains("insmod /lib/virtio.ko ||"), "{script}");
        assert!(
            script.contains("unxz -c /lib/virtio_mem.ko.xz > /tmp/virtio_mem.ko"),
            "{script}"
        );
        let insmod = script.find("insmod /lib/virtio.ko").unwrap();
        let ready = script.find(READY).unwrap();
        assert!(insmod < ready);
    }

    #[test]
    fn releases_come_from_the_kernel_file_name() {
        assert_eq!(
            release_of(Path::new("/boot/vmlinuz-6.1.0-56-amd64")).as_deref(),
            Some("6.1.0-56-amd64")
        );
        assert_eq!(release_of(Path::new("/boot/bzImage")), None);
    }

    #[test]
    fn rows_put_linux_beside_hotkern() {
        let run = LinuxRun {
            kernel: "/boot/vmlinuz-6.1.0-56-amd64".into(),
            release: Some("6.1.0-56-amd64".into()),
            resizes: vec![Resized {
                requested_mib: 128,
                plugged_mib: 128,
                latency_ms: Some(12.5),
            }],
            error: None,
        };
        let hotkern = json!([{ "requested_mib": 128, "latency_ms": 3.25 }]);
        let rows = run.rows(&hotkern);
        assert!(
            rows.contains("128 MiB: hotkern 3.2 ms, Linux 12.5 ms"),
            "{rows}"
        );
    }
}
