//! The Linux guest the benchmarks and `hotkern boot --linux` compare
//! hotkern with: Debian's own kernel booted under QEMU with an initramfs
//! ([`cpio`]) of a static busybox and a script as /init. What the script
//! does and what the host reads from the console is each caller's: CPU
//! hotplug for `bench cpuhp --linux`, virtio-mem resizes for `boot
//! --linux`. Where the kernel and busybox come from, per architecture, is
//! [`packages`]'.

pub mod cpio;
pub mod packages;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub use packages::MissingPackages;

use crate::qemu::console::Console;
use crate::qemu::{self, Architecture, QemuConfig};

/// What the guest's script starts its own console lines with.
pub const PREFIX: &str = "hotkern-linux:";
/// What the guest is made of, found on this machine.
pub struct Guest {
    /// The architecture the kernel and busybox are built for.
    pub arch: Architecture,
    /// Debian's kernel image, `vmlinuz-RELEASE`.
    pub kernel: PathBuf,
    /// A static busybox: the initramfs has no C library.
    pub busybox: Vec<u8>,
}

impl Guest {
    /// Finds Debian's kernel and a static busybox for `arch` where
    /// [`packages::root`] says, or names the packages that would provide
    /// them and the command that gets them.
    ///
    /// ```ignore
    /// let guest = Guest::find(Architecture::Aarch64)?; // after scripts/setup-linux-arm64
    /// assert!(guest.kernel.ends_with("boot/vmlinuz-6.1.0-56-arm64"));
    /// ```
    pub fn find(arch: Architecture) -> Result<Guest, MissingPackages> {
        // No cache directory at all: look in one that cannot exist, so the
        // message names the packages all the same.
        let root = packages::root(arch).unwrap_or_else(|| {
            PathBuf::from(format!("$HOME/.cache/hotkern/linux-{}", arch.debian_name()))
        });
        let found = packages::find_in(arch, &root)?;
        Ok(Guest {
            arch,
            kernel: found.kernel,
            busybox: found.busybox,
        })
    }

    /// The QEMU binary for this guest's architecture, from PATH.
    pub fn qemu(&self) -> Result<PathBuf, String> {
        let name = self.arch.qemu();
        qemu::find_in_path(name, std::env::var_os("PATH")).ok_or_else(|| {
            format!(
                "{name} not found on PATH: apt-get install {} (scripts/setup does it)",
                self.arch.package()
            )
        })
    }

    /// The QEMU configuration this guest boots with on `cpus` vCPUs and
    /// `memory_mib` MiB: its architecture's machine, qboot where that
    /// architecture has firmware and it is installed, and the kernel's
    /// console on the serial port QEMU prints.
    ///
    /// ```ignore
    /// let config = guest.qemu_config(4, 128);
    /// assert_eq!(config.append, "console=ttyAMA0"); // on aarch64
    /// ```
    pub fn qemu_config(&self, cpus: u32, memory_mib: u64) -> QemuConfig {
        QemuConfig {
            arch: self.arch,
            firmware: qemu::firmware().filter(|_| self.arch.has_firmware()),
            append: format!("console={}", self.arch.linux_console()),
            ..QemuConfig::new(self.kernel.clone(), cpus, memory_mib)
        }
    }

    /// The initramfs: busybox, the applet `sh` for the script's `#!`, the
    /// mount points, the console, `modules` (name and bytes) under /lib,
    /// and `init` as /init.
    pub fn initramfs(&self, init: &str, modules: &[(String, Vec<u8>)]) -> Vec<u8> {
        self.initramfs_with_programs(init, modules, &[])
    }

    /// [`Guest::initramfs`] with `programs` (name and bytes: static
    /// executables, as the initramfs has no C library) under /bin.
    pub fn initramfs_with_programs(
        &self,
        init: &str,
        modules: &[(String, Vec<u8>)],
        programs: &[(String, Vec<u8>)],
    ) -> Vec<u8> {
        let mut archive = cpio::Archive::new();
        for dir in ["bin", "dev", "proc", "sys", "tmp", "lib"] {
            archive.directory(dir);
        }
        archive.file("bin/busybox", 0o755, &self.busybox);
        archive.symlink("bin/sh", "busybox");
        archive.char_device("dev/console", 5, 1);
        for (name, bytes) in modules {
            archive.file(&format!("lib/{name}"), 0o644, bytes);
        }
        for (name, bytes) in programs {
            archive.file(&format!("bin/{name}"), 0o755, bytes);
        }
        archive.file("init", 0o755, init.as_bytes());
        archive.finish()
    }

    /// Boots this guest's kernel under `qemu` with `config`'s vCPUs,
    /// memory and devices and with `initramfs`, and hands its console to
    /// `follow`; the initramfs is written to a directory of its own, removed
    /// when `follow` returns.
    pub fn boot<T>(
        &self,
        qemu: &Path,
        mut config: QemuConfig,
        initramfs: &[u8],
        follow: impl FnOnce(Console) -> Result<T, String>,
    ) -> Result<T, String> {
        let dir = std::env::temp_dir().join(format!("hotkern-linux-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|error| format!("{}: {error}", dir.display()))?;
        let initrd = dir.join("initramfs.cpio");
        let followed = std::fs::write(&initrd, initramfs)
            .map_err(|error| format!("{}: {error}", initrd.display()))
            .and_then(|()| {
                config.kernel = self.kernel.clone();
                config.arch = self.arch;
                config.trace_file = None;
                config.disk = None;
                config.disk_profile = None;
                config.disk_error_at = None;
                let mut args = config.args();
                args.extend([OsString::from("-initrd"), initrd.clone().into()]);
                follow(Console::start(qemu, &args)?)
            });
        let _ = std::fs::remove_dir_all(&dir);
        followed
    }
}

/// What a guest's /init script has said so far, as a caller reads it.
pub trait Script {
    /// Takes one console line that arrived `at` after QEMU started;
    /// returns whether the script has said it is done.
    fn take(&mut self, line: &str, at: Duration) -> bool;
    /// Where the script got to and its last line, for an error.
    fn where_it_got(&self) -> String;
}

/// How long a guest may take to power off after its script said it was
/// done; a guest that prints everything but does not power off still
/// counts.
const POWER_OFF_GRACE: Duration = Duration::from_secs(5);

/// Hands the console's lines to `script` until it is done and the guest
/// powered off (or [`POWER_OFF_GRACE`] passed), or `timeout` from now;
/// an error says where the script got to when QEMU was killed or stopped
/// early.
pub(crate) fn follow_script(
    mut console: Console,
    timeout: Duration,
    script: &mut impl Script,
) -> Result<(), String> {
    let started = Instant::now();
    let deadline = started + timeout;
    let mut done_at: Option<Instant> = None;
    let timed_out = loop {
        let limit = done_at.map_or(deadline, |at| (at + POWER_OFF_GRACE).min(deadline));
        match console
            .lines
            .recv_timeout(limit.saturating_duration_since(Instant::now()))
        {
            Ok((_, line)) => {
                if script.take(&line, started.elapsed()) {
                    done_at.get_or_insert_with(Instant::now);
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break false,
            Err(mpsc::RecvTimeoutError::Timeout) if Instant::now() >= limit => {
                let _ = console.child.kill();
                break done_at.is_none();
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
        }
    };
    let (status, qemu_said) = console.finish();
    if timed_out {
        return Err(format!(
            "Linux did not finish within {} s and QEMU was killed; {}",
            timeout.as_secs(),
            script.where_it_got()
        ));
    }
    if done_at.is_none() {
        let status = status.map_or_else(|error| error.to_string(), |s| s.to_string());
        return Err(format!(
            "QEMU stopped ({status}) before the guest's script finished; {}; QEMU said: {}",
            script.where_it_got(),
            qemu_said.trim()
        ));
    }
    Ok(())
}

/// How every guest script starts, as PID 1 from the initramfs: busybox's
/// applets on PATH, proc, sysfs and tracefs mounted (`$T` names tracefs),
/// the "up" line the host waits for, and the shell pinned to CPU 0.
const INIT_PREAMBLE: &str = r#"#!/bin/sh
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t tracefs tracefs /sys/kernel/tracing
T=/sys/kernel/tracing
echo "hotkern-linux: up $(nproc) $(uname -r)"
taskset -p 1 $$ >/dev/null
"#;

/// A guest's /init: the shared preamble, then `body`.
pub fn init_script(body: &str) -> String {
    format!("{INIT_PREAMBLE}{body}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_arm64_guest_boots_on_the_virt_board_with_its_console_on_the_pl011() {
        let guest = Guest {
            arch: Architecture::Aarch64,
            kernel: PathBuf::from("/cache/boot/vmlinuz-6.1.0-56-arm64"),
            busybox: Vec::new(),
        };
        let args: Vec<String> = guest
            .qemu_config(4, 128)
            .args()
            .iter()
            .map(|arg| arg.to_string_lossy().into_owned())
            .collect();
        let line = args.join(" ");
        assert!(
            line.starts_with("-M virt,gic-version=3 -cpu cortex-a72 -accel tcg"),
            "{line}"
        );
        assert!(
            line.ends_with("-kernel /cache/boot/vmlinuz-6.1.0-56-arm64 -append console=ttyAMA0")
        );
        assert!(!line.contains("-bios"), "virt has no firmware: {line}");
        assert!(line.contains("-m 128M -smp 4"), "{line}");
        let x86 = Guest {
            arch: Architecture::X86_64,
            ..guest
        };
        let config = x86.qemu_config(4, 128);
        assert_eq!(
            (config.arch, config.append.as_str()),
            (Architecture::X86_64, "console=ttyS0")
        );
    }

    #[test]
    fn the_initramfs_holds_busybox_the_modules_and_the_script() {
        let guest = Guest {
            arch: Architecture::X86_64,
            kernel: PathBuf::from("/boot/vmlinuz-6.1.0-56-amd64"),
            busybox: b"busybox bytes".to_vec(),
        };
        let archive = guest.initramfs(
            "#!/bin/sh\necho hi\n",
            &[("virtio.ko".into(), b"ko".to_vec())],
        );
        let text = String::from_utf8_lossy(&archive);
        for name in [
            "bin/busybox",
            "bin/sh",
            "dev/console",
            "lib/virtio.ko",
            "init",
            "TRAILER!!!",
        ] {
            assert!(text.contains(name), "{name} missing");
        }
        assert!(text.contains("busybox bytes") && text.contains("echo hi"));
    }
}
